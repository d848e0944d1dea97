package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/agent"
	"github.com/pcrunner/pcrunner/internal/codexapp"
	"github.com/pcrunner/pcrunner/internal/opencode"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/toolcall"
)

// agentRecord is the state store's record holding the agent executor's
// durable record (acp.md §3.4).
const agentRecord = "acpAgent"

// agentTextPrefix starts the names of the store's texts that hold the
// agent's open item texts (agent.ItemText), followed by the item id.
const agentTextPrefix = agentRecord + "/item/"

// agentShutdownWait bounds stopping the agent on an orderly runnerd stop:
// the agent stop wait plus a margin (acp.md §3.6).
const agentShutdownWait = acpx.AgentStopWait + 2*time.Second

// agentExec plugs the ACP executor (internal/agent) into the loop: it is
// the agent's durable Sink and the handler of the provider commands.
type agentExec struct {
	r   *loop
	m   *agent.Manager
	ctx context.Context // the loop's run context, for sends outside a command
	// drained is fired by the ACK path (loop.ackApplied).
	drained drainSignal
}

// newAgentExec builds the executor from the stored record. A missing pcwrap
// is not fatal: session.open then fails with agent_spawn_failed.
// drivers are the providers runnerd runs, one line each; opencode is the
// executable that serves kind opencode ("" for opencode on PATH).
func drivers(opencodeExecutable string) []provider.Registration {
	oc := opencode.Registration
	oc.Executable = opencodeExecutable
	return []provider.Registration{acpx.Registration, codexapp.Registration, oc}
}

func newAgentExec(r *loop) (*agentExec, error) {
	var st agent.Stored
	if _, err := r.store.Record(agentRecord, &st); err != nil {
		return nil, err
	}
	st.RestoreTexts(func(itemID string) (string, bool) {
		b, ok := r.store.Text(agentTextPrefix + itemID)
		return string(b), ok
	})
	pcwrap, err := agent.FindPcwrap(r.cfg.PcwrapPath)
	if err != nil {
		r.log.Warn("pcwrap not found; agents cannot start", "err", err)
		pcwrap = "pcwrap"
	}
	a := &agentExec{r: r, ctx: context.Background()}
	a.m = agent.NewManager(agent.Config{
		StateDir: r.cfg.StateDir, Pcwrap: pcwrap, Drivers: drivers(r.cfg.OpenCodeExecutable),
		Environ: os.Environ(), Sink: a,
		Logger: r.log, Stderr: os.Stderr, Clock: r.clk,
		ResumeBound: r.cfg.SessionOpenResumeTimeout, ColdBound: r.cfg.ColdTimeout,
		CancelGrace: r.cfg.CancelGrace,
		Gate:        acpx.NewColdStartGate(r.cfg.MaxConcurrentColdStarts, r.clk),
		// A workspace event's sealed frame, 2×(len+16)+128 bytes for len
		// encoded bytes, stays within the frame limit (workspace.md §3.4),
		// and the turn's workspace events fit the outbox together.
		WorkspaceWalkTimeout: r.cfg.WorkspaceWalkTimeout,
		MetricInterval:       r.cfg.SandboxMetricInterval,
		WorkspacePayloadBound: func() int {
			return workspacePayloadBound(r.frames.get(), int(r.cfg.MaxOutboxBytes-r.cfg.P0ReserveBytes), r.store.Identity())
		},
		Redact: state.RedactSecrets,
		Correlation: func() toolcall.Correlation {
			id := r.store.Identity()
			return toolcall.Correlation{RunID: id.RunID, NormalizedSessionID: id.NormalizedSessionID, TurnID: id.TurnID, ItemID: id.ItemID}
		},
	}, st)
	return a, nil
}

// start re-adopts a live agent (acp.md §3.5) for the run context ctx.
func (a *agentExec) start(ctx context.Context) {
	a.ctx = ctx
	if err := a.reviseUnstartedTurns(); err != nil {
		a.r.log.Error("revise interrupted turn.start", "err", err)
	}
	if err := a.reviseUnanswered(); err != nil {
		a.r.log.Error("revise cut-off tool answers", "err", err)
	}
	if err := a.m.Start(); err != nil {
		a.r.log.Error("re-adopt agent", "err", err)
	}
}

