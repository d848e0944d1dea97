package stdinpoll

import (
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	big := make([]byte, MaxQueuedBytes) // far above the pipe buffer: the write blocks
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
