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
	// groupScanInterval paces the /proc scans for living descendants
	// while terminate() waits for them within the grace (spec §8.1 step
	// 2: every 50 ms).
	groupScanInterval = 50 * time.Millisecond
)

// drain ends the run once the leader has exited (spec §8.1, §8.3): it
// drains the pipes within the bound of item 4, reaps the leader, emits
// exit and then shutdownAck through terminate() (child close, which also
// sends SIGTERM to every descendant left), ends those within the grace
// and restKillWait, stops the reader and flushes the output. It returns
// the exit status of §2.5.
func (s *session) drain(ch *child, r *routines) int {
	s.drainPipes(ch, r)
	if s.term.Detach(reach{c: s.contain}) {
		s.awaitRest()
	}
	code, sig := shutdown.Status(ch.group.Reap())
	if s.term.Terminated() {
		// A terminate() under way acknowledges before the exit, as
		// always: its signals reach descendants one by one, so the
		// leader may die before the ack is out.
		<-s.term.Done()
	}
	s.reportOOM(sig)
	s.out.Emit(frame.ExitFrame(code, sig))
	s.term.Terminate() // child close: TERM to what is left, shutdownAck after exit
	s.endRest()
	s.term.Stop()
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

// drainPipes waits for both pumps to reach EOF, killing every descendant
// when they hold the pipes past drainWait (item 4).
func (s *session) drainPipes(ch *child, r *routines) {
	drained := make(chan struct{})
	go func() { r.pumps.Wait(); close(drained) }()
	if waitFor(drained, drainWait) {
		return
	}
	// The leader is unreaped, so its group id is still ours.
	reach{c: s.contain, g: ch.group}.Signal(syscall.SIGKILL)
	if waitFor(drained, drainAfterKill) {
		return
	}
	// A holder that is no descendant: stop reading what never ends.
	now := time.Now()
	ch.stdout.SetReadDeadline(now)
	ch.stderr.SetReadDeadline(now)
	<-drained
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
