package sessiondir

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is what an EventWatch asks inotify for: a file renamed into
// events/ (how pcwrap publishes one, spec §7.2), a file written in place
// and closed (a writer without the rename), and the directory itself going
// away. Creations, writes of the temp file and the reader's own deletions
// raise nothing, so they wake nobody (fsnotify's default set woke the
// reader five times per event file, each wake a full listing).
const watchMask = unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

var jsonSuffix = []byte(JSONSuffix)

// watchBuf holds at least one event with the longest name (NAME_MAX).
const watchBuf = 16 * (unix.SizeofInotifyEvent + unix.NAME_MAX + 1)

// EventWatch wakes an events/ reader when an event file is published. C
// has room for one wake-up; more coalesce into it. A queue overflow, the
// directory's removal and a read failure also wake, so the next cycle
// lists the directory. Wake-ups only hurry a reader: it still polls.
type EventWatch struct {
	C    <-chan struct{}
	f    *os.File
	done chan struct{}
}

// WatchEvents watches the events directory at path.
func WatchEvents(path string) (*EventWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify init: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, path, watchMask); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch: %w", err)
	}
	// A non-blocking descriptor joins the runtime poller: the read below
	// parks its goroutine, and Close wakes it.
	f := os.NewFile(uintptr(fd), "inotify")
	c := make(chan struct{}, 1)
	w := &EventWatch{C: c, f: f, done: make(chan struct{})}
	go w.loop(c)
	return w, nil
}

func (w *EventWatch) loop(c chan<- struct{}) {
	defer close(w.done)
	buf := make([]byte, watchBuf)
	for {
		n, err := w.f.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil || publishes(buf[:n]) {
			select {
			case c <- struct{}{}:
			default:
			}
		}
		if err != nil {
			return // the poll carries on alone
		}
	}
}

// publishes reports whether the inotify records in b announce an event
// file (a name ending in JSONSuffix; pcwrap's temp files end in .tmp), or
// anything that calls for a listing.
func publishes(b []byte) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return true // torn record: the kernel never does this; list anyway
		}
		if ev.Mask&(unix.IN_Q_OVERFLOW|unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_UNMOUNT) != 0 {
			return true
		}
		name := b[unix.SizeofInotifyEvent:end]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		if bytes.HasSuffix(name, jsonSuffix) {
			return true
		}
		b = b[end:]
	}
	return false
}

// Close stops the watch and waits for its goroutine.
func (w *EventWatch) Close() {
	w.f.Close()
	<-w.done
}
