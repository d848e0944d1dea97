package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
)

// Command result codes runnerd adds (beyond prp.md §11). A command refused
// with one of them is journaled and sent with status "rejected": it had no
// effect.
const (
	// codeCommandNotImplemented: this build has no executor for the command type.
	codeCommandNotImplemented = "command_not_implemented"
	// codeRunnerDraining: runner.drain was accepted, so new turns are refused (prp.md §7.5).
	codeRunnerDraining = "runner_draining"
)

// The loop emits runner.connected, runner.reconnected, runner.draining,
// runner.suspended and runner.stopped (prp.md §8.3; runner.suspending and
// runner.reconciled are in suspend.go and the state package). Like the
// reference runner, runnerd never emits runner.disconnected: a dropped link
// cannot carry it, and the core observes the drop itself.

// errCommandNotImplemented, returned by a handler, answers the command
// rejected with code command_not_implemented.
var errCommandNotImplemented = errors.New(codeCommandNotImplemented)

// handler executes one command type. The loop calls it after the command
// is journaled as pending, one command at a time. It returns the result
// object (nil means {}) for status completed, or an error for status failed
// with {code: command_execution_failed, message: err.Error()} (prp.md §7.2
// step 6), or errCommandNotImplemented. The error text leaves the process:
// it must name the failure, never carry provider text, payloads or secrets.
// The ACP executor's handlers (agent.go) commit their events through its
// Sink.
type handler func(ctx context.Context, cmd *prp.Command) (json.RawMessage, error)

// emit commits events to the outbox in one durable write, in order, then
// sends them on the current connection (if any).
type emit func(ctx context.Context, events ...state.Event) error

// commandHandler is how the loop executes one command type.
type commandHandler struct {
	// owned: the loop executes the type itself (lifecycle, fences, warm
	// rotation); neither the executor nor options.Handlers replaces it.
	owned bool
	// execute runs an admitted command's effect and records its result,
	// which the loop then sends. Only a storage failure is returned.
	execute func(r *loop, ctx context.Context, cmd *prp.Command) (state.CommandResult, error)
	// begin, set instead of execute, starts a command that sends its own
	// result later (run.attach: when its rotation wait ends, warm.go).
	begin func(r *loop, ctx context.Context, cmd *prp.Command) error
}

// commandHandlers is the loop's dispatch table: one entry per type of the
// PRP command catalogue (prp.CommandTypes), which its test checks. The
// provider commands go to the executor's handler of their type, and are
// refused command_not_implemented when there is none.
var commandHandlers = map[string]commandHandler{
	prp.CommandRunnerSuspend:   {owned: true, execute: (*loop).executeTerminal},
	prp.CommandRunnerShutdown:  {owned: true, execute: (*loop).executeTerminal},
	prp.CommandRunnerDrain:     {owned: true, execute: (*loop).executeDrain},
	prp.CommandSessionSnapshot: {owned: true, execute: (*loop).executeSnapshot},
	prp.CommandRunAttach:       {owned: true, begin: (*loop).beginAttach},

	prp.CommandRunPrepare:                {execute: (*loop).executeProvider},
	prp.CommandRunCancel:                 {execute: (*loop).executeProvider},
	prp.CommandSessionOpen:               {execute: (*loop).executeProvider},
	prp.CommandSessionClose:              {execute: (*loop).executeProvider},
	prp.CommandSessionDestroy:            {execute: (*loop).executeProvider},
	prp.CommandSessionBudgetIncrease:     {execute: (*loop).executeProvider},
	prp.CommandSessionGoalGet:            {execute: (*loop).executeProvider},
	prp.CommandSessionGoalSet:            {execute: (*loop).executeProvider},
	prp.CommandSessionGoalClear:          {execute: (*loop).executeProvider},
	prp.CommandTurnStart:                 {execute: (*loop).executeProvider},
	prp.CommandTurnSteer:                 {execute: (*loop).executeProvider},
	prp.CommandTurnInterrupt:             {execute: (*loop).executeProvider},
	prp.CommandTurnStop:                  {execute: (*loop).executeProvider},
	prp.CommandRequestResolve:            {execute: (*loop).executeProvider},
	prp.CommandInteractionReceipt:        {execute: (*loop).executeProvider},
	prp.CommandSemanticToolResult:        {execute: (*loop).executeProvider},
	prp.CommandExternalProviderOperation: {execute: (*loop).executeProvider},
}

