package stdinpoll

import (
	"errors"
	"fmt"
	"os"

	"github.com/fsnotify/fsnotify"
)

// watch is the inotify watch on stdin/. Run selects on its channels
// directly (no relay goroutine: one hop less on the latency path) and
// drains whatever queued up before scanning once.
type watch struct {
	w *fsnotify.Watcher
	// overflows counts queue overflows (Run's goroutine only).
	overflows int
}

// newWatch watches the directory held by dir through /proc/self/fd, so a
// later swap of the path cannot redirect the watch.
func newWatch(dir *os.File) (*watch, error) {
	fw, err := fsnotify.NewBufferedWatcher(watchBuffer)
	if err != nil {
		return nil, fmt.Errorf("new watcher: %w", err)
	}
	p := fmt.Sprintf("/proc/self/fd/%d", dir.Fd())
	if err := fw.Add(p); err != nil {
		if err2 := fw.Add(dir.Name()); err2 != nil {
			fw.Close()
			return nil, fmt.Errorf("watch stdin dir: %w", err2)
		}
	}
	return &watch{w: fw}, nil
}

// watchBuffer is the event channel's capacity: a burst of writer activity
// (temp file, writes, rename) queues without blocking fsnotify's reader.
const watchBuffer = 64

// event handles one event or error taken from the channels and drains the
// rest that are already queued. Any event, and a queue overflow (after
// which only a full rescan is safe; every scan is full), calls for one
// scan. It reports false when the watcher has closed.
func (w *watch) event(ev fsnotify.Event, err error, ok bool) bool {
	for {
		if !ok {
			return false
		}
		if err != nil && errors.Is(err, fsnotify.ErrEventOverflow) || err == nil && hookLoseEvent(ev) {
			w.overflows++ // the test hook turns an event into an overflow
		}
		select {
		case ev, ok = <-w.w.Events:
			err = nil
		case err, ok = <-w.w.Errors:
		default:
			return true
		}
	}
}

func (w *watch) close() { w.w.Close() }