// recoverReplayed settles a command that was pending at the crash, now
// indeterminate, when the core delivers it again, from what its effect
// left (recoveryOf, evidence.go); other commands keep res. It runs on the
// live connection, so the agent's reader can consume what a stopping
// agent writes (prp.md §8.5 flow control needs the core's ACKs). The
// result has never been sent.
func (a *agentExec) recoverReplayed(ctx context.Context, cmd *prp.Command, res state.CommandResult) (state.CommandResult, error) {
	if !res.RecoveredPending() {
		return res, nil // settled, or revised from its evidence already
	}
	var status state.CommandStatus
	var out json.RawMessage
	switch rec := evidenceTable[cmd.Type]; rec.recovery {
	case recoverFinish:
		// Idempotent: the effect is an end state, and finishing it now
		// cannot do it twice.
		a.m.SettleDeadProcess(ctx)
		var err error
		status = state.StatusCompleted
		if out, err = a.handlers()[cmd.Type](ctx, cmd); err != nil {
			status, out = state.StatusFailed, state.FailedResult(err.Error())
			if coded := commandFailure(err); coded != nil {
				out = coded
			}
		}
	case recoverNotDone:
		status, out = state.StatusFailed, codeResult(rec.code, rec.message)
	default:
		return res, nil
	}
	var rev state.CommandResult
	err := a.r.update(func(tx *state.Tx) error {
		var err error
		rev, err = tx.ReviseCommand(res.CommandID, status, out)
		return err
	})
	return rev, err
}

