// Package shutdown ends pcwrap's child and everything it started (spec
// pcwrap-protocol.md §8): terminate() sends SIGTERM to the child's
// process group and to every other descendant, arms a SIGKILL after a
// grace period and acknowledges with shutdownAck. Signals reach the
// group only through the live process handle while the leader is
// unreaped, and any other descendant only through a pidfd checked
// against the process a /proc scan found (invariant I2); no numeric pid
// is ever stored and reused. pcwrap is a child subreaper (Subreaper), so
// a descendant that leaves the group (setsid, a daemon) stays in its
// tree (Tree).
package shutdown

import (
	"sync"
	"syscall"
	"time"
)

// DefaultGrace is the SIGTERM→SIGKILL grace (spec §2.2, §11: 3000 ms).
const DefaultGrace = 3000 * time.Millisecond

// signaler delivers a signal to the child's process group; it reports
// false when nothing was sent (the leader was already reaped, or the
// kernel refused).
type signaler interface {
	Signal(sig syscall.Signal) bool
}

// Terminator is terminate() of spec §8.1. It is safe for concurrent use;
// only the first Terminate acts.
type Terminator struct {
	grace time.Duration
	// begin runs first, once: mark shutting down and close the child's
	// stdin (dropping queued bytes).
	begin func()
	// ack emits shutdownAck.
	ack func()

	// graceOver is closed once a terminate() that signalled the group has
	// nothing left to wait for: the grace ended with the SIGKILL sent, or
	// no SIGTERM was delivered.
	graceOver     chan struct{}
	graceOverOnce sync.Once
	// doneC is closed when Terminate first runs.
	doneC chan struct{}

	mu      sync.Mutex // guards group, done, timer, killed and stopped
	group   signaler
	done    bool
	timer   *time.Timer
	killed  bool
	stopped bool
}

// New returns a Terminator. grace <= 0 means DefaultGrace.
func New(grace time.Duration, begin, ack func()) *Terminator {
	if grace <= 0 {
		grace = DefaultGrace
	}
	return &Terminator{grace: grace, begin: begin, ack: ack, graceOver: make(chan struct{}), doneC: make(chan struct{})}
}

// Attach attaches the spawned child's group. Before it is attached,
// Terminate only acknowledges (nothing was spawned). If Terminate already
// ran, the group gets its SIGTERM and SIGKILL timer here, so a signal
// that raced with the spawn still ends the child; Attach then reports
// false.
func (t *Terminator) Attach(g signaler) bool {
	t.mu.Lock()
	t.group = g
	done := t.done
	t.mu.Unlock()
	if !done {
		return true
	}
	// Signalling scans /proc: not under the lock.
	if g.Signal(syscall.SIGTERM) {
		t.mu.Lock()
		t.armLocked(g)
		t.mu.Unlock()
	} else {
		t.endGrace()
	}
	return false
}

// Detach takes the group back before its leader is reaped and puts rest
// in its place: the descendants that may outlive the leader (nil for
// none). A later Terminate (child close, §8.1) signals only rest, never
// the group id, as after a reap. It reports whether Terminate already
// ran; if so the group got its SIGTERM and the caller keeps the leader
// unreaped until no descendant lives or GraceOver, so that the SIGKILL
// still reaches a TERM-ignoring one.
func (t *Terminator) Detach(rest signaler) (terminated bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.group = rest
	return t.done
}

// GraceOver is closed when a terminate() that reached an attached group
// has nothing left to wait for: its grace ended and the SIGKILL was sent,
// or its SIGTERM was not delivered (no SIGKILL is armed then).
func (t *Terminator) GraceOver() <-chan struct{} { return t.graceOver }

func (t *Terminator) endGrace() { t.graceOverOnce.Do(func() { close(t.graceOver) }) }

// Terminate is idempotent: it runs begin, sends SIGTERM to the group if
// the leader is unreaped and, if that was delivered, arms a SIGKILL after
// the grace; then it emits shutdownAck. It never blocks on the child.
func (t *Terminator) Terminate() {
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return
	}
	t.done = true
	g := t.group
	t.mu.Unlock()
	defer close(t.doneC)

	if t.begin != nil {
		t.begin()
	}
	if g != nil {
		if g.Signal(syscall.SIGTERM) {
			t.mu.Lock()
			t.armLocked(g)
			t.mu.Unlock()
		} else {
			t.endGrace()
		}
	}
	if t.ack != nil {
		t.ack()
	}
}

// armLocked arms the SIGKILL timer unless Stop already ran.
func (t *Terminator) armLocked(g signaler) {
	if t.stopped {
		return
	}
	t.timer = time.AfterFunc(t.grace, func() {
		if g.Signal(syscall.SIGKILL) {
			t.mu.Lock()
			t.killed = true
			t.mu.Unlock()
		}
		t.endGrace()
	})
}

// Done is closed once Terminate has run (after its SIGTERM and ack).
func (t *Terminator) Done() <-chan struct{} { return t.doneC }

// Terminated reports whether Terminate has run.
func (t *Terminator) Terminated() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done
}

// Killed reports whether the grace expired and SIGKILL was sent.
func (t *Terminator) Killed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.killed
}

// Stop disarms the SIGKILL timer (the child is gone).
func (t *Terminator) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
	}
}
