package runner

import (
	"context"
	"sync"
	"time"

	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

// Automatic suspends: the runner ends its own process, resumably, when a
// per-turn runner's turn has ended (prp.md §7.4: "Per-turn runners also exit
// after their terminal events are ACKed"), when a warm runner has been idle
// for --idle-timeout-ms, or when --max-lifetime-ms ends while connected. As in
// the reference runner (durable runner loop, begin_automatic_suspend), it
// records lifecycle "suspending" and a P0 runner.suspending
// {reason, resumable: true} in one write, waits until every event is
// acknowledged, stops the agent, records "suspended" and exits 0. The server
// treats exit 0 after runner.suspending (or run.terminal) as the expected
// per-turn exit, and launches the next runnerd on the same state, which
// returns to ready.
//
// Who stops the agent, path by path:
//   - automatic suspend (per-turn end, warm idle, lifetime rotation): this
//     process, orderly (acp.md §3.6), before recording "suspended", as the
//     reference shuts its provider down; the next runnerd resumes the ACP
//     session (session/load) on session.open;
//   - runner.suspend / runner.shutdown, revoke, SIGTERM/SIGINT, lease expiry,
//     reconnect grace or deadline exceeded: this process, orderly (loop.run);
//   - a fatal error, a crash, or the server's SIGKILL after its close grace:
//     nobody in this process; the agent lives on under its detached pcwrap
//     and the next runnerd on the same state (the server's process recovery
//     or its next turn) re-adopts it (acp.md §3.5) and stops it on its own
//     exit. Without a next runnerd, the sandbox's teardown ends it.

// Reasons of runner.suspending (the reference's).
const (
	suspendPerTurn  = "per_turn_complete"
	suspendIdle     = "idle_timeout"
	suspendLifetime = "max_lifetime_rotation"
)

// suspendWait is an automatic suspend in progress.
type suspendWait struct {
	stopping    bool // the executor is being stopped
	execStopped bool
	finished    bool
}

// suspender is the automatic-suspend state the lifecycle routine shares
// with the dispatch goroutine (commands, ACKs) and executor commits.
type suspender struct {
	kick chan struct{} // one-slot wake-up of the lifecycle routine; no lock

	mu           sync.Mutex // guards the fields below
	wait         *suspendWait
	inCommand    bool      // a command is being admitted or executed
	lastActivity time.Time // the last command or turn end (warm idle clock)
	lifetimeOver bool      // --max-lifetime-ms has passed
}

// command records that a command starts (or ends) at now.
func (s *suspender) command(running bool, now time.Time) {
	s.mu.Lock()
	s.inCommand, s.lastActivity = running, now
	s.mu.Unlock()
}

// touch records activity at now for the warm idle timeout.
func (s *suspender) touch(now time.Time) {
	s.mu.Lock()
	s.lastActivity = now
	s.mu.Unlock()
}

func (s *suspender) endLifetime() {
	s.mu.Lock()
	s.lifetimeOver = true
	s.mu.Unlock()
}

// idleLeft returns how long the warm runner still has before the idle
// timeout, and whether a command or a suspend keeps it busy.
func (s *suspender) idleLeft(timeout time.Duration, now time.Time) (left time.Duration, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return timeout - now.Sub(s.lastActivity), s.inCommand || s.wait != nil
}

// status reports whether a suspend is in progress, a command runs, and the
// lifetime has passed.
func (s *suspender) status() (suspending, inCommand, lifetimeOver bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wait != nil, s.inCommand, s.lifetimeOver
}

// begin starts a suspend unless one runs; it reports whether it did.
func (s *suspender) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wait != nil {
		return false
	}
	s.wait = &suspendWait{}
	return true
}

// suspendStep is what checkSuspend does next.
type suspendStep int

const (
	suspendWaitMore suspendStep = iota // not yet: a command, an ACK or the executor
	suspendStopExec                    // stop the executor, then look again
	suspendRecord                      // record suspended and exit
)

// next decides the next step of a suspend in progress; ready says that
// nothing else (a terminal wait, an unproven result, an unacknowledged
// event) holds it back.
func (s *suspender) next(ready bool) suspendStep {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.wait
	if w == nil || w.finished || w.stopping || s.inCommand || !ready {
		return suspendWaitMore
	}
	if !w.execStopped {
		w.stopping = true
		return suspendStopExec
	}
	w.finished = true
	return suspendRecord
}

// execStopped records that the suspend stopped the executor.
func (s *suspender) execStopped() {
	s.mu.Lock()
	s.wait.stopping, s.wait.execStopped = false, true
	s.mu.Unlock()
}

// watchLifecycle is the loop's lifecycle routine: it runs lifecycleCheck
// on every kick (a commit, a command's end, an ACK) and owns the warm idle
// and lifetime timers, until ctx ends. It never runs under the executor's
// lock (a commit kicks it and returns), so it may ask the executor whether
// a turn is active and stop it.
func (r *loop) watchLifecycle(ctx context.Context) {
	var idle, life <-chan time.Time
	var idleT clock.Timer
	if r.cfg.Lifecycle == config.LifecycleWarm && r.cfg.IdleTimeout > 0 {
		idleT = r.clk.NewTimer(r.cfg.IdleTimeout)
		defer idleT.Stop()
		idle = idleT.C()
	}
	// At --max-lifetime-ms while disconnected the client ends the process
	// with transport_reconnect_deadline_exceeded (prp.md §6.1); while
	// connected the runner rotates at the next safe point, as the reference
	// does: at once without an active turn or command, else when it ends.
	if r.cfg.MaxLifetime > 0 {
		t := r.clk.NewTimer(r.started.Add(r.cfg.MaxLifetime).Sub(r.clk.Now()))
		defer t.Stop()
		life = t.C()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.susp.kick:
			r.lifecycleCheck(ctx)
		case <-idle:
			if again := r.idleDue(ctx); again > 0 {
				idleT.Reset(again)
			}
		case <-life:
			life = nil
			r.susp.endLifetime()
			r.lifecycleCheck(ctx)
		}
	}
}

