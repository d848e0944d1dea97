package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/pcrunner/pcrunner/internal/agent"
	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

// warmWait bounds each wait of a warm rotation: for the old outbox to be
// fully acknowledged, and for the command_result_ack carrying the receipt
// (prp.md §9.5 steps 1 and 3: "≤2 s").
const warmWait = 2 * time.Second

// run.attach refusals (prp.md §9.5). Each is journaled as rejected: the
// attach had no effect and the old run keeps working.
const (
	// codeWarmAttachIncompatible: the live provider session cannot serve
	// the new run (descriptor, catalogDigest, instructions or model differ).
	codeWarmAttachIncompatible = agent.CodeWarmAttachIncompatible
	// codeWarmAttachUnsupported: the connection is not PRP v2 with
	// warmTransitionVersion 1 (prp.md §9.5).
	codeWarmAttachUnsupported = "warm_attach_unsupported"
	// codeWarmAttachInvalid: paperclipNextAuthority breaks the identity
	// rules or its connection fails the checks the flags get.
	codeWarmAttachInvalid = "warm_attach_invalid"
	// codeWarmAttachNotReady: the provider session is not quiescent, or the
	// old outbox was not acknowledged within warmWait.
	codeWarmAttachNotReady = "warm_attach_not_ready"
)

// Warm kill points: the phase boundaries of a rotation where the crash
// matrix SIGKILLs runnerd. warmKillPoint is a no-op except in
// testhooks builds (warm_testhook_linux.go).
const (
	killPrepared    = "prepared"    // the prepared write is durable; no result sent
	killResultSent  = "result-sent" // the result is queued for the send routine
	killAcked       = "acked"       // the exact receipt's ack arrived; nothing persisted for it
	killActivating  = "activating"  // the activating write is durable; no reconnect yet
	killReconnected = "reconnected" // the activated welcome arrived; warm_transition_activated sent
	killActivated   = "activated"   // the ack arrived and the transition is cleared
)

var warmKillPoint = func(point string) {}

// warm is the runner half of a warm rotation in this process. The dispatch
// goroutine drives its steps one at a time (the command, the ACK path, the
// command_result_ack); only its two timers run beside it. mu guards the
// fields and is never held across a store write, a send or another part's
// call: a step claims what it acts on under mu (moving the rotation to its
// next field, e.g. waiting to preparing), then writes without it, so a
// timer that fires meanwhile finds the claim and leaves the step to it.
type warm struct {
	mu sync.Mutex // guards every field below
	// welcomeVersion is the current connection's welcome
	// warmTransitionVersion (0 when the core offered none).
	welcomeVersion int
	// waiting is an admitted run.attach waiting for the old outbox's ACK,
	// with the dialer it will use (connect mode) and its timer.
	waiting   *prp.Command
	dialer    *prp.Dialer
	listen    string // the new listen path (listen mode)
	waitTimer clock.Timer
	// preparing is the attach whose prepared write is in progress;
	// expired says its wait ran out meanwhile, so a write that has to
	// wait for another ACK refuses it instead.
	preparing *prp.Command
	expired   bool
	// prepared is the persisted receipt whose result was sent, waiting for
	// command_result_ack; ackTimer bounds that wait.
	prepared *prp.WarmTransition
	ackTimer clock.Timer
	// activating is the receipt the next connection must activate;
	// activation is that connection once its welcome said "activated".
	activating *prp.WarmTransition
	activation *prp.Conn
	welcome    *prp.Welcome
}

// busy reports whether a rotation is under way in this process.
func (w *warm) busy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiting != nil || w.preparing != nil || w.prepared != nil || w.activating != nil
}

// beginAttach runs an admitted run.attach (journaled pending): it checks
// the command, then waits for the old outbox's ACK (checkAttach). A
// refusal is recorded and sent at once.
func (r *loop) beginAttach(ctx context.Context, cmd *prp.Command) error {
	w := &r.warm
	w.mu.Lock()
	welcomeVersion := w.welcomeVersion
	w.mu.Unlock()
	d, listenPath, code, msg := r.checkAttach(ctx, cmd, welcomeVersion)
	if code != "" {
		return r.rejectAttach(cmd, code, msg)
	}
	w.mu.Lock()
	w.waiting, w.dialer, w.listen = cmd, d, listenPath
	w.waitTimer = r.clk.AfterFunc(warmWait, func() { r.attachWaitExpired(cmd) })
	w.mu.Unlock()
	return r.tryPrepare()
}

