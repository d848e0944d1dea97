package sessiondir

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is what a queue directory watch asks the kernel for: the
// events by which a queue file can appear (spec §6.3: create,
// close-write, moved-to) and the removal or move of the directory itself.
// fsnotify always adds IN_MODIFY, IN_DELETE, IN_MOVED_FROM and IN_ATTRIB:
// with it each 64 KiB stdin or event file would wake its reader four or
// five times (the writer's temporary file created and written, the
// rename's two halves, and the reader's own unlink), and every wake-up is
// a directory scan.
const watchMask = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// jsonSuffix is JSONSuffix for byte comparisons.
var jsonSuffix = []byte(JSONSuffix)

// watchReadBuf is the inotify read buffer: room for 64 events with the
// longest name (NAME_MAX 255), so a burst drains in one read.
const watchReadBuf = 64 * (unix.SizeofInotifyEvent + unix.NAME_MAX + 1)

// queueWatch is an inotify watch on a queue directory (stdin/ or
// events/). Its goroutine turns the events that matter into one pending
// wake-up on C; C is closed when the watch can no longer deliver (the
// reader's polling alone goes on).
type queueWatch struct {
	C    <-chan struct{}
	c    chan struct{}
	f    *os.File // the inotify descriptor, read through the netpoller
	done chan struct{}
	// every wakes on every event, each counted as an overflow (a test
	// hook: a reader must then find its files by full rescans alone).
	every     bool
	overflows atomic.Int64
}

// WatchQueue watches the directory at the first of paths that can be
// watched (pcwrap passes /proc/self/fd/<held fd> first, so a later swap
// of the path cannot redirect the watch). every: see queueWatch.
func WatchQueue(every bool, paths ...string) (*queueWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify init: %w", err)
	}
	err = errors.New("no path")
	for _, p := range paths {
		if _, err = unix.InotifyAddWatch(fd, p, watchMask); err == nil {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch: %w", err)
	}
	c := make(chan struct{}, 1)
	w := &queueWatch{C: c, c: c, f: os.NewFile(uintptr(fd), "inotify"), done: make(chan struct{}), every: every}
	go w.loop()
	return w, nil
}

// Overflows returns how many queue overflows the watch has seen.
func (w *queueWatch) Overflows() int64 { return w.overflows.Load() }

func (w *queueWatch) loop() {
	defer close(w.done)
	defer close(w.c)
	buf := make([]byte, watchReadBuf)
	for {
		// Any error ends the watch (os.ErrClosed after Close; nothing
		// else is worth retrying): the reader polls from then on.
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		if w.matters(buf[:n]) {
			select {
			case w.c <- struct{}{}:
			default: // a wake-up is already pending; its scan sees this too
			}
		}
	}
}

// matters reports whether any event in buf calls for a scan: a name that
// can be a queue file (ending in ".json"; the writers' temporary names
// never do), a queue overflow (after which only a full rescan is safe;
// every scan is full), or anything that happened to stdin/ itself.
func (w *queueWatch) matters(buf []byte) bool {
	scan := false
	for len(buf) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(buf) {
			return true // cannot happen (the kernel writes whole events); rescan
		}
		name := buf[unix.SizeofInotifyEvent:end]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0 || w.every:
			w.overflows.Add(1)
			scan = true
		case ev.Len == 0:
			scan = true // the directory itself: deleted, moved, the watch gone
		case bytes.HasSuffix(name, jsonSuffix):
			scan = true
		}
		buf = buf[end:]
	}
	return scan
}

// Close stops the watch and waits for its goroutine.
func (w *queueWatch) Close() {
	w.f.Close()
	<-w.done
}
