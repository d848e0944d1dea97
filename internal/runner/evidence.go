package runner

import (
	"errors"
	"fmt"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
)

// recovery is what a restarted runnerd does with a command whose journal
// entry was still pending at the crash (prp.md §7.2 items 7–8). Reporting
// execution_indeterminate makes the server block the task until a person
// clicks Retry, so it is kept for effects that leave no durable evidence.
type recovery int

const (
	// recoverIndeterminate: the effect may have half-happened and nothing
	// durable tells: failed {code: execution_indeterminate}, never re-run.
	recoverIndeterminate recovery = iota + 1
	// recoverOneWrite: the journal entry, the result and the effect's
	// evidence are one write, so the entry is never pending at a crash;
	// before that write the command is not journaled and the core's next
	// welcome delivers it again (its effect had not begun). Later writes
	// only revise the recorded result.
	recoverOneWrite
	// recoverFence: a terminal command: lifecycle, fence and result in
	// one write (prp.md §7.4); pending only before it, with no effect.
	recoverFence
	// recoverTurnStart: the staged prompt's files tell whether it reached
	// the agent (agent.recoverPromptLocked, reviseUnstartedTurns).
	recoverTurnStart
	// recoverCloseSession: the close's end state (agent gone, record
	// closed) is brought about and reported completed when the core
	// delivers the command again after the restart (recoverReplayed).
	recoverCloseSession
)

// durableStep is one durable write of a command, in order: what it holds,
// and what a restart right after it finds and reports.
type durableStep struct {
	write   string // what the write holds
	reports string // the command's result after a crash right after it
}

// evidenceRow is a command type's durable steps and its recovery.
type evidenceRow struct {
	steps    []durableStep
	recovery recovery
}

// Words shared by many rows.
const (
	stepPending      = "journal: pending marker"
	stepResult       = "journal: result"
	reportsIndet     = "failed execution_indeterminate"
	reportsResult    = "the recorded result"
	reportsRedeliver = "nothing journaled: the core delivers it again and it runs once"
)

