package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

// terminalAckTimeout bounds the wait for command_result_ack of a terminal
// command and for the outbox flush that follows (prp.md §7.4, §12: 2 s).
const terminalAckTimeout = 2 * time.Second

// errCleanStop ends the loop with exit status 0 (a terminal command was
// delivered).
var errCleanStop = errors.New("clean stop")

// loop is one runnerd process's control loop: it admits commands through
// the durable journal, runs their effects, and ships the outbox and command
// results on the current connection (prp.md §7, §8).
//
// Concurrency: the prp.Client runs commands one at a time on a command
// routine; onAuthenticated may start while the last connection's command
// still runs, and admits commands only after it returned
// (Conn.AwaitPrevious), so admission and effects never overlap. The
// state other routines share is split by concern, each part with its own
// lock: the sender (sender.go: the connection, the send cursor and the
// queued results, shipped by its own send routine), the terminal fence
// (terminal.go: the §7.4 wait, its timer and the stop cause) and the
// suspender (suspend.go: the automatic-suspend state of the lifecycle
// routine, watchLifecycle). No part's lock is held while another part's is
// taken, and none across a network write: only the send routine writes,
// so a commit or a command handler never waits for the socket (flush only
// pokes it). Pongs read only the store's lock-free summary.
type loop struct {
	cfg      config.Config
	store    *state.Store
	log      *slog.Logger
	handlers map[string]handler
	id       prp.Identity
	clk      clock.Clock // every timer and timestamp of the loop
	started  time.Time

	send   *sender
	frames *frameLimit // the limit outgoing events fit, sealed
	term   *terminal
	susp   *suspender
	warm   warm // the warm rotation (warm.go)

	// client, listener (listen mode) and transport (dial mode, tests) are
	// what a warm rotation re-points; set before the client runs.
	client    *prp.Client
	listener  *prp.Listener
	transport http.RoundTripper

	exec     *agentExec // the ACP executor; nil in loop-only tests
	execStop sync.Once

	// deferred is the one-write command being executed (recoverOneWrite):
	// admitted without a write of its own, journaled by the write that
	// records its result (journalDeferred), which may be the agent
	// committer's. Set and cleared by the command routine.
	deferred atomic.Pointer[prp.Command]

	// lostAt is when the current outage began (r.clk, Unix nanoseconds),
	// 0 while connected or before the first loss of this process: written
	// by OnLost on the client's supervisor, read by the command routine.
	lostAt atomic.Int64
}

// ReconnectEventMinOutage is the shortest outage runner.reconnected reports
// (durability.md §2.2 item 4, (beyond): the reference emits none). A rekey
// or a drop healed sooner enqueues nothing, so channel rekeys do not spend
// the P0 reserve.
const ReconnectEventMinOutage = 5 * time.Second

// attachExecutor plugs the ACP executor in: its handlers serve the provider
// commands unless opts replaces them; lifecycle commands stay the loop's.
func (r *loop) attachExecutor(ax *agentExec, opts options) {
	for typ, h := range ax.allHandlers() {
		if _, replaced := opts.Handlers[typ]; !replaced && !loopOwned(typ) {
			r.handlers[typ] = h
		}
	}
	r.exec = ax
}

// stopExecutor stops the executor once: orderly (terminal command, revoke,
// lease expiry, a signal) stops the agent (acp.md §3.6); otherwise (a fatal
// error) the agent is left running for the next process to re-adopt.
func (r *loop) stopExecutor(orderly bool) {
	if r.exec == nil {
		return
	}
	r.execStop.Do(func() { r.exec.stop(orderly) })
}

// orderlyStop reports whether the loop's outcome shuts the executor down
// (prp.md §5, §6.1, §7.4, §13) rather than leaving it for re-adoption.
func orderlyStop(outcome error) bool {
	return outcome == nil || outcome == errStopUnderPressure || errors.Is(outcome, config.ErrLeaseExpired) ||
		errors.Is(outcome, config.ErrReconnectGraceExceeded) || errors.Is(outcome, config.ErrReconnectDeadlineExceeded)
}

