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
		// The child here ignores stdinEnd: shutdown comes after the exit wait.
		assert.GreaterOrEqual(t, time.Since(start), StdinEndExitWait)
		assert.Less(t, time.Since(start), StdinEndExitWait+time.Second)
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
		assert.Less(t, time.Since(start), StdinEndExitWait+time.Second)
		assert.NoDirExists(t, d)
	})
}

// A child that ends on EOF (cat) exits with its own status: the stop
// writes shutdown only after the exit frame, and does not wait out the
// exit bound.
func TestStopLetsTheChildExitOnStdinEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		done := make(chan struct{})
		defer close(done)
		go func() {
			// pcwrap running cat: stdinEnd ends cat, pcwrap reports its
			// exit and acknowledges (spec §2.5: exit, then shutdownAck).
			for {
				select {
				case <-done:
					return
				case <-time.After(10 * time.Millisecond):
				}
				b, err := os.ReadFile(filepath.Join(d, StdinDir, SeqName(1)))
				if err != nil {
					continue
				}
				m, err := frame.ParseMessage(b)
				if assert.NoError(t, err) && assert.Equal(t, frame.MsgStdinEnd, m.Type) {
					writeEvents(t, d, 1, frame.ExitFrame(intp(0), ""), frame.ShutdownAckFrame())
				}
				return
			}
		}()
		start := time.Now()
		require.NoError(t, Stop(context.Background(), d, StopOptions{}))
		assert.Less(t, time.Since(start), time.Second)
		assert.NoDirExists(t, d)
	})
}

// A wrapper that has exited (its lock is free) acknowledged whatever it
// was going to: the stop waits out neither bound.
func TestStopEndsAtOnceWhenTheWrapperIsGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		require.NoError(t, os.Remove(filepath.Join(d, EventsDir))) // stdout mode: the queue is never drained
		require.NoError(t, os.WriteFile(filepath.Join(d, LockFile), nil, 0o600))
		start := time.Now()
		noAck := false
		require.NoError(t, Stop(context.Background(), d, StopOptions{OnNoAck: func() { noAck = true }}))
		assert.False(t, noAck)
		assert.Less(t, time.Since(start), time.Second)
		assert.NoDirExists(t, d)
	})
}

// WrapperGone: no lock file yet (starting) and a held lock (running) are
// not an end; a lock file nobody holds is.
func TestWrapperGone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	require.NoError(t, os.MkdirAll(filepath.Join(path, StdinDir), 0o700))
	gone, err := WrapperGone(context.Background(), path)
	require.NoError(t, err)
	assert.False(t, gone, "no lock file: still starting")

	d, err := Open(path, true)
	require.NoError(t, err)
	gone, err = WrapperGone(context.Background(), path)
	require.NoError(t, err)
	assert.False(t, gone, "lock held: running")

	d.Close()
	gone, err = WrapperGone(context.Background(), path)
	require.NoError(t, err)
	assert.True(t, gone, "lock free: ended")
}

// WaitSendTarget waits for a session that appears within the bound.
func TestWaitSendTargetWaitsForAStartingSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s")
		go func() {
			time.Sleep(time.Second)
			_ = os.Mkdir(path, 0o700)
			time.Sleep(time.Second)
			_ = os.Mkdir(filepath.Join(path, StdinDir), 0o700)
		}()
		start := time.Now()
		require.NoError(t, WaitSendTarget(context.Background(), path, SendWait))
		assert.Less(t, time.Since(start), 3*time.Second)
	})
}

// A session that never appears is an error after the bound, naming it; an
// ended one is ErrSessionEnded at once.
func TestWaitSendTargetGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s")
		start := time.Now()
		err := WaitSendTarget(context.Background(), path, SendWait)
		require.ErrorIs(t, err, os.ErrNotExist)
		assert.Equal(t, SendWait, time.Since(start))
		assert.Equal(t, "no session directory at "+path+": no such file or directory (waited 5s for it)", err.Error())

		require.NoError(t, os.MkdirAll(filepath.Join(path, StdinDir), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(path, LockFile), nil, 0o600))
		start = time.Now()
		err = WaitSendTarget(context.Background(), path, SendWait)
		require.ErrorIs(t, err, ErrSessionEnded)
		assert.Equal(t, lockSettle, time.Since(start), "one second look, then at once")
		assert.Contains(t, err.Error(), path)
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
		require.NoError(t, Tail(context.Background(), d, &out, TailOptions{EventReaderOptions: EventReaderOptions{Logger: discard(), PollOnly: true}}))
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
		err := Tail(context.Background(), d, &out, TailOptions{EventReaderOptions: EventReaderOptions{Logger: discard(), PollOnly: true}})
		require.ErrorIs(t, err, ErrSessionGone)
		assert.Contains(t, out.String(), `"seq":1`)
	})
}

// Tail and Stop name the missing path once, without repeating what they
// were doing.
func TestTailAndStopNameTheMissingPath(t *testing.T) {
	d := newSession(t)
	require.NoError(t, os.Remove(filepath.Join(d, EventsDir)))
	err := Tail(context.Background(), d, &bytes.Buffer{}, TailOptions{EventReaderOptions: EventReaderOptions{Logger: discard(), PollOnly: true}})
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Equal(t, "no directory at "+d+"/events: no such file or directory", err.Error())

	missing := filepath.Join(t.TempDir(), "gone")
	err = Tail(context.Background(), missing, &bytes.Buffer{}, TailOptions{})
	assert.Equal(t, "no directory at "+missing+": no such file or directory", err.Error())
	err = Stop(context.Background(), missing, StopOptions{})
	assert.Equal(t, "no directory at "+missing+": no such file or directory", err.Error())
}

// --text shows a data frame's bytes as a string; other frames are as
// without it.
func TestTailText(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		writeEvents(t, d, 1, stdoutFrame("hello <&>\n"), frame.ExitFrame(intp(0), ""))
		var out bytes.Buffer
		require.NoError(t, Tail(context.Background(), d, &out, TailOptions{EventReaderOptions: EventReaderOptions{Logger: discard(), PollOnly: true}, Text: true}))
		assert.Equal(t, `{"seq":1,"type":"data","stream":"stdout","text":"hello <&>\n"}`+"\n"+
			`{"seq":2,"type":"exit","code":0,"signal":null}`+"\n", out.String())
	})
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
		require.NoError(t, tailWith(context.Background(), gone, &out, TailOptions{EventReaderOptions: EventReaderOptions{Logger: discard(), PollOnly: true}}))
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

// A pcwrap creates .pcwrap.lock a moment before it locks it: a lock file
// that is free at the first look but held at the second is a starting
// session, not an ended one. The probe never takes the lock itself, so the
// starting wrapper's own non-blocking lock cannot fail because of it.
func TestWrapperGoneLooksTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s")
		require.NoError(t, os.MkdirAll(filepath.Join(path, StdinDir), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(path, LockFile), nil, 0o600))
		locked := make(chan *Dir, 1)
		go func() {
			time.Sleep(lockSettle / 2)
			d, err := Open(path, true)
			assert.NoError(t, err, "the probe must never hold the lock")
			locked <- d
		}()
		gone, err := WrapperGone(context.Background(), path)
		require.NoError(t, err)
		assert.False(t, gone)
		if d := <-locked; d != nil {
			d.Close()
		}
	})
}
