package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Command schemas (prp.md §7.1).
const (
	CommandSchemaV1 = "paperclip.prp.command.v1"
	CommandSchemaV2 = "paperclip.prp.command.v2"
	CommandSchemaV3 = "paperclip.prp.command.v3"
)

// Result codes of the journal (prp.md §7.2, §11).
const (
	CodeExecutionIndeterminate = "execution_indeterminate"
	CodeCommandHistoryCompact  = "command_history_compacted"
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

// minCommandSchema is the command catalogue of prp.md §7.5 with the lowest
// command schema version that carries each type (SCH command*.schema.json,
// R-state Command::validate).
var minCommandSchema = map[string]int{
	"run.prepare": 1, "run.attach": 1, "session.open": 1, "turn.start": 1, "turn.steer": 1,
	"turn.interrupt": 1, "turn.stop": 1, "request.resolve": 1, "interaction.receipt": 1,
	"semantic_tool.result": 1, "session.snapshot": 1, "session.close": 1,
	"session.budget.increase": 1, "session.destroy": 1, "run.cancel": 1, "runner.drain": 1,
	"runner.suspend": 1, "runner.shutdown": 1,
	"session.goal.get": 2, "session.goal.set": 2, "session.goal.clear": 2,
	"external_provider.operation": 3,
}

// Command is a decoded PRP command (prp.md §7.1). Raw is the command exactly
// as received; the fingerprint covers all of it.
type Command struct {
	Schema        string
	CommandID     string
	ControllerSeq uint64
	Type          string
	IssuedAt      string
	DeadlineAt    string // "" when absent
	Precondition  json.RawMessage
	Payload       json.RawMessage
	Raw           json.RawMessage

	fingerprint string // cached by DecodeCommand
}

// DecodeCommand decodes and validates a command object (prp.md §7.2 step 1).
// Every failure wraps ErrInvalidCommand and names the field, never its value.
func DecodeCommand(b []byte) (*Command, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return nil, fmt.Errorf("decode command: %w: not a JSON object", ErrInvalidCommand)
	}
	if dec.More() {
		return nil, fmt.Errorf("decode command: %w: trailing data", ErrInvalidCommand)
	}
	c := &Command{Raw: bytes.Clone(b)}
	str := func(name string, dst *string, required bool) error {
		v, ok := fields[name]
		if !ok || string(v) == "null" {
			if required {
				return fmt.Errorf("decode command: %w: %s missing", ErrInvalidCommand, name)
			}
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return fmt.Errorf("decode command: %w: %s is not a string", ErrInvalidCommand, name)
		}
		return nil
	}
	for _, f := range []struct {
		name     string
		dst      *string
		required bool
	}{
		{"schema", &c.Schema, true}, {"commandId", &c.CommandID, true}, {"type", &c.Type, true},
		{"issuedAt", &c.IssuedAt, true}, {"deadlineAt", &c.DeadlineAt, false},
	} {
		if err := str(f.name, f.dst, f.required); err != nil {
			return nil, err
		}
	}
	if _, ok := fields["deadlineAt"]; ok && string(fields["deadlineAt"]) != "null" && c.DeadlineAt == "" {
		return nil, fmt.Errorf("decode command: %w: deadlineAt empty", ErrInvalidCommand)
	}
	seq, ok := fields["controllerSeq"]
	if !ok {
		return nil, fmt.Errorf("decode command: %w: controllerSeq missing", ErrInvalidCommand)
	}
	n, err := strconv.ParseUint(string(bytes.TrimSpace(seq)), 10, 64)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("decode command: %w: controllerSeq is not a positive integer", ErrInvalidCommand)
	}
	c.ControllerSeq = n
	if p, ok := fields["precondition"]; ok && string(p) != "null" {
		if !isObject(p) {
			return nil, fmt.Errorf("decode command: %w: precondition is not an object", ErrInvalidCommand)
		}
		c.Precondition = p
	}
	p, ok := fields["payload"]
	if !ok || !isObject(p) {
		return nil, fmt.Errorf("decode command: %w: payload is not an object", ErrInvalidCommand)
	}
	c.Payload = p
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.fingerprint, err = c.Fingerprint(); err != nil {
		return nil, err
	}
	return c, nil
}

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// Validate checks schema, type, ids and timestamps (prp.md §7.2 step 1).
func (c *Command) Validate() error {
	version := 0
	switch c.Schema {
	case CommandSchemaV1:
		version = 1
	case CommandSchemaV2:
		version = 2
	case CommandSchemaV3:
		version = 3
	default:
		return fmt.Errorf("validate command: %w: unsupported schema", ErrInvalidCommand)
	}
	need, ok := minCommandSchema[c.Type]
	if !ok {
		return fmt.Errorf("validate command: %w: unknown type", ErrInvalidCommand)
	}
	if version < need {
		return fmt.Errorf("validate command: %w: type %s needs command schema v%d", ErrInvalidCommand, c.Type, need)
	}
	if !validToken(c.CommandID, MaxIDChars) {
		return fmt.Errorf("validate command: %w: commandId empty, over %d chars or has control characters", ErrInvalidCommand, MaxIDChars)
	}
	if !validToken(c.IssuedAt, MaxIDChars) || (c.DeadlineAt != "" && !validToken(c.DeadlineAt, MaxIDChars)) {
		return fmt.Errorf("validate command: %w: timestamp empty, over %d chars or has control characters", ErrInvalidCommand, MaxIDChars)
	}
	if c.ControllerSeq == 0 {
		return fmt.Errorf("validate command: %w: controllerSeq must be positive", ErrInvalidCommand)
	}
	if !isObject(c.Payload) {
		return fmt.Errorf("validate command: %w: payload is not an object", ErrInvalidCommand)
	}
	if c.Precondition != nil && !isObject(c.Precondition) {
		return fmt.Errorf("validate command: %w: precondition is not an object", ErrInvalidCommand)
	}
	if len(c.Raw) == 0 {
		return fmt.Errorf("validate command: %w: raw bytes missing", ErrInvalidCommand)
	}
	return nil
}

