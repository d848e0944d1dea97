package runner

import (
	"context"
	"sync"

	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
)

// terminal is how this process ends: the §7.4 fence wait of a terminal
// command and the first stop cause. The dispatch goroutine (results and
// their acks), the fence timer, executor effects and the lifecycle routine
// share it.
type terminal struct {
	mu     sync.Mutex // guards the fields below
	wait   *terminalWait
	stop   error // why the loop ends; set once
	cancel context.CancelFunc
	// settling is the terminal command whose result without effect
	// (indeterminate, rejected) went out on this connection: the core's
	// acknowledgement of it asks this process to end, so no new command
	// is taken meanwhile. A new connection clears it.
	settling string
}

// awaitSettle marks commandID's result without effect as sent ("" clears).
func (t *terminal) awaitSettle(commandID string) {
	t.mu.Lock()
	t.settling = commandID
	t.mu.Unlock()
}

// terminalWait is the §7.4 fence in memory: the terminal result is sent and
// the loop waits for its command_result_ack and the outbox flush.
type terminalWait struct {
	fence       state.TerminalFence
	status      string // the wire status the ack must repeat; "" when delivery is already proven
	acked       bool
	execStopped bool // the executor was shut down for this stop
	finished    bool
	timer       clock.Timer
}

// setCancel records how to end the run; finish calls it.
func (t *terminal) setCancel(cancel context.CancelFunc) {
	t.mu.Lock()
	t.cancel = cancel
	t.mu.Unlock()
}

// finish ends the loop with err (errCleanStop for exit 0); the first call wins.
func (t *terminal) finish(err error) {
	t.mu.Lock()
	if t.stop == nil {
		t.stop = err
	}
	cancel := t.cancel
	t.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (t *terminal) stopErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stop
}

// waiting reports whether a terminal command's delivery is being awaited.
func (t *terminal) waiting() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wait != nil
}

// ending reports whether the process is on its way out: a terminal wait
// or a stop cause. An automatic suspend gives way to either.
func (t *terminal) ending() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wait != nil || t.stop != nil
}

// leaves reports whether a command other than the one the terminal wait
// is for must be left for the next process: this one is on its way out
// (a terminal wait, a terminal result without effect awaiting its
// acknowledgement, or a stop cause). Executing it here would answer it
// with a failure (the executor is shutting down) instead of running it.
func (t *terminal) leaves(commandID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.wait != nil {
		return t.wait.fence.CommandID != commandID
	}
	if t.settling != "" && t.settling != commandID {
		return true
	}
	return t.stop != nil
}

// begin starts the wait for fence f unless one runs; timeout fires after
// terminalAckTimeout on clk.
func (t *terminal) begin(clk clock.Clock, f state.TerminalFence, status string, timeout func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.wait == nil {
		t.wait = &terminalWait{fence: f, status: status, acked: status == ""}
		t.wait.timer = clk.AfterFunc(terminalAckTimeout, timeout)
	}
}

// ack applies a command_result_ack and reports whether it matched the
// awaited terminal result.
func (t *terminal) ack(p prp.CommandResultAckPayload) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.wait
	match := w != nil && p.CommandID == w.fence.CommandID && p.CommandType == w.fence.CommandType &&
		p.AcksSeq(w.fence.ControllerSeq) && (w.status == "" || p.Status == w.status)
	if match {
		w.acked = true
	}
	return match
}

// delivered reports whether the awaited result is acknowledged and every
// event too (sum), and whether the caller must stop the executor first
// (once; its last events must be acknowledged as well).
func (t *terminal) delivered(sum state.Summary) (done, stopExec bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.wait
	done = w != nil && !w.finished && w.acked && sum.AckedSourceSeq >= sum.HighestSourceSeq
	stopExec = done && !w.execStopped
	if stopExec {
		w.execStopped = true
	}
	return done, stopExec
}

// settle marks the wait finished and stops its timer; it returns a copy of
// the wait and true when this call finished it, false when it was already
// finished or absent.
func (t *terminal) settle() (terminalWait, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.wait
	if w == nil || w.finished {
		return terminalWait{}, false
	}
	w.finished = true
	w.timer.Stop()
	return *w, true
}

// stopTimer stops a running wait's timer when the loop ends.
func (t *terminal) stopTimer() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.wait != nil && t.wait.timer != nil {
		t.wait.timer.Stop()
	}
}