// loopOwned reports whether the loop executes commandType itself.
func loopOwned(commandType string) bool { return commandHandlers[commandType].owned }

// terminalLifecycle is the lifecycle a terminal command leaves (prp.md §7.4).
func terminalLifecycle(commandType string) state.Lifecycle {
	switch commandType {
	case prp.CommandRunnerSuspend:
		return state.Suspended
	case prp.CommandRunnerShutdown:
		return state.Stopped
	}
	return ""
}

// refusal returns the code and message of a command refused before any
// effect, or "" when it should execute.
func (r *loop) refusal(tx *state.Tx, cmd *prp.Command) (code, message string) {
	if tx.Lifecycle() == state.Draining && cmd.Type == prp.CommandTurnStart {
		return codeRunnerDraining, "runner is draining; new turns are refused"
	}
	if loopOwned(cmd.Type) || r.handlers[cmd.Type] != nil {
		return "", ""
	}
	return codeCommandNotImplemented, notImplemented(cmd.Type)
}

func notImplemented(commandType string) string {
	return "command type " + commandType + " is not implemented by this runner"
}

// execute runs an admitted command's effect through its entry in
// commandHandlers and records its result. Only a storage failure is
// returned: it is fatal, and the pending marker makes the command
// indeterminate after the restart.
func (r *loop) execute(ctx context.Context, cmd *prp.Command) (state.CommandResult, error) {
	res, err := commandHandlers[cmd.Type].execute(r, ctx, cmd)
	if err != nil {
		return state.CommandResult{}, fmt.Errorf("record command seq %d: %w", cmd.ControllerSeq, err)
	}
	return res, nil
}

// commandFact is the payload of the lifecycle event a loop-owned command
// emits.
func commandFact(cmd *prp.Command) json.RawMessage {
	return jsonenc.MustMarshal(map[string]any{"commandId": cmd.CommandID, "controllerSeq": cmd.ControllerSeq})
}

// executeTerminal is runner.suspend and runner.shutdown: lifecycle, fence,
// fact and result in one write, before the result is sent (prp.md §7.4).
func (r *loop) executeTerminal(_ context.Context, cmd *prp.Command) (state.CommandResult, error) {
	var res state.CommandResult
	l := terminalLifecycle(cmd.Type)
	evt := prp.EventRunnerStopped
	if l == state.Suspended {
		evt = prp.EventRunnerSuspended
	}
	err := r.update(func(tx *state.Tx) error {
		var err error
		if res, err = tx.FinishCommand(cmd.CommandID, state.StatusCompleted, jsonenc.MustMarshal(map[string]any{"lifecycle": l})); err != nil {
			return err
		}
		if err := tx.SetTerminalFence(res, l); err != nil {
			return err
		}
		_, err = tx.Enqueue(state.Event{Type: evt, Priority: state.P0, Payload: commandFact(cmd)})
		return err
	})
	return res, err
}

// executeDrain is runner.drain: its journal entry, the lifecycle, the
// fact and the result in one write (a one-write command, evidence.go), so
// a crash never leaves it indeterminate: before that write nothing
// happened and the core delivers it again.
func (r *loop) executeDrain(_ context.Context, cmd *prp.Command) (state.CommandResult, error) {
	var res state.CommandResult
	err := r.update(func(tx *state.Tx) error {
		if err := r.journalDeferred(tx, cmd.CommandID); err != nil {
			return err
		}
		if err := tx.SetLifecycle(state.Draining); err != nil {
			return err
		}
		if _, err := tx.Enqueue(state.Event{Type: prp.EventRunnerDraining, Priority: state.P0, Payload: commandFact(cmd)}); err != nil {
			return err
		}
		var err error
		res, err = tx.FinishCommand(cmd.CommandID, state.StatusCompleted,
			jsonenc.MustMarshal(map[string]any{"lifecycle": state.Draining, "retainedEventsDrained": true}))
		return err
	})
	if err != nil {
		return state.CommandResult{}, err
	}
	r.flush()
	return res, nil
}

