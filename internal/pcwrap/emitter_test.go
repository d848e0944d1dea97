package pcwrap

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
)

func TestStdoutEmitterLines(t *testing.T) {
	var buf syncbuf.Buffer
	e := newStdoutEmitter(&buf, nil)
	e.Emit(frame.DataFrame(frame.StreamStdout, []byte("x")))
	e.Emit(frame.ErrorFrame("boom <&>"))
	e.Emit(frame.ShutdownAckFrame())
	e.Close()
	e.Emit(frame.ShutdownAckFrame()) // after Close: dropped, no panic
	assert.Equal(t, `{"seq":1,"type":"data","stream":"stdout","data":"eA=="}
{"seq":2,"type":"error","message":"boom <&>"}
{"seq":3,"type":"shutdownAck"}
`, buf.String())
}

// emitterBound bounds every wait on the emitter goroutine in these tests:
// it does one write per frame, so anything longer is a hang.
const emitterBound = 5 * time.Second

// failWriter is a stdout whose reader went away; it counts the writes.
type failWriter struct{ writes atomic.Int32 }

func (w *failWriter) Write([]byte) (int, error) {
	w.writes.Add(1)
	return 0, os.ErrClosed
}

// A failed stdout write closes Broken, and every later frame is discarded
// without another write.
func TestStdoutEmitterBroken(t *testing.T) {
	w := &failWriter{}
	e := newStdoutEmitter(w, nil)
	e.Emit(frame.ShutdownAckFrame())
	select {
	case <-e.Broken():
	case <-time.After(emitterBound):
		t.Fatal("Broken not closed after a failed write")
	}
	e.Emit(frame.ShutdownAckFrame())
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(emitterBound):
		t.Fatal("Close did not return on a broken stdout")
	}
	assert.Equal(t, int32(1), w.writes.Load(), "no write after stdout broke")
}

func TestEventsEmitterFiles(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	e := newEventsEmitter(f, nil)
	code := 0
	e.Emit(frame.DataFrame(frame.StreamStderr, []byte("e")))
	e.Emit(frame.ExitFrame(&code, ""))
	e.Close()
	b, err := os.ReadFile(filepath.Join(dir, "000000000001.json"))
	require.NoError(t, err)
	assert.Equal(t, `{"type":"data","stream":"stderr","data":"ZQ=="}`+"\n", string(b))
	b, err = os.ReadFile(filepath.Join(dir, "000000000002.json"))
	require.NoError(t, err)
	assert.Equal(t, `{"type":"exit","code":0,"signal":null}`+"\n", string(b))
	ents, _ := os.ReadDir(dir)
	assert.Len(t, ents, 2)
}

func TestEventsEmitterNoFollowAndFailFast(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "target")
	require.NoError(t, os.WriteFile(target, []byte("keep"), 0o600))
	// A planted symlink at the temp name is never followed.
	require.NoError(t, os.Symlink(target, filepath.Join(dir, "000000000001.json.tmp")))
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	e := newEventsEmitter(f, nil)
	e.failFast()
	e.Emit(frame.ShutdownAckFrame())
	e.Close()
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b))
}

// A failed event write pauses the output and retries: the frame lands
// once the obstacle is gone, under its own seq. failFast ends the retries.
func TestEventsEmitterPausesUntilWritableOrShutdown(t *testing.T) {
	dir := t.TempDir()
	// A non-empty directory at the event's name makes its rename fail.
	blocker := filepath.Join(dir, sessiondir.SeqName(1))
	require.NoError(t, os.MkdirAll(filepath.Join(blocker, "x"), 0o700))
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	var logs syncbuf.Buffer
	e := newEventsEmitter(f, slog.New(slog.NewTextHandler(&logs, nil)))
	e.Emit(frame.ShutdownAckFrame())
	waitUntil(t, func() bool { return strings.Contains(logs.String(), "output paused, retrying") })
	require.NoError(t, os.RemoveAll(blocker))
	waitUntil(t, func() bool {
		b, err := os.ReadFile(blocker)
		return err == nil && string(b) == `{"type":"shutdownAck"}`+"\n"
	})

	// Now every write fails for good (ENOENT): only failFast ends it.
	require.NoError(t, os.RemoveAll(dir))
	e.Emit(frame.ShutdownAckFrame())
	waitUntil(t, func() bool { return strings.Count(logs.String(), "output paused, retrying") == 2 })
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	e.failFast()
	select {
	case <-closed:
	case <-time.After(emitterBound):
		t.Fatal("FailFast did not end the retries")
	}
}

