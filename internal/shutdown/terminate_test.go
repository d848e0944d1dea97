package shutdown

import (
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeGroup records signals; reaped makes Signal report false.
type fakeGroup struct {
	mu     sync.Mutex
	sigs   []syscall.Signal
	reaped bool
}

func (g *fakeGroup) Signal(s syscall.Signal) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reaped {
		return false
	}
	g.sigs = append(g.sigs, s)
	return true
}

func (g *fakeGroup) got() []syscall.Signal {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]syscall.Signal(nil), g.sigs...)
}

func TestTerminateEscalatesAfterGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var steps []string
		term := New(500*time.Millisecond, func() { steps = append(steps, "begin") }, func() { steps = append(steps, "ack") })
		g := &fakeGroup{}
		assert.True(t, term.Attach(g))
		term.Terminate()
		term.Terminate() // idempotent
		assert.Equal(t, []string{"begin", "ack"}, steps)
		assert.Equal(t, []syscall.Signal{syscall.SIGTERM}, g.got())
		time.Sleep(499 * time.Millisecond)
		assert.Equal(t, []syscall.Signal{syscall.SIGTERM}, g.got())
		time.Sleep(2 * time.Millisecond)
		assert.Equal(t, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, g.got())
		assert.True(t, term.Killed())
	})
}

func TestTerminateNoKillOnceReaped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		term := New(DefaultGrace, nil, nil)
		g := &fakeGroup{}
		term.Attach(g)
		term.Terminate()
		g.mu.Lock()
		g.reaped = true
		g.mu.Unlock()
		time.Sleep(DefaultGrace + time.Second)
		assert.Equal(t, []syscall.Signal{syscall.SIGTERM}, g.got())
		assert.False(t, term.Killed())
	})
}

func TestTerminateBeforeSpawnOnlyAcks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		acks := 0
		term := New(0, nil, func() { acks++ })
		term.Terminate()
		assert.Equal(t, 1, acks)
		assert.True(t, term.Terminated())
		// A child attached after terminate() still gets SIGTERM and the timer.
		g := &fakeGroup{}
		assert.False(t, term.Attach(g))
		time.Sleep(DefaultGrace + time.Millisecond)
		assert.Equal(t, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, g.got())
		assert.Equal(t, 1, acks)
	})
}

func TestStopDisarmsTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		term := New(time.Second, nil, nil)
		g := &fakeGroup{}
		term.Attach(g)
		term.Terminate()
		term.Stop()
		time.Sleep(2 * time.Second)
		assert.Equal(t, []syscall.Signal{syscall.SIGTERM}, g.got())
	})
}

// §8.1 step 2: after Detach (the leader exited, not yet reaped) a
// terminate() that already ran still ends its grace with the SIGKILL and
// closes GraceOver; a terminate() after Detach signals only the rest.
func TestDetachKeepsTheArmedKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		term := New(200*time.Millisecond, nil, nil)
		g := &fakeGroup{}
		term.Attach(g)
		term.Terminate()
		assert.True(t, term.Detach(nil), "terminate() ran before the detach")
		select {
		case <-term.GraceOver():
			t.Fatal("grace over before the grace")
		default:
		}
		<-term.GraceOver() // simulated time: fires at the grace end
		assert.Equal(t, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, g.got())
		term.Stop()
	})
	synctest.Test(t, func(t *testing.T) {
		term := New(200*time.Millisecond, nil, nil)
		g := &fakeGroup{}
		term.Attach(g)
		assert.False(t, term.Detach(nil), "no terminate() yet")
		term.Terminate()
		assert.Empty(t, g.got(), "a detached group gets no signal")
	})
	// The descendants that outlive the leader take the group's place: a
	// first terminate() after the detach (child close) sends them TERM
	// and KILL after the grace, and never the group.
	synctest.Test(t, func(t *testing.T) {
		term := New(200*time.Millisecond, nil, nil)
		g, rest := &fakeGroup{}, &fakeGroup{}
		term.Attach(g)
		assert.False(t, term.Detach(rest))
		term.Terminate()
		<-term.GraceOver()
		assert.Empty(t, g.got(), "the group id is not used after the detach")
		assert.Equal(t, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, rest.got())
	})
	synctest.Test(t, func(t *testing.T) {
		term := New(200*time.Millisecond, nil, nil)
		g := &fakeGroup{reaped: true} // SIGTERM not delivered: nothing to wait for
		term.Attach(g)
		term.Terminate()
		<-term.GraceOver()
		assert.Empty(t, g.got())
	})
}
