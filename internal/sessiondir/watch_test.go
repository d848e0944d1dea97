package sessiondir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchWait bounds a wait for an inotify wake-up (a loaded CI machine).
const watchWait = 10 * time.Second

// TestQueueWatchMatters: only a queue name created, renamed into place or
// written, and events on the directory itself call for a scan; the
// writers' temporary names and the reader's own removal do not, and an
// overflow wakes the reader once.
func TestQueueWatchMatters(t *testing.T) {
	const dir = "/proc/self/fd/7"
	for _, c := range []struct {
		name string
		ev   fsnotify.Event
		want bool
	}{
		{"temp create", fsnotify.Event{Name: dir + "/000000000001.json.0123456789abcdef.pcwrap-write.tmp", Op: fsnotify.Create}, false},
		{"temp write", fsnotify.Event{Name: dir + "/000000000001.json.tmp", Op: fsnotify.Write}, false},
		{"temp renamed away", fsnotify.Event{Name: dir + "/000000000001.json.tmp", Op: fsnotify.Rename}, false},
		{"rename into place", fsnotify.Event{Name: dir + "/000000000001.json", Op: fsnotify.Create}, true},
		{"written in place", fsnotify.Event{Name: dir + "/000000000001.json", Op: fsnotify.Write}, true},
		{"the reader's removal", fsnotify.Event{Name: dir + "/000000000001.json", Op: fsnotify.Remove}, false},
		{"moved away", fsnotify.Event{Name: dir + "/000000000001.json", Op: fsnotify.Rename}, false},
		{"mode change", fsnotify.Event{Name: dir + "/000000000001.json", Op: fsnotify.Chmod}, false},
		{"dir deleted", fsnotify.Event{Name: dir, Op: fsnotify.Remove}, true},
		{"dir moved", fsnotify.Event{Name: dir, Op: fsnotify.Rename}, true},
		{"a name of 16 characters", fsnotify.Event{Name: dir + "/0000000001.json.", Op: fsnotify.Create}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := queueWatch{dir: dir}
			if got := w.matters(c.ev); got != c.want {
				t.Fatalf("matters = %v, want %v", got, c.want)
			}
		})
	}
	ch := make(chan struct{}, 1)
	w := queueWatch{C: ch, c: ch, dir: dir}
	w.onError(errors.New("read failed"))
	if len(w.C) != 0 || w.Overflows() != 0 {
		t.Fatalf("another error: want no wake-up, got %d pending, %d overflows", len(w.C), w.Overflows())
	}
	w.onError(fsnotify.ErrEventOverflow)
	w.onError(fsnotify.ErrEventOverflow)
	if len(w.C) != 1 || w.Overflows() != 2 {
		t.Fatalf("overflow: want one pending wake-up and 2 overflows, got %d, %d", len(w.C), w.Overflows())
	}
}

// TestQueueWatchLive: a file renamed to a queue name wakes the watch, so
// does the removal of the directory, and Close closes C.
func TestQueueWatchLive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	w, err := WatchQueue(false, filepath.Join(dir, "missing"), dir)
	if err != nil {
		t.Fatal(err)
	}
	wait := func(what string) {
		t.Helper()
		select {
		case <-w.C:
		case <-time.After(watchWait):
			t.Fatalf("no wake-up for %s within %v", what, watchWait)
		}
	}
	tmp := filepath.Join(dir, "000000000001.json.tmp")
	if err := os.WriteFile(tmp, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "000000000001.json")); err != nil {
		t.Fatal(err)
	}
	wait("the rename")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	wait("the removal")
	w.Close()
	for range w.C { // drain a pending wake-up; then closed
	}
}

// TestQueueWatchEvents: a watch without its goroutine hands every event
// to the reader, which asks Wakes: the writer's temporary name does not
// wake it, the rename into place does; an overflow wakes through
// ErrorWakes, another error does not; Close closes Events.
func TestQueueWatchEvents(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	w, err := WatchQueueEvents(false, dir)
	if err != nil {
		t.Fatal(err)
	}
	if w.C != nil {
		t.Fatal("a watch without a goroutine has a C")
	}
	tmp := filepath.Join(dir, "000000000001.json.tmp")
	if err := os.WriteFile(tmp, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "000000000001.json")); err != nil {
		t.Fatal(err)
	}
	var woke []string
	for len(woke) == 0 {
		select {
		case ev := <-w.Events:
			if w.Wakes(ev) {
				woke = append(woke, filepath.Base(ev.Name))
			} else if filepath.Base(ev.Name) != filepath.Base(tmp) {
				t.Fatalf("%v did not wake the reader", ev)
			}
		case <-time.After(watchWait):
			t.Fatalf("no event for the rename within %v", watchWait)
		}
	}
	if woke[0] != "000000000001.json" {
		t.Fatalf("woke for %q, want the queue name", woke)
	}
	if w.ErrorWakes(errors.New("read failed")) || !w.ErrorWakes(fsnotify.ErrEventOverflow) || w.Overflows() != 1 {
		t.Fatalf("ErrorWakes: want a wake-up for the overflow only, got %d overflows", w.Overflows())
	}
	w.Close()
	for range w.Events { // what was still buffered; then closed
	}
}
