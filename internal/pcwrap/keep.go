package pcwrap

import (
	"context"
	"syscall"
	"time"

	"github.com/pcrunner/pcrunner/internal/frame"
)

// keepScanInterval paces the /proc scans for living descendants while
// they run on after the leader (keep-group option): a dev server may
// run for hours, so the scan is slower than the 50 ms of a stop, and only
// decides when pcwrap may end on its own.
const keepScanInterval = 500 * time.Millisecond

// keep is the end of a run under the keep-group option
// (sessiondir.EnvKeepGroup, for client terminals, tools.md §8): once the
// leader exits by itself, pcwrap drains what the pipes hold within the
// bound of §8.1 item 4, emits exit with the leader's status, and leaves
// every other descendant running. The leader stays unreaped, so the group
// id stays ours. pcwrap then ends when terminate() runs (shutdown
// message, SIGTERM/SIGINT: the group and every descendant get TERM,
// then KILL after the grace) or when no descendant lives. done is false
// when terminate() already ran before the leader exited: the usual
// drain applies.
func (s *session) keep(ctx context.Context, ch *child, r *routines) (code int, done bool) {
	if s.term.Terminated() {
		return 0, false
	}
	drained := make(chan struct{})
	go func() { r.pumps.Wait(); close(drained) }()
	waitFor(drained, drainWait) // background jobs may hold the pipes: no kill
	c, sig := ch.group.ExitStatus()
	s.out.Emit(frame.ExitFrame(c, sig))

	t := time.NewTicker(keepScanInterval)
	defer t.Stop()
	broken := s.out.Broken()
	ctxDone := ctx.Done()
	// A leader that left nothing behind (the common case) ends pcwrap at
	// once rather than at the first scan.
	alone := !s.contain.living()
	for !alone {
		select {
		case sig := <-s.cfg.Signals:
			if sig == syscall.SIGTERM || sig == syscall.SIGINT {
				s.term.Terminate()
			}
		case <-ctxDone:
			ctxDone = nil
			s.term.Terminate()
		case <-broken:
			broken = nil
			s.term.Terminate()
		case <-s.term.Done():
			if s.term.Detach(reach{c: s.contain}) {
				s.awaitRest()
			}
			alone = true
		case <-t.C:
			alone = !s.contain.living()
		}
	}
	s.term.Detach(reach{c: s.contain}) // from here on the group id is not used
	ch.group.Reap()
	s.term.Terminate() // shutdownAck (after exit, as for a child that exits)
	s.endRest()
	s.term.Stop()
	if !waitFor(drained, drainAfterKill) {
		// A holder outside the group: stop reading what never ends.
		now := time.Now()
		ch.stdout.SetReadDeadline(now)
		ch.stderr.SetReadDeadline(now)
		<-drained
	}
	r.stopReader()
	<-r.readerDone
	<-ch.feeder.Done()
	ch.stdout.Close()
	ch.stderr.Close()
	s.out.Close()
	if c == nil {
		return ExitFailure, true
	}
	return *c, true
}
