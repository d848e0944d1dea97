package stdinpoll

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

func TestFeederWritesInOrderThenCloses(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	f := NewFeeder(w, nil)
	f.Write([]byte("one,"))
	f.Write([]byte("two,"))
	f.End()
	f.Write([]byte("late")) // after End: dropped
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, "one,two,", string(b))
	<-f.Done()
}

func TestFeederDropUnblocksAndDiscards(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	drained := make(chan struct{}, 1)
	f := NewFeeder(w, func() { drained <- struct{}{} })
	big := make([]byte, maxQueuedBytes) // far above the pipe buffer: the write blocks
	f.Write(big)
	f.Write([]byte("x"))
	f.Drop()
	select {
	case <-f.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Drop did not unblock the writer")
	}
	assert.False(t, f.Full())
}

func TestFeederChildClosedStdin(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	r.Close() // the child closed its stdin: writes fail with EPIPE, ignored
	f := NewFeeder(w, nil)
	f.Write([]byte("a"))
	f.Write([]byte("b"))
	f.End()
	select {
	case <-f.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("feeder did not finish")
	}
}

func TestFeederRecyclesWrittenBuffers(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	f := NewFeeder(w, nil)
	assert.Nil(t, f.Buffer(), "nothing written yet")
	b := []byte("payload")
	f.Write(b)
	got := make([]byte, len(b))
	_, err = io.ReadFull(r, got)
	require.NoError(t, err)
	var back []byte
	require.Eventually(t, func() bool { back = f.Buffer(); return back != nil }, 5*time.Second, time.Millisecond)
	assert.Empty(t, back)
	assert.Same(t, &b[0], &back[:1][0])
	f.End()
	<-f.Done()
}

// A chunk the pipe has room for is in the pipe when Write returns: no
// hand-off to the writer goroutine (and no wake-up of another thread).
func TestFeederWritesIntoRoomyPipeAtOnce(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	f := NewFeeder(w, nil)
	defer func() { f.End(); <-f.Done() }()
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16)
	f.Write(chunk)
	require.NoError(t, unix.SetNonblock(int(r.Fd()), true))
	got := make([]byte, len(chunk)+1)
	n, err := unix.Read(int(r.Fd()), got)
	require.NoError(t, err)
	assert.Equal(t, len(chunk), n)
	assert.NotNil(t, f.Buffer(), "a chunk written at once is free again at once")
}

// A chunk larger than the pipe's room is written partly at once and the
// rest by the writer goroutine, and chunks after it keep their order.
func TestFeederKeepsOrderPastAFullPipe(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	f := NewFeeder(w, nil)
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*pipeBytes/16)
	f.Write(big)
	f.Write([]byte("tail"))
	f.End()
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, string(big)+"tail", string(got))
	<-f.Done()
}

// The Feeder asks for a pipe of pipeBytes (the kernel may round it up).
func TestFeederEnlargesPipe(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	f := NewFeeder(w, nil)
	defer func() { f.End(); <-f.Done() }()
	limit, err := os.ReadFile("/proc/sys/fs/pipe-max-size")
	if n, _ := strconv.Atoi(strings.TrimSpace(string(limit))); err != nil || n < pipeBytes {
		t.Skipf("pipe-max-size %q is below %d", limit, pipeBytes)
	}
	size, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, size, pipeBytes)
}

// stallingWriter holds every write until the rest of the bubble is
// blocked, so the reader fills the queue while a write is in flight.
type stallingWriter struct {
	left int
	done chan struct{}
}

func (w *stallingWriter) Write(b []byte) (int, error) {
	synctest.Wait()
	if w.left -= len(b); w.left == 0 {
		close(w.done)
	}
	return len(b), nil
}

func (w *stallingWriter) Close() error { return nil }

// feedHandler hands stdin chunks to a Feeder, as pcwrap does.
type feedHandler struct{ f *Feeder }

func (h feedHandler) Stdin(b []byte) { h.f.Write(b) }
func (feedHandler) StdinEnd()        {}
func (feedHandler) Shutdown()        {}
func (feedHandler) Error(string)     {}

// A backlog of 512 files present before launch, four times what the
// feeder queues, is consumed with no tick-length pause: every drain
// wakes the reader. A feeder that judged "was full" before its write
// would lose the wake-up when the reader filled the queue during that
// write, and the reader would wait for the next 50 ms tick.
// synctest's clock only moves when everything is blocked, so any pause
// for a tick shows as elapsed time.
func TestFeederBacklogWakesReaderWithoutTick(t *testing.T) {
	const files, size = 512, maxQueuedBytes / 128
	dir := t.TempDir()
	chunk := strings.Repeat("x", size)
	for i := int64(1); i <= files; i++ {
		require.NoError(t, os.WriteFile(filepath.Join(dir, sessiondir.SeqName(i)), []byte(data(chunk)), 0o600))
	}
	d, err := os.Open(dir)
	require.NoError(t, err)
	defer d.Close()
	synctest.Test(t, func(t *testing.T) {
		w := &stallingWriter{left: files * size, done: make(chan struct{})}
		f := NewFeeder(w, nil)
		r := New(Config{Dir: d, NoWatch: true, Backlogged: f.Full, Handler: feedHandler{f}})
		f.SetOnDrain(r.Kick)
		ctx, cancel := context.WithCancel(t.Context())
		ran := make(chan struct{})
		start := time.Now()
		go func() { defer close(ran); r.Run(ctx) }()
		select {
		case <-w.done:
		case <-time.After(time.Minute): // simulated: a bound, not a pace
			t.Fatal("backlog not consumed")
		}
		assert.Less(t, time.Since(start), TickInterval, "the reader waited for a tick")
		cancel()
		<-ran
		f.End()
		<-f.Done()
	})
}