// reviseUnstartedTurns settles each turn.start that was still pending at
// the crash: its prompt is published only after the write that records
// its result (prp.md §7.2 item 8), so a pending one never reached the
// agent. It is failed {code: prompt_not_delivered}, not indeterminate.
// Nothing has sent these results yet.
func (a *agentExec) reviseUnstartedTurns() error {
	var ids []string
	for _, c := range a.r.store.Recovery().Indeterminate {
		if c.CommandType == prp.CommandTurnStart {
			ids = append(ids, c.CommandID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return a.r.update(func(tx *state.Tx) error {
		for _, id := range ids {
			if prev, ok := tx.RecordedResult(id); !ok || prev.Status != state.StatusIndeterminate {
				continue // already revised by an earlier life
			}
			if _, err := tx.ReviseCommand(id, state.StatusFailed,
				codeResult(agent.CodePromptNotDelivered, "runner restarted before the prompt was queued")); err != nil {
				return err
			}
		}
		return nil
	})
}

// reviseUnanswered settles each semantic_tool.result whose answer to the
// waiting agent a crash may have cut off: its one write recorded the
// result as delivered and kept it on the call, and the write that would
// have confirmed the hand-over never came. The result is recorded, not
// known delivered: {status: detached, callId}, and the agent's repeated
// call takes it (tools.md §3 items 1, 5, 8). The marks are dropped in the
// same write. Nothing has sent these results yet: a result goes out only
// after that confirming write.
func (a *agentExec) reviseUnanswered() error {
	var st agent.Stored
	if ok, err := a.r.store.Record(agentRecord, &st); err != nil || !ok || st.Tools == nil {
		return err
	}
	cut := st.Tools.Unanswered()
	if len(cut) == 0 {
		return nil
	}
	return a.r.update(func(tx *state.Tx) error {
		for commandID, callID := range cut {
			if prev, ok := tx.RecordedResult(commandID); !ok || prev.Status != state.StatusCompleted {
				continue
			}
			if _, err := tx.ReviseCommand(commandID, state.StatusCompleted, toolcall.StatusResult("detached", callID)); err != nil {
				return err
			}
		}
		return tx.SetRecord(agentRecord, st)
	})
}

// stop ends the executor. An orderly stop (ctx cancelled by a signal, a
// terminal command) stops the agent as acp.md §3.6 says; a fatal error
// leaves it for re-adoption.
func (a *agentExec) stop(orderly bool) {
	if orderly {
		ctx, cancel := context.WithTimeout(context.Background(), agentShutdownWait)
		defer cancel()
		a.m.Shutdown(ctx)
		return
	}
	a.m.Close()
}

// Commit implements agent.Sink: the record, the item texts and the events
// in one durable write, then a poke of the send routine (it never waits
// for the socket).
func (a *agentExec) Commit(record json.RawMessage, texts []agent.ItemText, evs []provider.Event, out *agent.CommandOutcome) error {
	events, err := stateEvents(evs)
	if err != nil {
		return err
	}
	chunked := false
	err = a.r.store.Update(func(tx *state.Tx) error {
		chunked = false
		if err := tx.SetRecord(agentRecord, record); err != nil {
			return err
		}
		if err := putItemTexts(tx, texts); err != nil {
			return err
		}
		if out != nil {
			// The result rides with the evidence of its effect (prp.md
			// §7.2 item 8); it has not been sent. A one-write command is
			// journaled here too.
			if err := a.r.journalDeferred(tx, out.CommandID); err != nil {
				return err
			}
			if _, err := tx.ReviseCommand(out.CommandID, state.CommandStatus(out.Status), out.Result); err != nil {
				return err
			}
		}
		for _, run := range splitAtCarriers(events, evs) {
			for _, e := range tx.Fold(run.events) {
				if err := a.enqueue(tx, e); err != nil {
					return err
				}
			}
			if run.carrier != nil {
				out, err := a.enqueueCarrier(tx, *run.carrier)
				if err != nil {
					return err
				}
				chunked = chunked || out == bodyAttached
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	types := eventTypes(events)
	if chunked {
		types = append(types, prp.EventOutputBodyChunk)
	}
	hookDurableWrite(types)
	a.r.flush()
	return nil
}

// enqueue adds one event; an outbox bound refuses it without failing the
// write.
func (a *agentExec) enqueue(tx *state.Tx, e state.Event) error {
	_, err := tx.Enqueue(e)
	if errors.Is(err, state.ErrEventTooLarge) {
		err = a.refuseTooLarge(tx, e)
	}
	if err != nil && !outboxBound(err) {
		return err
	}
	return nil
}

// putItemTexts stores the item texts of a commit (agent.ItemText): each
// listed one extended or replaced, every other one dropped.
func putItemTexts(tx *state.Tx, texts []agent.ItemText) error {
	listed := make(map[string]bool, len(texts))
	for _, t := range texts {
		name := agentTextPrefix + t.ItemID
		listed[name] = true
		if err := tx.PutText(name, t.Off, []byte(t.Chunk)); err != nil {
			return fmt.Errorf("store item text: %w", err)
		}
	}
	for _, name := range tx.TextNames(agentTextPrefix) {
		if !listed[name] {
			tx.DropText(name)
		}
	}
	return nil
}

// enqueueCarrier adds an event whose long text may go as an output body
// (workspace.md §7), with enqueue's handling of an outbox bound.
func (a *agentExec) enqueueCarrier(tx *state.Tx, c bodyCarrier) (bodyOutcome, error) {
	out, err := enqueueBody(tx, c)
	if errors.Is(err, state.ErrEventTooLarge) {
		err = a.refuseTooLarge(tx, c.Event)
	}
	if err != nil && !outboxBound(err) {
		return out, err
	}
	return out, nil
}

// carrierRun is a run of events to fold, then at most one carrier of a
// long text.
type carrierRun struct {
	events  []state.Event
	carrier *bodyCarrier
}

// splitAtCarriers cuts events (stateEvents of evs, one for one) after
// each event that carries a full text: such an event is never folded, and
// its chunks go right before it.
func splitAtCarriers(events []state.Event, evs []provider.Event) []carrierRun {
	var runs []carrierRun
	start := 0
	for i, e := range evs {
		if e.Body == "" {
			continue
		}
		c := &bodyCarrier{Event: events[i], Text: e.Body, TextField: e.BodyField, TruncatedField: e.BodyTruncatedField}
		runs = append(runs, carrierRun{events: events[start:i], carrier: c})
		start = i + 1
	}
	if start < len(events) {
		runs = append(runs, carrierRun{events: events[start:]})
	}
	return runs
}

// refuseTooLarge stands in for an event the outbox refused because its
// sealed frame exceeds the frame limit: the agent bounds workspace events
// to the limit beforehand, so one refused still says so
// (harness.diagnostic workspace_event_too_large, workspace.md §3.4); any
// other is logged. The write goes on either way: never a stall.
func (a *agentExec) refuseTooLarge(tx *state.Tx, e state.Event) error {
	a.r.log.Warn("event refused: its sealed frame exceeds the frame limit", "type", e.Type, "bytes", len(e.Payload))
	if !strings.HasPrefix(e.Type, workspaceEventPrefix) {
		return nil
	}
	_, err := tx.Enqueue(state.Event{Type: prp.EventHarnessDiagnostic, Priority: state.P1,
		Payload: json.RawMessage(`{"code":"workspace_event_too_large","message":"a workspace event does not fit the frame limit"}`)})
	return err
}

// workspaceEventPrefix starts the workspace event types (workspace.md §1).
const workspaceEventPrefix = "workspace."

// eventTypes lists the types of events, for the kill-point hook.
func eventTypes(events []state.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

// settled runs in the write that records commandID's result after its
// handler returned: the agent's proof of a staged prompt is dropped.
func (a *agentExec) settled(tx *state.Tx, commandID string) error {
	var st agent.Stored
	if ok, err := tx.Record(agentRecord, &st); err != nil || !ok {
		return err
	}
	prompt := st.SettlePrompt(commandID)
	if !st.SettleAnswer(commandID) && !prompt {
		return nil
	}
	return tx.SetRecord(agentRecord, st)
}

// Drained implements agent.Sink: provider output is taken only once
// everything sent is acknowledged (prp.md §8.5).
func (a *agentExec) Drained() bool {
	s := a.r.store.Summary()
	return s.AckedSourceSeq >= s.HighestSourceSeq
}

// DrainSignal implements agent.Sink: closed at the next applied ACK.
func (a *agentExec) DrainSignal() <-chan struct{} { return a.drained.wait() }

// stateEvents converts mapped events for the outbox: the provider turn and
// item ids go into an open payload (prp.PayloadRule; the envelope carries
// the runner's durable identity). Types that coalesce by item (item.delta)
// carry CoalesceKey = itemId: the outbox merges consecutive deltas of one
// item into one unsent P2 event (prp.md §8.1, §9.3), in this commit or a
// later one. Types that keep only the newest (sandbox.metric) carry their
// type as the key.
func stateEvents(evs []provider.Event) ([]state.Event, error) {
	out := make([]state.Event, 0, len(evs))
	for _, e := range evs {
		p := make(map[string]any, len(e.Payload)+2)
		for k, v := range e.Payload {
			p[k] = v
		}
		rule := prp.EventRuleOf(e.EventType)
		exact := rule.Payload != prp.PayloadOpen
		if exact {
			// Their schemas allow no extra field; the ids are inside.
		} else if e.TurnID != "" {
			if _, ok := p["providerTurnId"]; !ok {
				p["providerTurnId"] = e.TurnID
			}
		}
		if e.ItemID != "" && !exact {
			if _, ok := p["itemId"]; !ok {
				p["itemId"] = e.ItemID
			}
		}
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		ev := state.Event{Type: e.EventType, Priority: state.Priority(e.Priority), Payload: b, ExecutorID: e.ExecutorID}
		if id, _ := p["itemId"].(string); rule.CoalesceByItem && id != "" {
			ev.CoalesceKey = id
		}
		if rule.CoalesceNewest {
			ev.CoalesceKey = e.EventType
		}
		out = append(out, ev)
	}
	return out, nil
}

// handlers returns the provider command handlers.
func (a *agentExec) handlers() map[string]handler {
	plain := func(f func(json.RawMessage) (json.RawMessage, error)) handler {
		return func(_ context.Context, cmd *prp.Command) (json.RawMessage, error) {
			return f(cmd.Payload)
		}
	}
	withCtx := func(f func(context.Context) (json.RawMessage, error)) handler {
		return func(ctx context.Context, _ *prp.Command) (json.RawMessage, error) {
			return f(ctx)
		}
	}
	cancel := func(k agent.CancelKind) handler {
		return withCtx(func(ctx context.Context) (json.RawMessage, error) { return a.m.Cancel(ctx, k) })
	}
	// These record their result in the write that holds their effect's
	// evidence, so they need the command id (prp.md §7.2 item 8).
	turnStart := func(_ context.Context, cmd *prp.Command) (json.RawMessage, error) {
		return a.m.StartTurn(cmd.CommandID, cmd.Payload)
	}
	open := func(ctx context.Context, cmd *prp.Command) (json.RawMessage, error) {
		return a.m.Open(ctx, cmd.CommandID)
	}
	resolve := func(_ context.Context, cmd *prp.Command) (json.RawMessage, error) {
		return a.m.Resolve(cmd.CommandID, cmd.Payload)
	}
	toolResult := func(_ context.Context, cmd *prp.Command) (json.RawMessage, error) {
		return a.m.ToolResult(cmd.CommandID, cmd.Payload)
	}
	return map[string]handler{
		prp.CommandRunPrepare:     plain(a.m.Prepare),
		prp.CommandSessionOpen:    open,
		prp.CommandTurnStart:      turnStart,
		prp.CommandTurnSteer:      plain(a.m.SteerTurn),
		prp.CommandTurnInterrupt:  cancel(agent.Interrupt),
		prp.CommandTurnStop:       cancel(agent.StopTurn),
		prp.CommandRunCancel:      cancel(agent.RunCancel),
		prp.CommandSessionClose:   withCtx(a.m.CloseSession),
		prp.CommandSessionDestroy: withCtx(a.m.Destroy),
		prp.CommandRequestResolve: resolve,
		// tools.md §3 items 4–6.
		prp.CommandSemanticToolResult: toolResult,
	}
}

// rejectedByAgent returns the agent's refusal behind err (status
// rejected: the command had no effect), or nil.
func rejectedByAgent(err error) *agent.CommandError {
	var ce *agent.CommandError
	if errors.As(err, &ce) && ce.Rejected {
		return ce
	}
	return nil
}

// commandFailure is the result of a handler error: a protocol-named code
// from the agent (e.g. session_handshake_timeout, acp.md §4.1), else nil
// for the loop's command_execution_failed.
func commandFailure(err error) json.RawMessage {
	var ce *agent.CommandError
	if errors.As(err, &ce) && ce.Code != "" && ce.Code != state.CodeCommandExecutionFailed {
		return codeResult(ce.Code, ce.Message)
	}
	return nil
}
