package state

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/quote"
)

// Result codes of the journal (prp.md §7.2, §11).
const (
	CodeExecutionIndeterminate = "execution_indeterminate"
	codeCommandHistoryCompact  = "command_history_compacted"
	CodeCommandExecutionFailed = "command_execution_failed"
)

// CommandStatus is a journal status. On the wire indeterminate is sent as
// failed (prp.md §7.2 step 7).
type CommandStatus string

// Journal statuses (prp.md §7.2, §7.3).
const (
	StatusPending       CommandStatus = "pending"
	StatusCompleted     CommandStatus = "completed"
	StatusFailed        CommandStatus = "failed"
	StatusRejected      CommandStatus = "rejected"
	StatusIndeterminate CommandStatus = "indeterminate"
)

// Disposition is what admission decided.
type Disposition int

// Dispositions of BeginCommand.
const (
	// Execute: the pending marker is in the transaction; run the effect after
	// the Update commits, then FinishCommand.
	Execute Disposition = iota + 1
	// Replay: a duplicate; send Result again, run no effect.
	Replay
	// Reject: send Result (status rejected), run no effect.
	Reject
)

// Admission is BeginCommand's decision.
type Admission struct {
	Disposition Disposition
	// Result is the recorded (Replay) or rejection (Reject) result.
	Result CommandResult
}

// Wire returns the result as sent in command_result: an indeterminate entry
// goes out as failed with its execution_indeterminate code (prp.md §7.2).
func (r CommandResult) Wire() CommandResult {
	if r.Status == StatusIndeterminate || r.Status == StatusPending {
		r.Status = StatusFailed
	}
	return r
}

func codeResult(code, message string) json.RawMessage {
	b, _ := jsonenc.Marshal(map[string]string{"code": code, "message": message})
	return b
}

// BeginCommand admits a command (prp.md §7.2 steps 2–5). On Execute the
// pending marker {status: pending, code: execution_indeterminate} is in the
// transaction: the effect MUST start only after the Update has committed.
// Errors: ErrCommandReplayConflict (fail closed), ErrNonContiguousCommand
// (fatal), prp.ErrInvalidCommand.
func (tx *Tx) BeginCommand(c *prp.Command) (Admission, error) {
	if err := c.Validate(); err != nil {
		return Admission{}, err
	}
	fp, err := c.Fingerprint()
	if err != nil {
		return Admission{}, err
	}
	st := tx.st
	if prev, ok := st.ProcessedCommands[c.CommandID]; ok {
		if st.ProcessedCommandFingerprints[c.CommandID] != fp {
			return Admission{}, fmt.Errorf("admit command seq %d: %w", c.ControllerSeq, ErrCommandReplayConflict)
		}
		return Admission{Disposition: Replay, Result: prev}, nil
	}
	reject := CommandResult{
		CommandID: c.CommandID, ControllerSeq: c.ControllerSeq, CommandType: c.Type, Status: StatusRejected,
		Result: codeResult(codeCommandHistoryCompact, "command is older than the bounded replay journal and was not re-executed"),
	}
	if c.ControllerSeq <= st.CompactedThroughControllerSeq {
		return Admission{Disposition: Reject, Result: reject}, nil
	}
	if c.ControllerSeq != st.LastControllerCommandSeq+1 {
		return Admission{}, fmt.Errorf("admit command: expected seq %d, got %d: %w",
			st.LastControllerCommandSeq+1, c.ControllerSeq, ErrNonContiguousCommand)
	}
	st.LastControllerCommandSeq = c.ControllerSeq
	entry := CommandResult{
		CommandID: c.CommandID, ControllerSeq: c.ControllerSeq, CommandType: c.Type, Status: StatusPending,
		Result: codeResult(CodeExecutionIndeterminate, "command was journaled before its effect"),
	}
	disp := Execute
	if bloomMayContain(st.CompactedCommandFilter, c.CommandID) {
		// The id was evicted from the exact journal: it may be a reuse we can
		// no longer compare. Reject without effect; a false positive only
		// rejects (prp.md §9.3). Journal it so a duplicate replays the same.
		entry, disp = reject, Reject
	}
	tx.journal(entry, fp)
	if disp == Reject {
		return Admission{Disposition: Reject, Result: entry}, nil
	}
	return Admission{Disposition: Execute, Result: entry}, nil
}

func (tx *Tx) journal(entry CommandResult, fp string) {
	st := tx.st
	if st.ProcessedCommands == nil {
		st.ProcessedCommands = map[string]CommandResult{}
	}
	if st.ProcessedCommandFingerprints == nil {
		st.ProcessedCommandFingerprints = map[string]string{}
	}
	st.ProcessedCommands[entry.CommandID] = entry
	st.ProcessedCommandFingerprints[entry.CommandID] = fp
	for len(st.ProcessedCommands) > maxRecentCommands {
		var oldest CommandResult
		first := true
		for _, r := range st.ProcessedCommands {
			if first || r.ControllerSeq < oldest.ControllerSeq {
				oldest, first = r, false
			}
		}
		delete(st.ProcessedCommands, oldest.CommandID)
		delete(st.ProcessedCommandFingerprints, oldest.CommandID)
		st.CompactedThroughControllerSeq = max(st.CompactedThroughControllerSeq, oldest.ControllerSeq)
		st.CompactedCommandFilter = bloomAdd(st.CompactedCommandFilter, oldest.CommandID)
	}
}