// checkAttach applies the run.attach checks, in order: PRP v2 with
// warmTransitionVersion 1; the identity rules; the connection, checked
// like the flags (prp.md §1.2, §1.3, the --ca-bundle-path rules); the
// provider session's compatibility and quiescence.
func (r *loop) checkAttach(ctx context.Context, cmd *prp.Command, welcomeVersion int) (d *prp.Dialer, listenPath, code, msg string) {
	if v := r.send.protocolVersion(); v < 2 || welcomeVersion != 1 {
		return nil, "", codeWarmAttachUnsupported, "run.attach needs PRP v2 with warmTransitionVersion 1"
	}
	next, conn, err := prp.ParseNextAuthority(cmd.Payload)
	if err != nil {
		return nil, "", codeWarmAttachInvalid, "run.attach paperclipNextAuthority is malformed"
	}
	if err := prp.CheckWarmIdentity(r.store.Identity(), next.Identity); err != nil {
		return nil, "", codeWarmAttachInvalid, "run.attach breaks the identity rules: " + identityRule(err)
	}
	switch {
	case r.cfg.Mode == config.ModeListen && conn.Mode == "listen":
		if msg := r.checkListen(conn, next.Identity.RunID); msg != "" {
			return nil, "", codeWarmAttachInvalid, msg
		}
		listenPath = conn.ListenPath
	case r.cfg.Mode == config.ModeDial && conn.Mode == "connect":
		d, err = prp.NewDialer(ctx, prp.DialerConfig{URL: conn.ConnectURL, CABundlePath: conn.CABundlePath, Transport: r.transport})
		if err != nil {
			return nil, "", codeWarmAttachInvalid, "run.attach connectUrl or caBundlePath fails the dial rules"
		}
	default:
		return nil, "", codeWarmAttachInvalid, "run.attach connection mode is not this runner's mode"
	}
	if r.exec == nil {
		return nil, "", codeWarmAttachIncompatible, "no provider session to hand over"
	}
	if err := r.exec.m.WarmCompatible(cmd.Payload); err != nil {
		var ce *agent.CommandError
		if errors.As(err, &ce) {
			return nil, "", ce.Code, ce.Message
		}
		return nil, "", codeWarmAttachIncompatible, "the provider session cannot serve the new run"
	}
	if !r.exec.m.WarmReady() {
		return nil, "", codeWarmAttachNotReady, "the provider session is not quiescent"
	}
	return d, listenPath, "", ""
}

// identityRule names the rule a CheckWarmIdentity error broke, without the
// ids themselves.
func identityRule(err error) string {
	msg := err.Error()
	for _, rule := range []string{"runnerInstanceId is immutable", "environmentLeaseId is immutable",
		"normalizedSessionId is immutable", "runId must change"} {
		if len(msg) >= len(rule) && msg[len(msg)-len(rule):] == rule {
			return rule
		}
	}
	return "identity"
}

// checkListen checks a listen-mode connection: the same bound address and
// port (the socket is kept, prp.md §1.2) and a §1.2 path for the new runId.
func (r *loop) checkListen(conn prp.AuthorityConnection, runID string) string {
	addr, err := netip.ParseAddr(conn.ListenAddress)
	if err != nil || addr != r.cfg.ListenAddress {
		return "run.attach listenAddress is not the bound address"
	}
	if r.listener == nil {
		return "run.attach listen connection without a listener"
	}
	_, port, err := net.SplitHostPort(r.listener.Addr().String())
	if err != nil || port != strconv.Itoa(conn.ListenPort) {
		return "run.attach listenPort is not the bound port"
	}
	got, err := prp.ValidateListenPath(conn.ListenPath)
	if err != nil || got != runID {
		return "run.attach listenPath fails prp.md §1.2 for the new runId"
	}
	return ""
}

