package pcwrap

import (
	"bytes"
	"os"
	"path/filepath"
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
	e := NewStdoutEmitter(&buf, nil)
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

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }

func TestStdoutEmitterBroken(t *testing.T) {
	e := NewStdoutEmitter(failWriter{}, nil)
	e.Emit(frame.ShutdownAckFrame())
	<-e.Broken()
	e.Emit(frame.ShutdownAckFrame())
	e.Close()
}

func TestEventsEmitterFiles(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	e := NewEventsEmitter(f, nil)
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
	e := NewEventsEmitter(f, nil)
	e.FailFast()
	e.Emit(frame.ShutdownAckFrame())
	e.Close()
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b))
}

func TestEventsEmitterPausesUntilWritableOrShutdown(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	e := NewEventsEmitter(f, nil)
	require.NoError(t, os.Remove(dir)) // every write now fails (ENOENT)
	e.Emit(frame.ShutdownAckFrame())
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("a failed write must pause, not drop, while running")
	case <-time.After(3 * eventRetryInterval):
	}
	e.FailFast()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("FailFast did not end the retries")
	}
}

// EmitData writes the same frame as Emit(DataFrame(...)) and hands its
// buffer back through DataBuffer once written, in both modes.
func TestEmitDataRecyclesBuffers(t *testing.T) {
	var buf syncbuf.Buffer
	e := NewStdoutEmitter(&buf, nil)
	seen := map[*byte]bool{}
	for i := range 200 {
		b := e.DataBuffer(8)
		require.Len(t, b, 8)
		seen[&b[:1][0]] = true
		n := copy(b, []byte{'a' + byte(i%26)})
		e.EmitData(frame.StreamStderr, b[:n])
	}
	e.Close() // every frame written, so every buffer offered back
	again := e.DataBuffer(8)
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
	ev := NewEventsEmitter(d.Events, nil)
	b := ev.DataBuffer(3)
	copy(b, "abc")
	ev.EmitData(frame.StreamStdout, b)
	ev.Close()
	body, err := os.ReadFile(filepath.Join(session, sessiondir.EventsDir, sessiondir.SeqName(1)))
	require.NoError(t, err)
	assert.Equal(t, `{"type":"data","stream":"stdout","data":"YWJj"}`+"\n", string(body))
}
