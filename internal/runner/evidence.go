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
// clicks Retry (ambiguous_state), so it is kept for effects that may have
// half-happened without durable evidence of how far they went.
type recovery int

const (
	// recoverIndeterminate: failed {code: execution_indeterminate}, never
	// re-run.
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
	// recoverFinish: an idempotent command whose effect is an end state
	// (the agent stopped, the turn cancelled, the descriptor bound): when
	// the core delivers it again after the restart, the executor runs it
	// to that end state, which cannot do it twice, and its result is the
	// real one (recoverReplayed).
	recoverFinish
	// recoverNotDone: the effect reaches the agent only after the write
	// that records the result, so a pending entry proves it never did:
	// failed with the row's code (recoverReplayed).
	recoverNotDone
)

// Result codes of recoverNotDone rows.
const (
	// codeSessionOpenInterrupted: runnerd restarted during session.open;
	// no session was opened by it, and the next session.open adopts or
	// stops what the cut handshake left (acp.md §4.1).
	codeSessionOpenInterrupted = "session_open_interrupted"
	// codeResolveNotDelivered: runnerd restarted before request.resolve's
	// answer was written; the request still waits for one.
	codeResolveNotDelivered = "resolve_not_delivered"
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
	// code and message are a recoverNotDone row's failure.
	code, message string
}

// Words shared by many rows.
const (
	stepPending    = "journal: pending marker"
	stepResult     = "journal: result"
	reportsIndet   = "failed execution_indeterminate"
	reportsResult  = "the recorded result"
	reportsFinish  = "finished when delivered again: its real result"
	reportsNotDone = "failed with the row's code: the effect never reached the agent"
)