// waitUntil polls cond until it holds, failing after emitterBound.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(emitterBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within the bound")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// emitData writes the same frame as Emit(DataFrame(...)) and hands its
// buffer back through dataBuffer once written, in both modes.
func TestEmitDataRecyclesBuffers(t *testing.T) {
	var buf syncbuf.Buffer
	e := newStdoutEmitter(&buf, nil)
	seen := map[*byte]bool{}
	for i := range 200 {
		b := e.dataBuffer(8)
		require.Len(t, b, 8)
		seen[&b[:1][0]] = true
		n := copy(b, []byte{'a' + byte(i%26)})
		e.emitData(frame.StreamStderr, b[:n])
	}
	e.Close() // every frame written, so every buffer offered back
	again := e.dataBuffer(8)
	assert.True(t, seen[&again[:1][0]], "a written buffer comes back")
	lines := bytes.Split(bytes.TrimSuffix([]byte(buf.String()), []byte("\n")), []byte("\n"))
	require.Len(t, lines, 200)
	for i, line := range lines {
		want := frame.Frame{Seq: int64(i + 1), Type: frame.FrameData, Stream: frame.StreamStderr, Data: []byte{'a' + byte(i%26)}}
		assert.Equal(t, string(want.AppendJSON(nil)), string(line))
	}

	session := t.TempDir()
	d, err := sessiondir.Open(session, true)
	require.NoError(t, err)
	defer d.Close()
	ev := newEventsEmitter(d.Events, nil)
	b := ev.dataBuffer(3)
	copy(b, "abc")
	ev.emitData(frame.StreamStdout, b)
	ev.Close()
	body, err := os.ReadFile(filepath.Join(session, sessiondir.EventsDir, sessiondir.SeqName(1)))
	require.NoError(t, err)
	assert.Equal(t, `{"type":"data","stream":"stdout","data":"YWJj"}`+"\n", string(body))
}

// A frame that cannot be written because the host already removed the
// session (pcwrap stop deletes it after shutdownAck) is expected while
// shutting down: logged at debug, not as an error. A real loss stays an
// error.
func TestEventsEmitterLossAfterRemovalIsQuiet(t *testing.T) {
	emitLost := func(t *testing.T, prepare func(dir string)) string {
		dir := t.TempDir()
		f, err := os.Open(dir)
		require.NoError(t, err)
		defer f.Close()
		var logs syncbuf.Buffer
		e := newEventsEmitter(f, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
		prepare(dir)
		e.failFast()
		e.Emit(frame.ExitFrame(nil, "SIGTERM"))
		e.Close() // the frame was handled: written or given up
		return logs.String()
	}
	t.Run("session removed", func(t *testing.T) {
		logs := emitLost(t, func(dir string) { require.NoError(t, os.RemoveAll(dir)) })
		assert.NotContains(t, logs, "event frame lost")
	})
	t.Run("write refused", func(t *testing.T) {
		logs := emitLost(t, func(dir string) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, sessiondir.SeqName(1), "x"), 0o700))
		})
		assert.Contains(t, logs, "level=ERROR")
		assert.Contains(t, logs, "event frame lost")
	})
}

// Two pumps and control frames at once: every stream's data keeps its
// order, a control frame emitted after a pump's data comes after it, and
// seq counts every frame once, whether a pump wrote its frame itself (an
// idle emitter) or queued it.
func TestEmitterOrderWithInlineWrites(t *testing.T) {
	var buf syncbuf.Buffer
	e := newStdoutEmitter(&buf, nil)
	const n = 2000
	done := make(chan struct{})
	for _, stream := range []string{frame.StreamStdout, frame.StreamStderr} {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range n {
				b := e.dataBuffer(8)
				e.emitData(stream, b[:copy(b, strconv.Itoa(i))])
				if i%100 == 0 {
					e.Emit(frame.ErrorFrame(stream + " " + strconv.Itoa(i)))
				}
			}
		}()
	}
	<-done
	<-done
	e.Emit(frame.ShutdownAckFrame())
	e.Close()
	next := map[string]int{}
	var last string
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 2*n+2*n/100+1)
	for i, line := range lines {
		f, err := frame.ParseFrame([]byte(line))
		require.NoError(t, err)
		require.EqualValues(t, i+1, f.Seq)
		last = f.Type
		switch f.Type {
		case frame.FrameData:
			require.Equal(t, strconv.Itoa(next[f.Stream]), string(f.Data), "%s order", f.Stream)
			next[f.Stream]++
		case frame.FrameError:
			stream, at, _ := strings.Cut(f.Message, " ")
			require.Equal(t, at, strconv.Itoa(next[stream]-1), "the error frame follows the data emitted before it")
		}
	}
	require.Equal(t, frame.FrameShutdownAck, last)
}