// rejectAttach records and sends a refusal.
func (r *loop) rejectAttach(cmd *prp.Command, code, msg string) error {
	r.log.Warn("run.attach refused", "commandId", cmd.CommandID, "code", code, "message", msg)
	var res state.CommandResult
	err := r.update(func(tx *state.Tx) error {
		var err error
		res, err = tx.RejectCommand(cmd.CommandID, code, msg)
		return err
	})
	if err != nil {
		return fmt.Errorf("record run.attach refusal: %w", err)
	}
	r.send.queueResult(res)
	return nil
}

// attachAcked is the ACK path's turn: the old outbox may now be drained.
func (r *loop) attachAcked() {
	if err := r.tryPrepare(); err != nil {
		r.finish(config.NewError(config.CodeRunnerFailed, "prepare warm transition", err))
	}
}

// attachWaitExpired refuses a run.attach whose old outbox was not
// acknowledged within warmWait: nothing was persisted for it yet.
func (r *loop) attachWaitExpired(cmd *prp.Command) {
	w := &r.warm
	w.mu.Lock()
	switch {
	case w.preparing == cmd:
		w.expired = true // the prepared write in progress decides
		w.mu.Unlock()
		return
	case w.waiting != cmd:
		w.mu.Unlock()
		return
	}
	w.waiting, w.dialer = nil, nil
	w.mu.Unlock()
	r.refuseNotReady(cmd)
}

// refuseNotReady refuses a run.attach whose old outbox was not
// acknowledged within warmWait.
func (r *loop) refuseNotReady(cmd *prp.Command) {
	if err := r.rejectAttach(cmd, codeWarmAttachNotReady, "the old outbox was not acknowledged within "+warmWait.String()); err != nil {
		r.finish(config.NewError(config.CodeRunnerFailed, "refuse run.attach", err))
	}
}

// tryPrepare runs §9.5 step 2 for the waiting attach once the whole old
// outbox is ACKed: the completed result and the receipt (phase prepared)
// in one write, then the result is sent and the wait for its ack starts.
// Dispatch goroutine only.
func (r *loop) tryPrepare() error {
	w := &r.warm
	w.mu.Lock()
	cmd := w.waiting
	if cmd == nil {
		w.mu.Unlock()
		return nil
	}
	sum := r.store.Summary()
	if sum.AckedSourceSeq != sum.HighestSourceSeq {
		w.mu.Unlock()
		return nil
	}
	w.waiting, w.preparing, w.expired = nil, cmd, false
	w.mu.Unlock()
	lease, ok := r.client.Lease()
	if !ok {
		// No lease yet: no receipt can bind one; the next ACK retries.
		return r.prepareDeferred(cmd)
	}
	next, _, err := prp.ParseNextAuthority(cmd.Payload)
	if err != nil {
		return err
	}
	// Held before the write: an event committed right after it must not
	// reach the core ahead of the result (warmHold). One committed
	// before it makes the write refuse, and prepareDeferred releases.
	r.send.holdWarm(cmd.CommandID, sum.AckedSourceSeq)
	var receipt prp.WarmTransition
	var res state.CommandResult
	err = r.update(func(tx *state.Tx) error {
		var err error
		res, err = tx.FinishCommand(cmd.CommandID, state.StatusCompleted,
			jsonenc.MustMarshal(map[string]any{"attached": true, "runId": next.Identity.RunID}))
		if err != nil {
			return err
		}
		receipt, err = prp.NewWarmTransition(prp.WarmTransitionInput{
			Old: r.store.Identity(), Command: cmd, Result: resultPayload(res),
			OldAckedSourceSeq: int64(r.store.Summary().AckedSourceSeq),
			RunnerVersion:     r.cfg.RunnerVersion, RunnerDigest: r.cfg.RunnerDigest, Lease: lease,
		})
		if err != nil {
			return err
		}
		return tx.PrepareWarmTransition(receipt, cmd.Raw, res)
	})
	if errors.Is(err, state.ErrWarmTransition) {
		return r.prepareDeferred(cmd) // an event slipped in before the write: wait for its ACK
	}
	if err != nil {
		r.send.releaseWarm()
		return err
	}
	warmKillPoint(killPrepared)
	w.mu.Lock()
	w.waitTimer.Stop()
	w.preparing, w.prepared = nil, &receipt
	w.ackTimer = r.clk.AfterFunc(warmWait, func() { r.attachAckExpired(receipt.TransitionID) })
	w.mu.Unlock()
	r.log.Info("warm transition prepared", "commandId", cmd.CommandID, "transitionId", receipt.TransitionID)
	r.send.queueResult(res) // its ack wait's bound settles a result that never arrives
	warmKillPoint(killResultSent)
	return nil
}