// evidenceTable is, beside the dispatch table (commandHandlers), the
// durable evidence every command type's effect leaves at each durable
// step and what recovery reports when it finds it. Its test checks that
// every type of the catalogue has a row, and the crash tests in test/e2e
// kill runnerd after each step of the rows they cover.
var evidenceTable = map[string]evidenceRow{
	prp.CommandSessionSnapshot: {recovery: recoverOneWrite, steps: []durableStep{
		{"journal entry and result together (read-only)", reportsResult},
	}},
	prp.CommandRunnerSuspend: {recovery: recoverFence, steps: []durableStep{
		{stepPending, reportsIndet + " (no effect: the fence is the effect)"},
		{"lifecycle, terminal fence, runner.suspended and result", "the recorded result; the fence is reconciled"},
	}},
	prp.CommandRunnerShutdown: {recovery: recoverFence, steps: []durableStep{
		{stepPending, reportsIndet + " (no effect: the fence is the effect)"},
		{"lifecycle, terminal fence, runner.stopped and result", "the recorded result; the fence is reconciled"},
	}},
	prp.CommandRunnerDrain: {recovery: recoverOneWrite, steps: []durableStep{
		{"journal entry, lifecycle draining, runner.draining and the result together", reportsResult},
	}},
	prp.CommandRunAttach: {recovery: recoverIndeterminate, steps: []durableStep{
		{stepPending, reportsIndet + " (state.warm: the attach was not applied)"},
		{"prepared warm transition", reportsIndet},
		{"activating write with the result", reportsResult},
	}},
	prp.CommandRunPrepare: {recovery: recoverIndeterminate, steps: []durableStep{
		{stepPending, reportsIndet},
		{"binding (record) and side files", reportsIndet},
		{stepResult, reportsResult},
	}},
	prp.CommandSessionOpen: {recovery: recoverIndeterminate, steps: []durableStep{
		{stepPending, reportsIndet},
		{"launched process session (record)", reportsIndet + "; the next session.open stops it and starts clean"},
		{"session record, harness.ready, session.started|resumed and the result", reportsResult},
	}},
	prp.CommandTurnStart: {recovery: recoverTurnStart, steps: []durableStep{
		{stepPending, "failed prompt_not_delivered (the prompt is staged only later)"},
		{"staged prompt (temp name, seq), turn.started and the result", "completed if the prompt was published, else failed prompt_not_delivered; session dir gone: " + reportsIndet},
		{stepResult, reportsResult},
	}},
	prp.CommandSessionClose: {recovery: recoverCloseSession, steps: []durableStep{
		{stepPending, "the close runs to its end state when redelivered: completed {closed:true}"},
		{"record closed, requests cancelled, open tool calls detached", "the stop finishes when redelivered: completed {closed:true}"},
		{"harness.exited (the agent's exit)", "completed {closed:true}"},
		{"record without a process", "completed {closed:true}"},
		{stepResult, reportsResult},
	}},
	prp.CommandSemanticToolResult: {recovery: recoverOneWrite, steps: []durableStep{
		{"journal entry, semantic_tool.result, the result, and the call detached with its result recorded (marked answered by this command)",
			"completed {status: detached, callId} (reviseUnanswered); the agent's repeated call takes the recorded answer once, no new input, never semantic_tool.reconciled"},
		{"the result again, with the answered call settled (the answer was handed to the agent)", reportsResult},
	}},
	prp.CommandRequestResolve: {recovery: recoverIndeterminate, steps: []durableStep{
		{stepPending, reportsIndet},
		{"runtime_request.resolved, the answer line's reservation and the result", reportsResult},
	}},
	prp.CommandTurnInterrupt: {recovery: recoverIndeterminate, steps: []durableStep{
		{stepPending, reportsIndet},
		{"requests cancelled, record reset", reportsIndet},
		{"turn settled (turn.interrupted)", reportsIndet},
		{stepResult, reportsResult},
	}},
	prp.CommandTurnStop: {recovery: recoverIndeterminate, steps: []durableStep{
		{stepPending, reportsIndet},
		{"requests cancelled, record closed", reportsIndet},
		{"harness.exited", reportsIndet},
		{stepResult, reportsResult},
	}},
	prp.CommandRunCancel: {recovery: recoverIndeterminate, steps: []durableStep{
		{stepPending, reportsIndet},
		{"requests cancelled, record reset", reportsIndet},
		{stepResult, reportsResult},
	}},
	prp.CommandSessionDestroy: {recovery: recoverIndeterminate, steps: []durableStep{
		{stepPending, reportsIndet},
		{"session.closed and the record discarded", reportsIndet},
		{stepResult, reportsResult},
	}},
	prp.CommandTurnSteer:                 noEffectRow,
	prp.CommandSessionBudgetIncrease:     noEffectRow,
	prp.CommandSessionGoalGet:            noEffectRow,
	prp.CommandSessionGoalSet:            noEffectRow,
	prp.CommandSessionGoalClear:          noEffectRow,
	prp.CommandInteractionReceipt:        noEffectRow,
	prp.CommandExternalProviderOperation: noEffectRow,
}

// noEffectRow is a type this runner refuses or answers without a durable
// effect (rejected command_not_implemented, or a failure before any
// write): refusal and journal entry are one write.
var noEffectRow = evidenceRow{recovery: recoverIndeterminate, steps: []durableStep{
	{stepPending, reportsIndet},
	{stepResult, reportsResult},
}}

// recoveryOf returns the recovery of commandType.
func recoveryOf(commandType string) recovery { return evidenceTable[commandType].recovery }

// errAdmissionDeferred aborts the admission write of a one-write command:
// its journal entry goes into the write that records its result.
var errAdmissionDeferred = errors.New("admission deferred to the result's write")

// journalDeferred journals, inside tx, the one-write command being
// executed (loop.deferred) if commandID names it and it is not journaled
// yet; the caller then records its result in the same write.
func (r *loop) journalDeferred(tx *state.Tx, commandID string) error {
	cmd := r.deferred.Load()
	if cmd == nil || cmd.CommandID != commandID {
		return nil
	}
	if _, ok := tx.RecordedResult(commandID); ok {
		return nil
	}
	adm, err := tx.BeginCommand(cmd)
	if err != nil {
		return err
	}
	if adm.Disposition != state.Execute {
		return fmt.Errorf("journal command seq %d: admitted as %d, not for execution", cmd.ControllerSeq, adm.Disposition)
	}
	return nil
}
