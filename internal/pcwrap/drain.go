package pcwrap

import (
	"syscall"
	"time"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/shutdown"
)

// Bounds of the output drain (spec §8.1 item 4).
const (
	// drainWait: after the leader exited, how long descendants may keep
	// the pipes open before the group is killed (spec: 2000 ms, the
	// os/exec WaitDelay idea).
	drainWait = 2000 * time.Millisecond
	// drainAfterKill: after that SIGKILL, how long buffered output may
	// still be read; a holder outside the group cannot stall exit.
	drainAfterKill = 500 * time.Millisecond
	// groupScanInterval paces the /proc scans for live group members
	// while an exited leader is kept unreaped after terminate() (spec
	// §8.1 step 2: every 50 ms, bounded by the grace).
	groupScanInterval = 50 * time.Millisecond
)

// drain ends the run once the leader has exited (spec §8.1): it drains
// the pipes within the bound of item 4, reaps the leader, emits exit and
// then shutdownAck through terminate() (child close), stops the reader
// and flushes the output. It returns the exit status of §2.5.
func (s *session) drain(ch *child, r *routines) int {
	s.drainPipes(ch, r)
	if s.term.Detach() {
		s.awaitGroup(ch)
	}
	code, sig := shutdown.Status(ch.group.Reap())
	s.term.Stop()
	s.out.Emit(frame.ExitFrame(code, sig))
	s.term.Terminate() // child close: the kill is a no-op, shutdownAck follows exit
	r.stopReader()
	<-r.readerDone
	<-ch.feeder.Done()
	ch.stdout.Close()
	ch.stderr.Close()
	s.out.Close()
	if code == nil {
		return ExitFailure
	}
	return *code
}

// drainPipes waits for both pumps to reach EOF, killing the group when
// descendants hold the pipes past drainWait (item 4).
func (s *session) drainPipes(ch *child, r *routines) {
	drained := make(chan struct{})
	go func() { r.pumps.Wait(); close(drained) }()
	if waitFor(drained, drainWait) {
		return
	}
	// The leader is unreaped, so its group id is still ours.
	ch.group.Signal(syscall.SIGKILL)
	if waitFor(drained, drainAfterKill) {
		return
	}
	// A holder outside the group: stop reading what never ends.
	now := time.Now()
	ch.stdout.SetReadDeadline(now)
	ch.stderr.SetReadDeadline(now)
	<-drained
}

// awaitGroup keeps the exited leader unreaped after terminate() until no
// live member of its group remains or the grace has ended with the group
// SIGKILL (spec §8.1 step 2): the zombie keeps the group id ours, so the
// SIGKILL reaches a TERM-ignoring descendant whose stdio left the pipes,
// and a group that died on SIGTERM ends the stop at once.
func (s *session) awaitGroup(ch *child) {
	t := time.NewTicker(groupScanInterval)
	defer t.Stop()
	for {
		select {
		case <-s.term.GraceOver():
			return // the group SIGKILL is sent: no scan needed
		default:
		}
		if !ch.group.HasMembers() {
			return
		}
		select {
		case <-s.term.GraceOver():
			return
		case <-t.C:
		}
	}
}

// waitFor waits up to d for c to close.
func waitFor(c <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c:
		return true
	case <-t.C:
		return false
	}
}