// prepareDeferred puts cmd back to wait for the next ACK after a prepare
// that could not happen yet, or refuses it if its wait ran out meanwhile.
func (r *loop) prepareDeferred(cmd *prp.Command) error {
	r.send.releaseWarm() // nothing was prepared
	w := &r.warm
	w.mu.Lock()
	expired := w.expired
	w.preparing, w.expired = nil, false
	if expired {
		w.dialer = nil
	} else {
		w.waiting = cmd
	}
	w.mu.Unlock()
	if expired {
		r.refuseNotReady(cmd)
	}
	return nil
}

// attachAckExpired: the core did not acknowledge the receipt in time.
// Whether it saw the result cannot be known here, and the rotation cannot
// go on without its ack, so runnerd stops with the state in "prepared":
// the next process settles the attach as execution_indeterminate under
// the old identity (state.recoverWarm).
func (r *loop) attachAckExpired(transitionID string) {
	w := &r.warm
	w.mu.Lock()
	expired := w.prepared != nil && w.prepared.TransitionID == transitionID
	w.mu.Unlock()
	if !expired {
		return
	}
	r.finish(config.NewError(config.CodeRunnerFailed, "run.attach result was not acknowledged within "+warmWait.String()+"; the next process settles the attach", nil))
}

// warmResultAck applies a command_result_ack for the prepared run.attach
// (§9.5 steps 3–4): the exact receipt persists the new identity (phase
// activating), then the runner rotates its listener path or dial target
// and reconnects as the new run. It reports whether p was the attach's.
// An inexact receipt is refused: fatal, with the state in "prepared".
func (r *loop) warmResultAck(p prp.CommandResultAckPayload) (bool, error) {
	w := &r.warm
	w.mu.Lock()
	rcpt := w.prepared
	if rcpt == nil || p.CommandID != rcpt.CommandID || p.CommandType != prp.CommandRunAttach {
		w.mu.Unlock()
		return false, nil
	}
	if !prp.SameWarmTransition(p.WarmTransition, *rcpt) {
		w.mu.Unlock()
		return true, errors.New("protocol error: command_result_ack carries another warm transition receipt")
	}
	w.ackTimer.Stop()
	// Claimed: the ack wait's timer finds nothing prepared any more.
	w.prepared, w.activating = nil, rcpt
	d, listen := w.dialer, w.listen
	w.dialer, w.listen = nil, ""
	w.mu.Unlock()
	warmKillPoint(killAcked)
	// Nothing of the new identity may reach the old connection, and the
	// old outbox's held events go with it (warmHold).
	r.send.detach()
	r.send.releaseWarm()
	if err := r.update(func(tx *state.Tx) error { return tx.ActivateWarmTransition(p.WarmTransition) }); err != nil {
		return true, fmt.Errorf("activate warm transition: %w", err)
	}
	warmKillPoint(killActivating)
	r.send.setIdentity(rcpt.NewIdentity)
	if listen != "" {
		if err := r.listener.SetPath(listen); err != nil {
			return true, fmt.Errorf("rotate listener path: %w", err)
		}
	}
	if err := r.client.BeginWarmActivation(*rcpt, d); err != nil {
		return true, fmt.Errorf("begin warm activation: %w", err)
	}
	r.log.Info("warm transition activating", "transitionId", rcpt.TransitionID, "runId", rcpt.NewIdentity.RunID)
	return true, nil
}

