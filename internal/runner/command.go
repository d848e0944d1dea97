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
	// CodeCommandNotImplemented: this build has no executor for the command type.
	CodeCommandNotImplemented = "command_not_implemented"
	// CodeRunnerDraining: runner.drain was accepted, so new turns are refused (prp.md §7.5).
	CodeRunnerDraining = "runner_draining"
)

// Runner event types the loop emits (prp.md §8.3; runner.suspending and
// runner.reconciled are in suspend.go and the state package). Like the
// reference runner, runnerd never emits runner.disconnected: a dropped link
// cannot carry it, and the core observes the drop itself.
const (
	eventRunnerConnected   = "runner.connected"
	eventRunnerReconnected = "runner.reconnected"
	eventRunnerDraining    = "runner.draining"
	eventRunnerSuspended   = "runner.suspended"
	eventRunnerStopped     = "runner.stopped"
)

// ErrCommandNotImplemented, returned by a Handler, answers the command
// rejected with code command_not_implemented.
var ErrCommandNotImplemented = errors.New(CodeCommandNotImplemented)

// Handler executes one command type. The loop calls it after the command
// is journaled as pending, one command at a time. It returns the result
// object (nil means {}) for status completed, or an error for status failed
// with {code: command_execution_failed, message: err.Error()} (prp.md §7.2
// step 6), or ErrCommandNotImplemented. The error text leaves the process:
// it must name the failure, never carry provider text, payloads or secrets.
// The ACP executor's handlers (agent.go) commit their events through its
// Sink.
type Handler func(ctx context.Context, cmd *prp.Command) (json.RawMessage, error)

// Emit commits events to the outbox in one durable write, in order, then
// sends them on the current connection (if any).
type Emit func(ctx context.Context, events ...state.Event) error

// loopOwned are the command types the loop executes itself (lifecycle and
// fences): no Handler replaces them.
var loopOwned = map[string]bool{
	"runner.drain": true, "runner.suspend": true, "runner.shutdown": true, "session.snapshot": true,
	prp.CommandRunAttach: true,
}

// terminalLifecycle is the lifecycle a terminal command leaves (prp.md §7.4).
func terminalLifecycle(commandType string) state.Lifecycle {
	switch commandType {
	case "runner.suspend":
		return state.Suspended
	case "runner.shutdown":
		return state.Stopped
	}
	return ""
}

// refusal returns the code and message of a command refused before any
// effect, or "" when it should execute.
func (r *loop) refusal(tx *state.Tx, cmd *prp.Command) (code, message string) {
	if tx.Lifecycle() == state.Draining && cmd.Type == "turn.start" {
		return CodeRunnerDraining, "runner is draining; new turns are refused"
	}
	if loopOwned[cmd.Type] || r.handlers[cmd.Type] != nil {
		return "", ""
	}
	return CodeCommandNotImplemented, notImplemented(cmd.Type)
}

func notImplemented(commandType string) string {
	return "command type " + commandType + " is not implemented by this runner"
}

// execute runs an admitted command's effect and records its result. Only a
// storage failure is returned: it is fatal, and the pending marker makes the
// command indeterminate after the restart.
func (r *loop) execute(ctx context.Context, cmd *prp.Command) (state.CommandResult, error) {
	var res state.CommandResult
	fact := jsonenc.MustMarshal(map[string]any{"commandId": cmd.CommandID, "controllerSeq": cmd.ControllerSeq})
	var err error
	switch cmd.Type {
	case "runner.suspend", "runner.shutdown":
		// Lifecycle, fence, fact and result in one write, before the result
		// is sent (prp.md §7.4).
		l := terminalLifecycle(cmd.Type)
		evt := eventRunnerStopped
		if l == state.Suspended {
			evt = eventRunnerSuspended
		}
		err = r.store.Update(func(tx *state.Tx) error {
			var err error
			if res, err = tx.FinishCommand(cmd.CommandID, state.StatusCompleted, jsonenc.MustMarshal(map[string]any{"lifecycle": l})); err != nil {
				return err
			}
			if err := tx.SetTerminalFence(res, l); err != nil {
				return err
			}
			_, err = tx.Enqueue(state.Event{Type: evt, Priority: state.P0, Payload: fact})
			return err
		})
	case "runner.drain":
		// The effect and the result are separate writes, like any executor
		// effect: a crash between them leaves the fact and an indeterminate
		// command, never a second effect.
		err = r.store.Update(func(tx *state.Tx) error {
			if err := tx.SetLifecycle(state.Draining); err != nil {
				return err
			}
			_, err := tx.Enqueue(state.Event{Type: eventRunnerDraining, Priority: state.P0, Payload: fact})
			return err
		})
		if err == nil {
			r.flush(ctx)
			res, err = r.finishCommand(cmd, state.StatusCompleted,
				jsonenc.MustMarshal(map[string]any{"lifecycle": state.Draining, "retainedEventsDrained": true}))
		}
	case "session.snapshot":
		var active any // null without an active provider turn
		idle := false
		if r.exec != nil {
			if turn, _ := r.exec.m.Snapshot(); turn != "" {
				active = turn
			}
			idle = r.exec.m.WarmReady() && !r.warm.busy()
		}
		res, err = r.finishCommand(cmd, state.StatusCompleted,
			jsonenc.MustMarshal(map[string]any{"activeProviderTurnId": active, "warmAttachReady": warmAttachReady(idle, r.store.Summary())}))
	default:
		out, herr := r.handlers[cmd.Type](ctx, cmd)
		switch {
		case errors.Is(herr, ErrCommandNotImplemented):
			err = r.store.Update(func(tx *state.Tx) error {
				var err error
				res, err = tx.RejectCommand(cmd.CommandID, CodeCommandNotImplemented, notImplemented(cmd.Type))
				return err
			})
		case rejectedByAgent(herr) != nil:
			// Refused before any effect (e.g. session_not_open, tools.md §7).
			ce := rejectedByAgent(herr)
			err = r.store.Update(func(tx *state.Tx) error {
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
	}
	if err != nil {
		return state.CommandResult{}, fmt.Errorf("record command seq %d: %w", cmd.ControllerSeq, err)
	}
	return res, nil
}

// warmAttachReady is session.snapshot's warmAttachReady (prp.md
// §9.5): the provider is idle (agent.Manager.WarmReady: a live agent with
// an open session, no active turn, no pending runtime request, no
// unsettled tool call; no rotation under way) and the whole outbox is
// acknowledged, since run.attach waits for exactly that before it rotates. The pending snapshot result
// itself is not an event, so it does not count.
func warmAttachReady(providerIdle bool, sum state.Summary) bool {
	return providerIdle && sum.AckedSourceSeq == sum.HighestSourceSeq
}

func (r *loop) finishCommand(cmd *prp.Command, status state.CommandStatus, result json.RawMessage) (state.CommandResult, error) {
	var res state.CommandResult
	err := r.store.Update(func(tx *state.Tx) error {
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