func newLoop(cfg config.Config, st *state.Store, logger *slog.Logger, opts options) *loop {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &loop{
		cfg: cfg, store: st, log: logger, id: cfg.Identity, clk: clock.Or(opts.Clock),
		handlers: map[string]handler{}, term: &terminal{},
	}
	r.send = newSender(st, r.id)
	r.frames = newFrameLimit(int(cfg.MaxFrameBytes))
	r.started = r.clk.Now()
	r.susp = &suspender{kick: make(chan struct{}, 1), lastActivity: r.started}
	for typ, mk := range opts.Handlers {
		if !loopOwned(typ) {
			r.handlers[typ] = mk(r.emit)
		}
	}
	return r
}

// run runs the client until a terminal condition and maps it to an outcome.
func (r *loop) run(ctx context.Context, client *prp.Client) error {
	rec := r.store.Recovery()
	if rec.Resumed {
		r.log.Info("resuming durable session", "reconnectCount", rec.ReconnectCount,
			"indeterminateCommands", len(rec.Indeterminate), "pendingTerminalDelivery", rec.PendingTerminalDelivery != nil)
	}
	r.client = client
	runCtx, cancel := context.WithCancel(ctx)
	r.term.setCancel(cancel)
	if r.exec != nil {
		r.exec.start(runCtx) // re-adopts a live agent (acp.md §3.5)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.watchLifecycle(runCtx) }()
	go func() {
		defer wg.Done()
		r.send.run(runCtx, func(err error) {
			r.log.Warn("outbox send interrupted; the suffix is replayed on reconnect", "err", err)
		})
	}()
	err := client.Run(runCtx)
	cancel()
	wg.Wait()
	r.term.stopTimer()
	out := r.exitFor(ctx, err)
	r.stopExecutor(orderlyStop(out))
	return out
}

// finish ends the loop with err (errCleanStop for exit 0); the first call wins.
func (r *loop) finish(err error) { r.term.finish(err) }

func (r *loop) stopErr() error { return r.term.stopErr() }

// resume reports the cursors for auth_hello from the committed state.
func (r *loop) resume() prp.Resume {
	s := r.store.Cursors()
	return prp.Resume{
		LastControllerCommandSeq: int64(s.LastControllerCommandSeq),
		NextSourceEventSeq:       int64(s.NextSourceSeq),
		AckedSourceSeq:           int64(s.AckedSourceSeq),
	}
}

// pong builds the pong payload from the store's lock-free summary, so a
// ping is answered while a write holds the store (prp.md §4 item 1).
func (r *loop) pong() prp.PongPayload {
	s := r.store.Summary()
	pressure := s.StoragePressure
	return prp.PongPayload{
		Lifecycle: string(s.Lifecycle), AckedSourceSeq: int64(s.AckedSourceSeq),
		OutboxBytes: int64(s.OutboxBytes), StoragePressure: &pressure,
	}
}

func (r *loop) onLost(err error) {
	r.lostAt.Store(r.clk.Now().UnixNano())
	r.send.detach()
	r.log.Info("connection lost; unacknowledged events will be replayed", "err", err)
}

// outageReportable reports whether the outage this connection ends lasted
// at least ReconnectEventMinOutage, and ends it. A connection that
// superseded a live one ends no outage.
func (r *loop) outageReportable() bool {
	lost := r.lostAt.Swap(0)
	return lost != 0 && r.clk.Now().Sub(time.Unix(0, lost)) >= ReconnectEventMinOutage
}

// onAuthenticated applies the welcome's cursor, records the connection,
// replays the unacknowledged outbox byte for byte and admits the welcome's
// pending command (prp.md §9.4).
func (r *loop) onAuthenticated(ctx context.Context, c *prp.Conn, w *prp.Welcome) error {
	if w.WarmTransitionPhase == prp.WarmPhaseActivated {
		return r.warmActivated(ctx, c, w)
	}
	return r.connected(ctx, c, w, false)
}

// connected is onAuthenticated for a connection that carries the run:
// every plain one, and the activating one of a warm rotation once
// warm_transition_activated was acknowledged (activated: the new run's
// first connection).
func (r *loop) connected(ctx context.Context, c *prp.Conn, w *prp.Welcome, activated bool) error {
	r.warm.mu.Lock()
	r.warm.welcomeVersion = w.WarmTransitionVersion
	r.warm.mu.Unlock()
	r.frames.connected(w)
	v := c.Session().Version
	// An activated welcome's cursor is the old identity's (the core resets
	// its cursor only at warm_transition_activated): the new identity's
	// outbox starts at 0, so it acknowledges nothing here.
	if w.HasAckedSourceSeq && !activated {
		if w.AckedSourceSeq < 0 {
			return errors.New("protocol error: welcome ackedSourceSeq is negative")
		}
		// The welcome's cursor acknowledges what earlier links carried: apply
		// it under their version, so a v2-only event acknowledged as a
		// downgraded diagnostic on a v1 link is still restored (prp.md §8.2).
		prev := v
		if lv, ok := r.store.LastConnectionProtocolVersion(); ok {
			prev = lv
		}
		if _, err := r.store.ApplyAck(uint64(w.AckedSourceSeq), prev); err != nil {
			return fmt.Errorf("protocol error: welcome ack: %w", err)
		}
		r.ackApplied()
	}
	rec := r.store.Recovery()
	count := r.send.countConnection()
	first := (count == 1 && !rec.Resumed) || activated
	outage := r.outageReportable()
	typ := ""
	switch {
	case first:
		typ = prp.EventRunnerConnected
	case count == 1, outage:
		// The first connection after a restart, or one that ends an
		// outage the server may have noticed.
		typ = prp.EventRunnerReconnected
	}
	var fact state.Event
	if typ != "" {
		fact = state.Event{Type: typ, Priority: state.P0,
			Payload: jsonenc.MustMarshal(map[string]any{"connectionId": c.Session().ConnectionID, "protocolVersion": v})}
	}
	// One write for the connection's facts (each write is two fsyncs). The
	// last connection's command may still run (and set a terminal fence):
	// the fence is read in the write.
	err := r.update(func(tx *state.Tx) error {
		fenced := tx.Fenced()
		if err := tx.SetProtocolVersion(v); err != nil {
			return err
		}
		switch tx.Lifecycle() {
		case state.Connecting, state.RecoverableFailure, state.Suspended:
			if tx.Lifecycle() == state.Suspended && fenced {
				break // the suspend is still being delivered: only reconcile it
			}
			tx.SetRecoverableFailure("")
			if err := tx.SetLifecycle(state.Ready); err != nil {
				return err
			}
		}
		if v >= 2 {
			if err := tx.RestoreV2ReplayEvents(); err != nil && !outboxBound(err) {
				return err
			}
		}
		if typ == "" {
			return nil
		}
		if _, err := tx.Enqueue(fact); err != nil && !outboxBound(err) {
			return err
		}
		return nil // an outbox bound costs only the fact; the store recorded the lifecycle change
	})
	if err != nil {
		return fmt.Errorf("record connection: %w", err)
	}

	r.send.attach(c, v)
	r.log.Info("connected", "connectionId", c.Session().ConnectionID, "version", v, "first", first)

	// A command of the last connection may still run: its wait may need
	// this connection's cursor and sender (agent output gated on ACKs,
	// prp.md §8.5). What follows admits commands and settles results, so
	// it waits for that command's result.
	if !c.AwaitPrevious(ctx) {
		return nil // Run is ending (ctx, or that command's fatal error)
	}

	// A result without effect sent on the last connection may never be
	// acknowledged now: this connection's welcome says what comes next.
	r.term.awaitSettle("")
	fence := r.store.PendingTerminalDelivery()
	for _, raw := range w.PendingCommands {
		if fence != nil && commandID(raw) != fence.CommandID {
			break // only the fenced terminal result is reconciled (prp.md §9.4)
		}
		if err := r.handleCommand(ctx, raw); err != nil {
			return err
		}
	}
	if fence != nil {
		// The welcome no longer lists the terminal command: the core has
		// its result. Finish cleanup (prp.md §9.4).
		r.beginTerminal(*fence, "")
	}
	if id := r.warm.preparedID(); id != "" && !slices.ContainsFunc(w.PendingCommands, func(raw json.RawMessage) bool { return commandID(raw) == id }) {
		// The core has the prepared attach's result (it no longer lists
		// the attach), but its receipt may have died with the last
		// connection, and with its transition pending the core sends
		// nothing more here: send the result again, which it answers
		// with the receipt (prp.md §9.5). A welcome that lists the attach
		// got the same above.
		r.warm.resendPrepared(r.send, id)
	}
	r.kick() // a suspend recorded by an earlier process finishes now
	return nil
}

// onControl handles one inbound command, ack or command_result_ack. An
// error is fatal: runnerd exits with the state kept.
func (r *loop) onControl(ctx context.Context, c *prp.Conn, env *prp.Envelope) error {
	switch env.Kind {
	case prp.KindCommand:
		return r.handleCommand(ctx, env.Payload)
	case prp.KindAck:
		var p prp.AckPayload
		if err := env.DecodePayload(&p); err != nil {
			return fmt.Errorf("protocol error: %w", err)
		}
		if p.AckedSourceSeq < 0 {
			return errors.New("protocol error: ackedSourceSeq is negative")
		}
		if !r.awaitSpace(ctx) {
			return nil // the client is ending; the next welcome carries the cursor
		}
		if _, err := r.store.ApplyAck(uint64(p.AckedSourceSeq), c.Session().Version); err != nil {
			return fmt.Errorf("protocol error: %w", err)
		}
		r.ackApplied()
		if !r.store.Summary().StoragePressure {
			r.send.clearBound()
		}
		r.checkTerminal()
		r.attachAcked()
		r.kick()
	case prp.KindCommandResultAck:
		var p prp.CommandResultAckPayload
		if err := env.DecodePayload(&p); err != nil {
			return fmt.Errorf("protocol error: %w", err)
		}
		if ours, err := r.warmResultAck(p); ours || err != nil {
			return err
		}
		r.terminalAck(p)
	case prp.KindWarmTransitionActivatedAck:
		return r.warmActivatedAck(ctx, c, env)
	default:
		r.log.Info("ignoring control frame", "kind", env.Kind)
	}
	return nil
}

// handleCommand runs prp.md §7.2: validate, admit through the journal
// (pending marker durable before the effect), execute, record, send.
func (r *loop) handleCommand(ctx context.Context, raw []byte) error {
	r.susp.command(true, r.clk.Now())
	defer func() {
		r.susp.command(false, r.clk.Now())
		r.kick() // a suspend waits for the command's result
	}()
	cmd, err := prp.DecodeCommand(raw)
	if err != nil {
		return fmt.Errorf("protocol error: %w", err)
	}
	if r.term.leaves(cmd.CommandID) {
		// A process that only reconciles a terminal result, or is
		// stopping, takes no new command (prp.md §9.4): unjournaled and
		// unanswered, it stays pending and the next welcome carries it.
		r.log.Info("command left for the next process: this one is ending", "commandId", cmd.CommandID, "type", cmd.Type)
		return nil
	}
	hookCommandReceived(cmd.Type)
	var adm state.Admission
	err = r.update(func(tx *state.Tx) error {
		var err error
		if adm, err = tx.BeginCommand(cmd); err != nil || adm.Disposition != state.Execute {
			return err
		}
		if code, msg := r.refusal(tx, cmd); code != "" {
			// Refused before any effect: the pending marker and the
			// rejection land in the same write.
			res, err := tx.RejectCommand(cmd.CommandID, code, msg)
			adm = state.Admission{Disposition: state.Reject, Result: res}
			return err
		}
		if recoveryOf(cmd.Type) == recoverOneWrite {
			return errAdmissionDeferred // nothing is written now
		}
		return nil
	})
	if errors.Is(err, errAdmissionDeferred) {
		err = nil
		r.deferred.Store(cmd)
		defer r.deferred.Store(nil)
	}
	if err != nil {
		return fmt.Errorf("admit command seq %d: %w", cmd.ControllerSeq, err)
	}
	res := adm.Result
	switch adm.Disposition {
	case state.Execute:
		r.log.Info("executing command", "commandId", cmd.CommandID, "type", cmd.Type, "controllerSeq", cmd.ControllerSeq)
		if begin := commandHandlers[cmd.Type].begin; begin != nil {
			return begin(r, ctx, cmd) // it sends its result itself (run.attach: when its wait ends, warm.go)
		}
		if res, err = r.execute(ctx, cmd); err != nil {
			return err
		}
	case state.Replay:
		if cmd.Type == prp.CommandRunAttach && r.warm.owns(cmd.CommandID) {
			// Re-delivered while this process still rotates: its result
			// goes out when its wait ends, or already went with its receipt.
			r.warm.resendPrepared(r.send, cmd.CommandID)
			return nil
		}
		if r.exec != nil {
			// An effect cut by a crash whose evidence is readable now
			// (evidence.go) is settled before its first result goes out.
			if res, err = r.exec.recoverReplayed(ctx, cmd, res); err != nil {
				return fmt.Errorf("recover command seq %d: %w", cmd.ControllerSeq, err)
			}
		}
		r.log.Info("replaying recorded command result", "commandId", cmd.CommandID, "status", string(res.Status))
	}
	wire := wireStatus(res)
	r.send.queueResult(res)
	if terminalLifecycle(cmd.Type) != "" {
		if f := r.store.PendingTerminalDelivery(); f != nil && f.CommandID == cmd.CommandID {
			r.beginTerminal(*f, wire)
		} else if res.Status != state.StatusCompleted {
			// Its acknowledgement will ask this process to end
			// (terminalAck); a command the core sends before it is left
			// for the next process.
			r.term.awaitSettle(cmd.CommandID)
		}
	}
	return nil
}

// flush ships every committed, unsent outbox event on the current
// connection (inline while the link's queue has room, else through the
// send routine), then kicks the lifecycle routine (a commit may end a
// turn). It never waits for the socket.
func (r *loop) flush() {
	r.send.shipNow()
	r.kick()
}

// emit commits events to the outbox in one durable write, then sends them.
func (r *loop) emit(ctx context.Context, events ...state.Event) error {
	err := r.update(func(tx *state.Tx) error {
		for _, e := range events {
			if _, err := tx.Enqueue(e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if outboxBound(err) {
			r.reportBound(ctx, err)
		}
		return err
	}
	r.flush()
	return nil
}

// reportBound makes an outbox bound visible to the core as one P0
// runner.diagnostic per episode (prp.md §8.3, §9.3); the reserve exists for
// such facts.
func (r *loop) reportBound(ctx context.Context, cause error) {
	code := "outbox_backpressure"
	if errors.Is(cause, state.ErrP0StorageExhausted) {
		code = state.CodeP0StorageExhausted
	}
	if !r.send.reportBound(code) {
		return
	}
	err := r.update(func(tx *state.Tx) error {
		_, err := tx.Enqueue(state.Event{Type: prp.EventRunnerDiagnostic, Priority: state.P0,
			Payload: jsonenc.MustMarshal(map[string]string{"reasonCode": code})})
		return err
	})
	if err != nil {
		r.log.Warn("outbox bound not reported", "reasonCode", code, "err", err)
		return
	}
	r.flush()
}

// outboxBound reports an outbox bound violation (prp.md §9.3): the event
// is dropped, the store has recorded the lifecycle change and a diagnostic.
func outboxBound(err error) bool {
	return errors.Is(err, state.ErrBackpressure) || errors.Is(err, state.ErrP0StorageExhausted)
}

// beginTerminal starts the §7.4 wait: for the ack of the terminal result
// (status non-empty) and the outbox flush, bounded by terminalAckTimeout.
func (r *loop) beginTerminal(f state.TerminalFence, status string) {
	r.term.begin(r.clk, f, status, r.terminalTimeout)
	r.checkTerminal()
}

func (r *loop) terminalAck(p prp.CommandResultAckPayload) {
	if !r.term.ack(p) {
		if r.settledWithoutEffect(p) {
			// The core acknowledged a terminal command that had no effect
			// (indeterminate after a crash, or rejected): it sends nothing
			// more on this connection, not even a lease renewal (prp.md
			// §13.1), and it asked this process to end. Stop orderly with
			// the state as it is; the next process takes the next command.
			r.log.Warn("terminal command settled without effect; stopping", "commandId", p.CommandID, "status", p.Status)
			r.finish(errCleanStop)
			return
		}
		r.log.Warn("ignoring command_result_ack that matches no terminal result", "commandId", p.CommandID)
		return
	}
	r.checkTerminal()
}

// settledWithoutEffect reports whether p acknowledges the journaled,
// non-completed result of a terminal command (runner.suspend or
// runner.shutdown) with the status that was sent.
func (r *loop) settledWithoutEffect(p prp.CommandResultAckPayload) bool {
	if terminalLifecycle(p.CommandType) == "" {
		return false
	}
	res, ok := r.store.Result(p.CommandID)
	return ok && res.CommandType == p.CommandType && p.AcksSeq(res.ControllerSeq) &&
		res.Status != state.StatusCompleted && res.Status != state.StatusPending && wireStatus(res) == p.Status
}

// checkTerminal finishes a terminal command once its result is
// acknowledged and the outbox is empty: clear the fence, exit 0.
func (r *loop) checkTerminal() {
	done, stopExec := r.term.delivered(r.store.Summary())
	if stopExec {
		// Shut the executor down before the fence is cleared; its last
		// events must be ACKed too, so look again (prp.md §7.4).
		r.stopExecutor(true)
		r.checkTerminal()
		return
	}
	if !done {
		return
	}
	t, ok := r.term.settle()
	if !ok {
		return
	}
	if err := r.update(func(tx *state.Tx) error { tx.ClearTerminalFence(); return nil }); err != nil {
		r.finish(config.NewError(config.CodeRunnerFailed, "clear terminal fence", err))
		return
	}
	r.log.Info("terminal command delivered; stopping", "commandType", t.fence.CommandType, "lifecycle", string(t.fence.Lifecycle))
	r.finish(errCleanStop)
}

// terminalTimeout stops without returning to ready: the fence stays, so the
// next process only reconciles the terminal result (prp.md §7.4, §9.4).
func (r *loop) terminalTimeout() {
	t, ok := r.term.settle()
	if !ok {
		return
	}
	if t.acked {
		r.log.Warn("terminal result acknowledged but the outbox did not drain in time; the fence stays for the next process")
		r.finish(errCleanStop)
		return
	}
	r.finish(config.NewError(config.CodeRunnerFailed, "terminal command result was not acknowledged within "+terminalAckTimeout.String()+"; the fence stays for the next process", nil))
}

// commandID reads a raw command's commandId ("" when absent).
func commandID(raw []byte) string {
	var c struct {
		CommandID string `json:"commandId"`
	}
	_ = json.Unmarshal(raw, &c)
	return c.CommandID
}
