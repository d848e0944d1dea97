package stdinpoll

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// syncRecorder is a Handler safe across goroutines.
type syncRecorder struct {
	mu  sync.Mutex
	got []string
}

func (r *syncRecorder) add(s string)   { r.mu.Lock(); r.got = append(r.got, s); r.mu.Unlock() }
func (r *syncRecorder) Stdin(b []byte) { r.add("stdin:" + string(b)) }
func (r *syncRecorder) StdinEnd()      { r.add("end") }
func (r *syncRecorder) Shutdown()      { r.add("shutdown") }
func (r *syncRecorder) Error(m string) { r.add("error:" + m) }
func (r *syncRecorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// runReader runs a Reader over a temp dir until the test ends.
func runReader(t *testing.T, noWatch bool, maxRetries int) (string, *syncRecorder) {
	dir := t.TempDir()
	f, err := os.Open(dir)
	require.NoError(t, err)
	rec := &syncRecorder{}
	r := New(Config{Dir: f, Handler: rec, NoWatch: noWatch, MaxRetries: maxRetries})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		f.Close()
	})
	return dir, rec
}

func publish(t *testing.T, dir string, seq int64, body string) {
	tmp := filepath.Join(dir, "upload.tmp")
	require.NoError(t, os.WriteFile(tmp, []byte(body), 0o600))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, sessiondir.SeqName(seq))))
}

// TestRunDeliversAfterIdle: after the queue has been idle (500 ms idle
// ticks), a new file is still delivered through inotify, and a gap is
// still given up after its tick budget.
func TestRunDeliversAfterIdle(t *testing.T) {
	dir, rec := runReader(t, false, 3)
	time.Sleep(idleTickInterval + 100*time.Millisecond) // fall idle
	publish(t, dir, 1, data("a"))
	assert.Eventually(t, func() bool { return len(rec.snapshot()) == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(idleTickInterval + 100*time.Millisecond)
	publish(t, dir, 3, data("c"))
	assert.Eventually(t, func() bool { return len(rec.snapshot()) == 3 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, []string{"stdin:a", "error:Advanced past missing stdin files 2 to 2 after 3 retries.", "stdin:c"}, rec.snapshot())
}

// TestRunWithoutInotify: tick scans alone deliver in order.
func TestRunWithoutInotify(t *testing.T) {
	dir, rec := runReader(t, true, 0)
	publish(t, dir, 2, data("b"))
	publish(t, dir, 1, data("a"))
	publish(t, dir, 3, `{"type":"stdinEnd"}`)
	assert.Eventually(t, func() bool { return len(rec.snapshot()) == 3 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, []string{"stdin:a", "stdin:b", "end"}, rec.snapshot())
}

// queueNames wakes for names ending in ".json" (the queue watch's rule,
// enough here), and for an overflow.
type queueNames struct{}

func (queueNames) Wakes(ev fsnotify.Event) bool { return filepath.Ext(ev.Name) == ".json" }
func (queueNames) ErrorWakes(err error) bool    { return errors.Is(err, fsnotify.ErrEventOverflow) }

// TestWatchDrain: the events already waiting are taken in one go, and
// whether any of them calls for a scan is reported, so one scan answers a
// burst; the watch's end asks for a last scan and stops the watch.
func TestWatchDrain(t *testing.T) {
	events := make(chan fsnotify.Event, 8)
	w := watch{queueNames{}, events, nil}
	assert.False(t, w.drain(), "nothing waiting")

	events <- fsnotify.Event{Name: "000000000001.json.tmp", Op: fsnotify.Create}
	events <- fsnotify.Event{Name: "000000000001.json.tmp", Op: fsnotify.Write}
	assert.False(t, w.drain(), "the writer's temporary name only")
	assert.Empty(t, events)

	events <- fsnotify.Event{Name: "000000000001.json", Op: fsnotify.Create}
	events <- fsnotify.Event{Name: "000000000002.json.tmp", Op: fsnotify.Create}
	assert.True(t, w.drain(), "a queue name among them")
	assert.Empty(t, events)
	assert.True(t, w.live())

	close(events)
	assert.True(t, w.drain(), "the end of the watch")
	assert.False(t, w.live())
	assert.False(t, w.drain(), "after its end")
}
