package sessiondir

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/frame"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeWrapper plays pcwrap's side of a stop: once the shutdown file is
// queued it consumes the queue and writes a shutdownAck event.
func fakeWrapper(t *testing.T, session string, done <-chan struct{}) {
	stdin := filepath.Join(session, StdinDir)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		b, err := os.ReadFile(filepath.Join(stdin, SeqName(2)))
		if err != nil {
			continue
		}
		m, err := frame.ParseMessage(b)
		if !assert.NoError(t, err) || m.Type != frame.MsgShutdown {
			return
		}
		_ = os.Remove(filepath.Join(stdin, SeqName(1)))
		_ = os.Remove(filepath.Join(stdin, SeqName(2)))
		writeEvents(t, session, 1, frame.ShutdownAckFrame())
		return
	}
}

func TestStopAcknowledged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		done := make(chan struct{})
		go fakeWrapper(t, d, done)
		defer close(done)
		start := time.Now()
		noAck := false
		err := Stop(context.Background(), d, StopOptions{OnNoAck: func() { noAck = true }})
		require.NoError(t, err)
		assert.False(t, noAck)
		assert.Less(t, time.Since(start), time.Second)
		assert.NoDirExists(t, d)
	})
}

// Without a running wrapper the stop waits the full 3000 ms, warns once and
// removes the directory anyway; exit/error frames do not end the wait.
func TestStopWithoutAckRemovesAnyway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		writeEvents(t, d, 999999999999, frame.ExitFrame(intp(0), "")) // forged exit
		start := time.Now()
		warnings := 0
		err := Stop(context.Background(), d, StopOptions{OnNoAck: func() { warnings++ }})
		require.ErrorIs(t, err, ErrShutdownNotAcked)
		assert.GreaterOrEqual(t, time.Since(start), ShutdownAckWait)
		assert.Equal(t, 1, warnings)
		assert.NoDirExists(t, d)
	})
}

// stdout mode has no events/: the stop counts as acknowledged once pcwrap
// consumed the queue.
func TestStopStdoutModeWaitsForDrainedQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		require.NoError(t, os.Remove(filepath.Join(d, EventsDir)))
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				time.Sleep(50 * time.Millisecond)
				if _, err := os.Stat(filepath.Join(d, StdinDir, SeqName(2))); err == nil {
					os.Remove(filepath.Join(d, StdinDir, SeqName(1)))
					os.Remove(filepath.Join(d, StdinDir, SeqName(2)))
					return
				}
			}
		}()
		start := time.Now()
		require.NoError(t, Stop(context.Background(), d, StopOptions{}))
		<-done
		assert.Less(t, time.Since(start), time.Second)
		assert.NoDirExists(t, d)
	})
}

// Security: a stop on a symlinked session dir refuses and removes nothing
// through the link.
func TestStopRefusesSymlinkedSession(t *testing.T) {
	real := newSession(t)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(real, link))
	err := Stop(context.Background(), link, StopOptions{AckWait: time.Millisecond})
	require.ErrorIs(t, err, errClientSymlink)
	assert.DirExists(t, filepath.Join(real, StdinDir))
	assert.Empty(t, dirNames(t, filepath.Join(real, StdinDir)))
}

// A symlink inside the session (pointing at a victim dir) is unlinked, not
// followed, when the directory is removed.
func TestStopRemovalDoesNotFollowSymlinks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		victim := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(victim, "keep"), []byte("x"), 0o600))
		require.NoError(t, os.Symlink(victim, filepath.Join(d, "evil")))
		_ = Stop(context.Background(), d, StopOptions{})
		assert.NoDirExists(t, d)
		assert.FileExists(t, filepath.Join(victim, "keep"))
	})
}

func TestTailPrintsFramesWithSeqUntilExit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		writeEvents(t, d, 1, stdoutFrame("hello"), frame.ExitFrame(intp(0), ""), frame.ShutdownAckFrame())
		var out bytes.Buffer
		require.NoError(t, Tail(context.Background(), d, &out, EventReaderOptions{Logger: discard(), PollOnly: true}))
		assert.Equal(t, `{"seq":1,"type":"data","stream":"stdout","data":"aGVsbG8="}`+"\n"+
			`{"seq":2,"type":"exit","code":0,"signal":null}`+"\n"+
			`{"seq":3,"type":"shutdownAck"}`+"\n", out.String())
		assert.Len(t, dirNames(t, filepath.Join(d, EventsDir)), 3, "tail removes nothing")
	})
}

func TestTailSessionVanishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		writeEvents(t, d, 1, stdoutFrame("x"))
		go func() {
			time.Sleep(time.Second)
			os.RemoveAll(d)
		}()
		var out bytes.Buffer
		err := Tail(context.Background(), d, &out, EventReaderOptions{Logger: discard(), PollOnly: true})
		require.ErrorIs(t, err, ErrSessionGone)
		assert.Contains(t, out.String(), `"seq":1`)
	})
}

func TestTailWithoutEventsDir(t *testing.T) {
	d := newSession(t)
	require.NoError(t, os.Remove(filepath.Join(d, EventsDir)))
	err := Tail(context.Background(), d, &bytes.Buffer{}, EventReaderOptions{Logger: discard(), PollOnly: true})
	require.ErrorIs(t, err, os.ErrNotExist)
}

// A stop that removes the directory right after the exit frame does not turn
// a complete tail into an error.
func TestTailExitThenRemoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		writeEvents(t, d, 1, frame.ExitFrame(intp(0), ""))
		var out bytes.Buffer
		gone := &removeAfterExit{dir: d}
		fs, err := OpenEventsDir(d)
		require.NoError(t, err)
		defer fs.Close()
		gone.EventFS = fs
		require.NoError(t, tailWith(context.Background(), gone, &out, EventReaderOptions{Logger: discard(), PollOnly: true}))
		assert.Equal(t, `{"seq":1,"type":"exit","code":0,"signal":null}`+"\n", out.String())
	})
}

type removeAfterExit struct {
	EventFS
	dir   string
	lists int
}

func (r *removeAfterExit) List() ([]string, error) {
	r.lists++
	if r.lists == 2 {
		_ = os.RemoveAll(r.dir)
	}
	return r.EventFS.List()
}

func intp(i int) *int { return &i }