// evidenceTable is, beside the dispatch table (commandHandlers), the
// durable evidence every command type's effect leaves at each durable
// step and what recovery reports when it finds it. Its test checks that
// every type of the catalogue has a row; the crash tests in test/e2e
// (TestEvidenceRowsAfterKill and the tests it names) kill runnerd after
// the steps of the rows.
var evidenceTable = map[string]evidenceRow{
	prp.CommandSessionSnapshot: {recovery: recoverOneWrite, steps: []durableStep{
		{"journal entry and result together (read-only)", reportsResult},
	}},
	prp.CommandRunnerDrain: {recovery: recoverOneWrite, steps: []durableStep{
		{"journal entry, lifecycle draining, runner.draining and the result together", reportsResult},
	}},
	prp.CommandSemanticToolResult: {recovery: recoverOneWrite, steps: []durableStep{
		{"journal entry, semantic_tool.result, the result, and the call detached with its result recorded (marked answered by this command)",
			"completed {status: detached, callId} (reviseUnanswered); the agent's repeated call takes the recorded answer once, no new input, never semantic_tool.reconciled"},
		{"the result again, with the call settled as answered (handed to the agent's request) and kept with its result while its turn may run",
			"completed {status: delivered, callId}; the HTTP answer may not have left, so the agent's repeated call takes the kept result once, no new input"},
	}},
	prp.CommandRunnerSuspend: {recovery: recoverFence, steps: []durableStep{
		{stepPending, reportsIndet + " (no effect: the fence is the effect; the core acks and the process stops)"},
		{"lifecycle, terminal fence, runner.suspended and result", "the recorded result; the fence is reconciled"},
	}},
	prp.CommandRunnerShutdown: {recovery: recoverFence, steps: []durableStep{
		{stepPending, reportsIndet + " (no effect: the fence is the effect; the core acks and the process stops)"},
		{"lifecycle, terminal fence, runner.stopped and result", "the recorded result; the fence is reconciled"},
	}},
	prp.CommandRunAttach: {recovery: recoverIndeterminate, steps: []durableStep{
		{stepPending, reportsIndet + " (state.warm: the attach was not applied)"},
		{"prepared warm transition", reportsIndet + " (the rotation may be half-made)"},
		{"activating write with the result", reportsResult},
	}},
	prp.CommandTurnStart: {recovery: recoverTurnStart, steps: []durableStep{
		{stepPending, "failed prompt_not_delivered (the prompt is staged only later)"},
		{"staged prompt (temp name, seq), turn.started and the result", "completed if the prompt was published, else failed prompt_not_delivered; session dir gone: " + reportsIndet},
		{stepResult, reportsResult},
	}},
	prp.CommandSessionOpen: {recovery: recoverNotDone, code: codeSessionOpenInterrupted,
		message: "runner restarted before the session was opened; the next session.open adopts or replaces what it left",
		steps: []durableStep{
			{stepPending, reportsNotDone},
			{"launched process session (record), handshake progress", reportsNotDone + "; the next session.open adopts or stops it"},
			{"session record, harness.ready, session.started|resumed and the result", reportsResult},
		}},
	prp.CommandRequestResolve: {recovery: recoverNotDone, code: codeResolveNotDelivered,
		message: "runner restarted before the answer was written; the request still waits",
		steps: []durableStep{
			{stepPending, reportsNotDone},
			{"runtime_request.resolved, the staged answer's name and reservation, and the result",
				reportsResult + " (delivered); an answer still staged is published at restart (agent.recoverPromptLocked)"},
		}},
	prp.CommandSessionClose: {recovery: recoverFinish, steps: []durableStep{
		{stepPending, reportsFinish + " (the agent is stopped): completed {closed:true}"},
		{"record closed, requests cancelled, open tool calls detached", reportsFinish + ": completed {closed:true}"},
		{"harness.exited (the agent's exit)", reportsFinish + ": completed {closed:true}"},
		{"record without a process", reportsFinish + ": completed {closed:true}"},
		{stepResult, reportsResult},
	}},
	prp.CommandTurnInterrupt: {recovery: recoverFinish, steps: []durableStep{
		{stepPending, reportsFinish},
		{"requests cancelled, record reset; session/cancel written after it", reportsFinish + " (already_settled once the turn ended)"},
		{"turn settled (turn.interrupted)", reportsFinish + " (already_settled)"},
		{stepResult, reportsResult},
	}},
	prp.CommandTurnStop: {recovery: recoverFinish, steps: []durableStep{
		{stepPending, reportsFinish},
		{"requests cancelled, record closed", reportsFinish},
		{"harness.exited", reportsFinish + " (stopped, exit confirmed)"},
		{stepResult, reportsResult},
	}},
	prp.CommandRunCancel: {recovery: recoverFinish, steps: []durableStep{
		{stepPending, reportsFinish},
		{"requests cancelled, record reset", reportsFinish},
		{stepResult, reportsResult},
	}},
	prp.CommandSessionDestroy: {recovery: recoverFinish, steps: []durableStep{
		{stepPending, reportsFinish},
		{"session.closed and the record discarded", reportsFinish + " (destroyed)"},
		{stepResult, reportsResult},
	}},
	prp.CommandRunPrepare: {recovery: recoverFinish, steps: []durableStep{
		{stepPending, reportsFinish + " (binds the same descriptor)"},
		{"binding (record) and side files", reportsFinish},
		{stepResult, reportsResult},
	}},
	prp.CommandTurnSteer:                 noEffectRow,
	prp.CommandSessionBudgetIncrease:     noEffectRow,
	prp.CommandSessionGoalGet:            goalRow,
	prp.CommandSessionGoalSet:            goalRow,
	prp.CommandSessionGoalClear:          goalRow,
	prp.CommandInteractionReceipt:        noEffectRow,
	prp.CommandExternalProviderOperation: noEffectRow,
}

// noEffectRow is a type this runner refuses or answers without a durable
// effect (rejected command_not_implemented, or a failure before any
// write): the refusal lands in the journal entry's write; only a crash
// between the pending marker and an executor's failure result is left
// indeterminate.
var noEffectRow = evidenceRow{recovery: recoverIndeterminate, steps: []durableStep{
	{stepPending, reportsIndet},
	{stepResult, reportsResult},
}}

// goalRow is a session goal command: its request to the agent is written
// after a write of its own and its result comes with the agent's answer,
// so a crash between them leaves no evidence of whether the agent applied
// it. session.goal.get sends no request: it makes the first and the last
// write only. The snapshot write happens when the agent publishes its goal
// before answering (the extension's order, as fakeacp does).
var goalRow = evidenceRow{recovery: recoverIndeterminate, steps: []durableStep{
	{stepPending, reportsIndet},
	{"the goal request's reservation", reportsIndet + " (the agent may have applied it)"},
	{"the agent's goal snapshot (session_info_update) in the record", reportsIndet + " (applied, but the answer is not recorded)"},
	{"the agent's answer, session.goal.* events and the result", reportsResult},
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

// EvidenceSteps returns, per command type, how many durable steps its
// evidence row has: the kill points <commandType>#1..#n of the testhooks
// build. test/e2e checks that a kill test names every row, so a new
// command type without one fails CI.
func EvidenceSteps() map[string]int {
	out := make(map[string]int, len(evidenceTable))
	for typ, row := range evidenceTable {
		out[typ] = len(row.steps)
	}
	return out
}
