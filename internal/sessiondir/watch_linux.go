package sessiondir

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/fsnotify/fsnotify"
)

// queueWatch is an fsnotify watch on a queue directory (stdin/ or
// events/). Made by WatchQueue, its goroutine turns the events that matter
// into one pending wake-up on C; C is closed when the watch can no longer
// deliver (the reader's polling alone goes on). Made by WatchQueueEvents,
// it has no goroutine and no C: the reader receives Events and Errors
// itself and asks Wakes and ErrorWakes.
//
// fsnotify asks the kernel for more than a queue needs (spec §6.3 names
// create, close-write and moved-to): each file also brings its writer's
// temporary name created and written, the rename's old name, and the
// reader's own removal. Those cost a name check here, never a scan: only
// an event that can make a queue file appear wakes the reader.
type queueWatch struct {
	C <-chan struct{}
	c chan struct{}
	// Events and Errors are fsnotify's channels (WatchQueueEvents): both
	// are closed when the watch ends.
	Events <-chan fsnotify.Event
	Errors <-chan error
	w      *fsnotify.Watcher
	dir    string        // the watched path as fsnotify names it in events
	done   chan struct{} // closed when the goroutine (WatchQueue) exits; nil without one
	// every wakes on every event, each counted as an overflow (a test
	// hook: a reader must then find its files by full rescans alone).
	every     bool
	overflows atomic.Int64
}

// eventBuffer is how many events fsnotify may hold for a WatchQueueEvents
// reader that is busy: one file brings about five (see queueWatch), so a
// burst of files is handed over in one go, where an unbuffered channel
// costs a goroutine switch per event.
const eventBuffer = 64

// WatchQueue watches the directory at the first of paths that can be
// watched (pcwrap passes /proc/self/fd/<held fd> first, so a later swap
// of the path cannot redirect the watch). every: see queueWatch.
func WatchQueue(every bool, paths ...string) (*queueWatch, error) {
	w, err := watch(every, 0, paths)
	if err != nil {
		return nil, err
	}
	c := make(chan struct{}, 1)
	w.C, w.c, w.done = c, c, make(chan struct{})
	go w.loop()
	return w, nil
}

// WatchQueueEvents is WatchQueue for a reader that takes the events in its
// own loop (one goroutine hand-off fewer per event than through C).
func WatchQueueEvents(every bool, paths ...string) (*queueWatch, error) {
	return watch(every, eventBuffer, paths)
}

func watch(every bool, buffer uint, paths []string) (*queueWatch, error) {
	var (
		fw  *fsnotify.Watcher
		err error
	)
	if buffer > 0 {
		fw, err = fsnotify.NewBufferedWatcher(buffer)
	} else {
		fw, err = fsnotify.NewWatcher()
	}
	if err != nil {
		return nil, fmt.Errorf("fsnotify new watcher: %w", err)
	}
	err = errors.New("no path")
	dir := ""
	for _, p := range paths {
		if err = fw.Add(p); err == nil {
			dir = filepath.Clean(p)
			break
		}
	}
	if err != nil {
		fw.Close()
		return nil, fmt.Errorf("fsnotify add: %w", err)
	}
	return &queueWatch{Events: fw.Events, Errors: fw.Errors, w: fw, dir: dir, every: every}, nil
}

// Overflows returns how many queue overflows the watch has seen.
func (w *queueWatch) Overflows() int64 { return w.overflows.Load() }

func (w *queueWatch) loop() {
	defer close(w.done)
	defer close(w.c)
	for {
		select {
		case ev, ok := <-w.Events:
			if !ok {
				return // closed: the reader polls from then on
			}
			if w.Wakes(ev) {
				w.wake()
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			w.onError(err)
		}
	}
}

// Wakes reports whether ev calls for a scan (matters, or every event under
// the test hook, counted as an overflow).
func (w *queueWatch) Wakes(ev fsnotify.Event) bool {
	if w.every {
		w.overflows.Add(1)
		return true
	}
	return w.matters(ev)
}

// ErrorWakes reports whether an error fsnotify reports calls for a scan.
// After an overflow only a full rescan is safe (every scan is full), so it
// wakes the reader once; any other error is fsnotify's read failing, and
// the polling finds what the watch missed.
func (w *queueWatch) ErrorWakes(err error) bool {
	if errors.Is(err, fsnotify.ErrEventOverflow) {
		w.overflows.Add(1)
		return true
	}
	return false
}

// onError is ErrorWakes for the goroutine of WatchQueue.
func (w *queueWatch) onError(err error) {
	if w.ErrorWakes(err) {
		w.wake()
	}
}

// wake leaves one wake-up pending on C.
func (w *queueWatch) wake() {
	select {
	case w.c <- struct{}{}:
	default: // a wake-up is already pending; its scan sees this too
	}
}

// matters reports whether ev calls for a scan: a queue file's name
// (ending in ".json"; the writers' temporary names never do) created,
// renamed into place or written, or anything that happened to the
// directory itself (deleted or moved: the watch is gone). A queue name's
// removal or its move away (the reader's own delivery) never adds a file.
func (w *queueWatch) matters(ev fsnotify.Event) bool {
	if ev.Name == w.dir {
		return true
	}
	return ev.Op.Has(fsnotify.Create|fsnotify.Write) && strings.HasSuffix(ev.Name, JSONSuffix)
}

// Close stops the watch and waits for its goroutine, if it has one.
func (w *queueWatch) Close() {
	w.w.Close()
	if w.done != nil {
		<-w.done
	}
}