// executeSnapshot is session.snapshot: the active provider turn and
// whether a warm attach could rotate now.
func (r *loop) executeSnapshot(_ context.Context, cmd *prp.Command) (state.CommandResult, error) {
	var active any // null without an active provider turn
	idle := false
	if r.exec != nil {
		if turn, _ := r.exec.m.Snapshot(); turn != "" {
			active = turn
		}
		idle = r.exec.m.WarmReady() && !r.warm.busy()
	}
	return r.finishCommand(cmd, state.StatusCompleted,
		jsonenc.MustMarshal(map[string]any{"activeProviderTurnId": active, "warmAttachReady": warmAttachReady(idle, r.store.Summary())}))
}

// executeProvider runs a provider command through the executor's handler
// of its type (refusal made sure there is one) and records what it says.
func (r *loop) executeProvider(ctx context.Context, cmd *prp.Command) (state.CommandResult, error) {
	var res state.CommandResult
	var err error
	out, herr := r.handlers[cmd.Type](ctx, cmd)
	switch {
	case errors.Is(herr, errCommandNotImplemented):
		err = r.update(func(tx *state.Tx) error {
			if err := r.journalDeferred(tx, cmd.CommandID); err != nil {
				return err
			}
			var err error
			res, err = tx.RejectCommand(cmd.CommandID, codeCommandNotImplemented, notImplemented(cmd.Type))
			return err
		})
	case rejectedByAgent(herr) != nil:
		// Refused before any effect (e.g. session_not_open, tools.md §7).
		ce := rejectedByAgent(herr)
		err = r.update(func(tx *state.Tx) error {
			if err := r.journalDeferred(tx, cmd.CommandID); err != nil {
				return err
			}
			var err error
			res, err = tx.RejectCommand(cmd.CommandID, ce.Code, ce.Message)
			return err
		})
	case herr != nil:
		failure := state.FailedResult(herr.Error())
		if coded := commandFailure(herr); coded != nil {
			// A protocol-named failure code (e.g. session_handshake_timeout, acp.md §4.1).
			failure = coded
		}
		res, err = r.finishCommand(cmd, state.StatusFailed, failure)
		code, msg := resultFailure(res.Result)
		r.log.Warn("command failed", "commandId", cmd.CommandID, "type", cmd.Type, "code", code, "message", msg)
	default:
		res, err = r.finishCommand(cmd, state.StatusCompleted, out)
	}
	return res, err
}

// warmAttachReady is session.snapshot's warmAttachReady (prp.md §9.5):
// the provider is idle (agent.Manager.WarmReady: a live agent with an open
// session, no active turn, no pending runtime request, no unsettled tool
// call; no rotation under way) and the whole outbox is acknowledged, since
// run.attach waits for exactly that before it rotates. The pending
// snapshot result itself is not an event, so it does not count.
func warmAttachReady(providerIdle bool, sum state.Summary) bool {
	return providerIdle && sum.AckedSourceSeq == sum.HighestSourceSeq
}

func (r *loop) finishCommand(cmd *prp.Command, status state.CommandStatus, result json.RawMessage) (state.CommandResult, error) {
	var res state.CommandResult
	err := r.update(func(tx *state.Tx) error {
		if err := r.journalDeferred(tx, cmd.CommandID); err != nil {
			return err
		}
		var err error
		if prev, ok := tx.RecordedResult(cmd.CommandID); ok && prev.Status != state.StatusPending {
			// The effect recorded a result with its durable evidence
			// (prp.md §7.2 item 8); the executor's answer is final.
			res, err = tx.ReviseCommand(cmd.CommandID, status, result)
		} else {
			res, err = tx.FinishCommand(cmd.CommandID, status, result)
		}
		if err == nil && r.exec != nil {
			err = r.exec.settled(tx, cmd.CommandID)
		}
		return err
	})
	return res, err
}

// wireStatus is the command_result status of a journal entry: pending and
// indeterminate go out as failed (prp.md §7.2 step 7).
func wireStatus(res state.CommandResult) string {
	return string(res.Wire().Status)
}

func codeResult(code, message string) json.RawMessage {
	return jsonenc.MustMarshal(map[string]string{"code": code, "message": message})
}
