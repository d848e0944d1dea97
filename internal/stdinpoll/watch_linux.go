package stdinpoll

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// watch turns inotify activity on stdin/ into a coalesced wake-up channel:
// any event or a queue overflow (after which only a full rescan is safe,
// and every scan is full) sends at most one pending signal.
type watch struct {
	w    *fsnotify.Watcher
	c    chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
	// overflows counts queue overflows (loop goroutine only).
	overflows int
}

// newWatch watches the directory held by dir through /proc/self/fd, so a
// later swap of the path cannot redirect the watch.
func newWatch(dir *os.File) (*watch, error) {
	fw, err := fsnotify.NewWatcher()
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
	w := &watch{w: fw, c: make(chan struct{}, 1), done: make(chan struct{})}
	w.wg.Add(1)
	go w.loop()
	return w, nil
}

func (w *watch) loop() {
	defer w.wg.Done()
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.w.Events:
			if !ok {
				return
			}
			if hookLoseEvent(ev) {
				w.overflow() // the test hook turned this event into an overflow
				continue
			}
			w.signal()
		case err, ok := <-w.w.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.overflow()
			}
		}
	}
}

// overflow: events were lost; every scan lists the whole directory, so
// one more scan is the full rescan the spec requires.
func (w *watch) overflow() {
	w.overflows++
	w.signal()
}

func (w *watch) signal() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

func (w *watch) close() {
	close(w.done)
	w.w.Close()
	w.wg.Wait()
}