// warmActivated handles the welcome of the activating connection (the
// handshake already required phase "activated" and the exact receipt):
// send warm_transition_activated; nothing else goes out until its ack.
func (r *loop) warmActivated(ctx context.Context, c *prp.Conn, wel *prp.Welcome) error {
	w := &r.warm
	w.mu.Lock()
	rcpt := w.activating
	if rcpt == nil || !prp.SameWarmTransition(wel.WarmTransition, *rcpt) {
		w.mu.Unlock()
		return errors.New("protocol error: an activated welcome without this runner's warm transition")
	}
	w.activation, w.welcome = c, wel
	w.welcomeVersion = wel.WarmTransitionVersion
	w.mu.Unlock()
	if err := c.SendControl(ctx, prp.KindWarmTransitionActivated, prp.WarmTransitionActivatedPayload{TransitionID: rcpt.TransitionID}); err != nil {
		return err
	}
	warmKillPoint(killReconnected)
	c.AwaitPrevious(ctx) // false: Run is ending, and with it this hook's routine
	return nil
}

// warmActivatedAck finishes the rotation: the transition is cleared, the
// Client's later reconnects are plain lease reconnects, and the new run's
// connection starts like any other (its fact, the outbox, its commands).
func (r *loop) warmActivatedAck(ctx context.Context, c *prp.Conn, env *prp.Envelope) error {
	var p prp.WarmTransitionActivatedPayload
	if err := env.DecodePayload(&p); err != nil {
		return fmt.Errorf("protocol error: %w", err)
	}
	w := &r.warm
	w.mu.Lock()
	rcpt, conn, wel := w.activating, w.activation, w.welcome
	if rcpt == nil || conn != c || p.TransitionID != rcpt.TransitionID {
		w.mu.Unlock()
		return errors.New("protocol error: warm_transition_activated_ack for no activation of this connection")
	}
	w.activating, w.activation, w.welcome = nil, nil, nil
	w.mu.Unlock()
	if err := r.update(func(tx *state.Tx) error { return tx.CompleteWarmTransition(rcpt.TransitionID) }); err != nil {
		return fmt.Errorf("complete warm transition: %w", err)
	}
	r.client.EndWarmActivation()
	if r.exec != nil {
		// The new run's task page hears of its workspace too.
		if err := r.exec.m.Attached(); err != nil {
			r.log.Warn("report the workspace to the attached run", "err", err)
		}
	}
	warmKillPoint(killActivated)
	r.log.Info("warm transition activated", "transitionId", rcpt.TransitionID, "runId", rcpt.NewIdentity.RunID)
	return r.connected(ctx, c, wel, true)
}

// resultPayload is the command_result payload of res, as sender.sendResult
// sends it (the receipt's resultDigest covers exactly these fields).
func resultPayload(res state.CommandResult) json.RawMessage {
	return jsonenc.MustMarshal(prp.CommandResultPayload{
		CommandID: res.CommandID, ControllerSeq: res.ControllerSeq, CommandType: res.CommandType,
		Status: wireStatus(res), Result: res.Result,
	})
}

// owns reports whether commandID is the run.attach this process is rotating for.
func (w *warm) owns(commandID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range []*prp.Command{w.waiting, w.preparing} {
		if c != nil && c.CommandID == commandID {
			return true
		}
	}
	return w.prepared != nil && w.prepared.CommandID == commandID
}

// preparedID is the prepared attach's commandId, "" when none awaits its
// receipt.
func (w *warm) preparedID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.prepared == nil {
		return ""
	}
	return w.prepared.CommandID
}

// resendPrepared re-sends a prepared attach's journaled result, so the core
// acknowledges it with its receipt again (CP: a replayed attach result
// gets its receipt); a still-waiting attach sends nothing yet.
func (w *warm) resendPrepared(s *sender, commandID string) {
	w.mu.Lock()
	prepared := w.prepared != nil && w.prepared.CommandID == commandID
	w.mu.Unlock()
	if !prepared {
		return
	}
	if res, ok := s.store.Result(commandID); ok {
		s.queueResult(res) // the ack wait's bound settles a result that never arrives
	}
}