// kick asks the lifecycle routine to look again; it never blocks.
func (r *loop) kick() {
	select {
	case r.susp.kick <- struct{}{}:
	default:
	}
}

// touch records activity for the warm idle timeout.
func (r *loop) touch() { r.susp.touch(r.clk.Now()) }

// turnActive reports whether the executor has a provider turn running.
func (r *loop) turnActive() bool {
	if r.exec == nil {
		return false
	}
	turn, _ := r.exec.m.Snapshot()
	return turn != ""
}

// idleDue runs when the warm idle timeout may have elapsed: with no
// command, no active turn and no activity for --idle-timeout-ms, suspend;
// otherwise it returns when to look again.
func (r *loop) idleDue(ctx context.Context) time.Duration {
	if r.turnActive() {
		r.touch() // idle counts from the turn's end
	}
	left, busy := r.susp.idleLeft(r.cfg.IdleTimeout, r.clk.Now())
	busy = busy || r.term.waiting()
	if busy || left > 0 {
		if left <= 0 {
			left = r.cfg.IdleTimeout
		}
		return left
	}
	if r.idleWithoutServer() {
		return 0
	}
	r.log.Info("warm runner idle; suspending", "idleTimeout", r.cfg.IdleTimeout.String())
	r.beginSuspend(ctx, suspendIdle)
	return 0
}

// lifecycleCheck runs after each commit, command and ACK: it starts the
// automatic suspend that is due and finishes one whose events are all
// acknowledged.
func (r *loop) lifecycleCheck(ctx context.Context) {
	sum := r.store.Summary()
	suspending, busy, lifetimeOver := r.susp.status()
	free := !suspending && !r.term.ending()
	switch {
	case !free:
	case sum.Lifecycle == state.Suspending:
		r.beginSuspend(ctx, "") // a suspend cut short by a restart: finish it
		return
	case sum.TurnEnded && r.cfg.Lifecycle == config.LifecyclePerTurn && !busy:
		// After the command that may still run (turn.start, a cancel): its
		// result is then queued before runner.suspending, whose ACK proves
		// the result arrived.
		r.beginSuspend(ctx, suspendPerTurn)
		return
	case sum.TurnEnded && r.cfg.Lifecycle == config.LifecyclePerTurn:
		// The command's end kicks this check again.
	case sum.TurnEnded:
		// Warm: the turn's end starts the idle clock; nothing more to do.
		r.touch()
		if err := r.update(func(tx *state.Tx) error { tx.ClearTurnEnded(); return nil }); err != nil {
			r.finish(config.NewError(config.CodeRunnerFailed, "record turn end", err))
			return
		}
	case lifetimeOver && !busy && !r.turnActive():
		if r.send.connectionCount() == 0 {
			r.log.Info("lifetime reached and no server has connected; suspending", "maxLifetime", r.cfg.MaxLifetime.String())
		} else {
			r.log.Info("lifetime reached; suspending", "maxLifetime", r.cfg.MaxLifetime.String())
		}
		r.beginSuspend(ctx, suspendLifetime)
		return
	}
	r.checkSuspend()
}

// beginSuspend records lifecycle suspending and runner.suspending (reason
// "" resumes a suspend recorded by an earlier process) and waits for the
// outbox to drain.
func (r *loop) beginSuspend(ctx context.Context, reason string) {
	if r.term.ending() || !r.susp.begin() {
		return
	}
	err := r.update(func(tx *state.Tx) error {
		tx.ClearTurnEnded()
		if tx.Lifecycle() == state.Suspending {
			return nil
		}
		if err := tx.SetLifecycle(state.Suspending); err != nil {
			return err
		}
		_, err := tx.Enqueue(state.Event{Type: prp.EventRunnerSuspending, Priority: state.P0,
			Payload: jsonenc.MustMarshal(map[string]any{"reason": reason, "resumable": true})})
		if outboxBound(err) {
			return nil // the store recorded the bound; the lifecycle change stands
		}
		return err
	})
	if err != nil {
		r.finish(config.NewError(config.CodeRunnerFailed, "record suspend", err))
		return
	}
	r.flush()
	r.checkSuspend()
}

// checkSuspend finishes an automatic suspend once no command runs and every
// event is acknowledged: stop the executor (its last events must be ACKed
// too, so look again), record suspended, exit 0. A terminal command that
// arrived meanwhile takes over.
func (r *loop) checkSuspend() {
	sum := r.store.Summary()
	// A result queued on this connection is proven delivered by the ACK of
	// a later event (sender.resultUnproven).
	ready := !r.term.waiting() && !r.send.resultUnproven(sum) && sum.AckedSourceSeq >= sum.HighestSourceSeq
	switch r.susp.next(ready) {
	case suspendWaitMore:
		return
	case suspendStopExec:
		r.stopExecutor(true)
		r.susp.execStopped()
		r.checkSuspend()
		return
	}
	err := r.update(func(tx *state.Tx) error {
		tx.ClearTurnEnded()
		return tx.SetLifecycle(state.Suspended)
	})
	if err != nil {
		r.finish(config.NewError(config.CodeRunnerFailed, "record suspended", err))
		return
	}
	r.log.Info("suspended; exiting")
	r.finish(errCleanStop)
}