// FinishCommand records the outcome of a pending command (prp.md §7.2 step
// 6): completed or failed for an executor's effect, rejected for a command
// refused without effect (see RejectCommand). The result must be a JSON
// object; it is sanitised and bounded by maxCommandResultBytes.
func (tx *Tx) FinishCommand(commandID string, status CommandStatus, result json.RawMessage) (CommandResult, error) {
	if status != StatusCompleted && status != StatusFailed && status != StatusRejected {
		return CommandResult{}, fmt.Errorf("finish command: unsupported status %s", quote.Text(status))
	}
	prev, ok := tx.st.ProcessedCommands[commandID]
	if !ok || prev.Status != StatusPending {
		return CommandResult{}, fmt.Errorf("finish command: %w", errCommandNotPending)
	}
	if result == nil {
		result = json.RawMessage(`{}`)
	}
	clean, err := sanitizeJSON(result)
	if err != nil {
		if errors.Is(err, errInvalidEvent) {
			return CommandResult{}, fmt.Errorf("finish command: result is not a JSON object")
		}
		return CommandResult{}, fmt.Errorf("finish command: %w", err)
	}
	if len(clean) > maxCommandResultBytes {
		return CommandResult{}, fmt.Errorf("finish command: %w", errCommandResultTooLarge)
	}
	prev.Status, prev.Result = status, clean
	tx.st.ProcessedCommands[commandID] = prev
	return prev, nil
}

// RecordedResult returns the journal entry of commandID in this
// transaction.
func (tx *Tx) RecordedResult(commandID string) (CommandResult, bool) {
	r, ok := tx.st.ProcessedCommands[commandID]
	return r, ok
}

// ReviseCommand replaces the recorded outcome of a command whose result
// has not been sent yet: an effect recorded it in the write that holds its
// durable evidence (prp.md §7.2 item 8), and the executor returned another
// result, or a restart found that the evidence did not hold (the prompt
// never reached the agent, or it cannot be known). status is completed,
// failed or indeterminate; the result is sanitised and bounded like
// FinishCommand's.
func (tx *Tx) ReviseCommand(commandID string, status CommandStatus, result json.RawMessage) (CommandResult, error) {
	if status != StatusCompleted && status != StatusFailed && status != StatusIndeterminate {
		return CommandResult{}, fmt.Errorf("revise command: unsupported status %s", quote.Text(status))
	}
	prev, ok := tx.st.ProcessedCommands[commandID]
	if !ok || prev.Status == StatusRejected {
		return CommandResult{}, fmt.Errorf("revise command: %w", errCommandNotPending)
	}
	clean, err := sanitizeJSON(result)
	if err != nil {
		return CommandResult{}, fmt.Errorf("revise command: %w", err)
	}
	if len(clean) > maxCommandResultBytes {
		return CommandResult{}, fmt.Errorf("revise command: %w", errCommandResultTooLarge)
	}
	prev.Status, prev.Result = status, clean
	tx.st.ProcessedCommands[commandID] = prev
	return prev, nil
}

// FailedResult is FailCommand's result: {code: command_execution_failed,
// message}, the message redacted.
func FailedResult(message string) json.RawMessage {
	return codeResult(CodeCommandExecutionFailed, redactText(message))
}

// RejectCommand records status rejected with {code, message} for a pending
// command that had no effect (refused by the runner, or a type it does not
// implement), so the journal holds the status the core saw and a duplicate
// replays it unchanged.
func (tx *Tx) RejectCommand(commandID, code, message string) (CommandResult, error) {
	return tx.FinishCommand(commandID, StatusRejected, codeResult(code, redactText(message)))
}

// failCommand records status failed with {code: command_execution_failed,
// message}. The message is redacted; never pass provider text.
func (tx *Tx) failCommand(commandID, message string) (CommandResult, error) {
	return tx.FinishCommand(commandID, StatusFailed, FailedResult(message))
}

// msgRecoveredPending is the message of a pending entry that restart
// recovery made indeterminate.
const msgRecoveredPending = "runner recovered after journaling this command; it will not execute twice"

// RecoveredPending reports whether r is a pending entry that restart
// recovery made indeterminate (no executor has revised it from its
// evidence since).
func (r CommandResult) RecoveredPending() bool {
	return r.Status == StatusIndeterminate && string(r.Result) == string(codeResult(CodeExecutionIndeterminate, msgRecoveredPending))
}

// reconcilePending rewrites pending entries to indeterminate (prp.md §7.2
// step 7) and returns them.
func (st *State) reconcilePending() []CommandResult {
	var out []CommandResult
	for id, r := range st.ProcessedCommands {
		if r.Status == StatusPending {
			r.Status = StatusIndeterminate
			r.Result = codeResult(CodeExecutionIndeterminate, msgRecoveredPending)
			st.ProcessedCommands[id] = r
			out = append(out, r)
		}
	}
	return out
}