// Fingerprint is the hex SHA-256 of the canonical JSON of the whole command.
func (c *Command) Fingerprint() (string, error) {
	if c.fingerprint != "" {
		return c.fingerprint, nil
	}
	d, err := digestHex(c.Raw)
	if err != nil {
		return "", fmt.Errorf("fingerprint command: %w", ErrInvalidCommand)
	}
	return d, nil
}

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
	b, _ := encodeJSON(map[string]string{"code": code, "message": message})
	return b
}

// BeginCommand admits a command (prp.md §7.2 steps 2–5). On Execute the
// pending marker {status: pending, code: execution_indeterminate} is in the
// transaction: the effect MUST start only after the Update has committed.
// Errors: ErrCommandReplayConflict (fail closed), ErrNonContiguousCommand
// (fatal), ErrInvalidCommand.
func (tx *Tx) BeginCommand(c *Command) (Admission, error) {
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
		Result: codeResult(CodeCommandHistoryCompact, "command is older than the bounded replay journal and was not re-executed"),
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
	for len(st.ProcessedCommands) > MaxRecentCommands {
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
// object; it is sanitised and bounded by MaxCommandResultBytes.
func (tx *Tx) FinishCommand(commandID string, status CommandStatus, result json.RawMessage) (CommandResult, error) {
	if status != StatusCompleted && status != StatusFailed && status != StatusRejected {
		return CommandResult{}, fmt.Errorf("finish command: unsupported status %q", status)
	}
	prev, ok := tx.st.ProcessedCommands[commandID]
	if !ok || prev.Status != StatusPending {
		return CommandResult{}, fmt.Errorf("finish command: %w", ErrCommandNotPending)
	}
	if result == nil {
		result = json.RawMessage(`{}`)
	}
	clean, err := sanitizeJSON(result)
	if err != nil {
		if errors.Is(err, ErrInvalidEvent) {
			return CommandResult{}, fmt.Errorf("finish command: result is not a JSON object")
		}
		return CommandResult{}, fmt.Errorf("finish command: %w", err)
	}
	if len(clean) > MaxCommandResultBytes {
		return CommandResult{}, fmt.Errorf("finish command: %w", ErrCommandResultTooLarge)
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
		return CommandResult{}, fmt.Errorf("revise command: unsupported status %q", status)
	}
	prev, ok := tx.st.ProcessedCommands[commandID]
	if !ok || prev.Status == StatusRejected {
		return CommandResult{}, fmt.Errorf("revise command: %w", ErrCommandNotPending)
	}
	clean, err := sanitizeJSON(result)
	if err != nil {
		return CommandResult{}, fmt.Errorf("revise command: %w", err)
	}
	if len(clean) > MaxCommandResultBytes {
		return CommandResult{}, fmt.Errorf("revise command: %w", ErrCommandResultTooLarge)
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

// FailCommand records status failed with {code: command_execution_failed,
// message}. The message is redacted; never pass provider text.
func (tx *Tx) FailCommand(commandID, message string) (CommandResult, error) {
	return tx.FinishCommand(commandID, StatusFailed, FailedResult(message))
}

// reconcilePending rewrites pending entries to indeterminate (prp.md §7.2
// step 7) and returns them.
func (st *State) reconcilePending() []CommandResult {
	var out []CommandResult
	for id, r := range st.ProcessedCommands {
		if r.Status == StatusPending {
			r.Status = StatusIndeterminate
			r.Result = codeResult(CodeExecutionIndeterminate, "runner recovered after journaling this command; it will not execute twice")
			st.ProcessedCommands[id] = r
			out = append(out, r)
		}
	}
	return out
}
