package toolcall

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// maxStableID is the schema's stableId maxLength (semantic-tool envelope).
const maxStableID = 240

// stableID is the schema's stableId pattern.
var stableID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

// digestPattern is a content digest.
var digestPattern = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// ResultCommand is the payload of the semantic_tool.result command
// (tools.md §3 item 4). Either Input or InputDigest may name the input.
type ResultCommand struct {
	CallID          string          `json:"callId"`
	OperationID     string          `json:"operationId"`
	Input           json.RawMessage `json:"input,omitempty"`
	InputDigest     string          `json:"inputDigest,omitempty"`
	SourceEventID   string          `json:"sourceEventId,omitempty"`
	SourceEventType string          `json:"sourceEventType,omitempty"`
	Correlation     json.RawMessage `json:"correlation,omitempty"`
	Result          json.RawMessage `json:"result"`
	IsError         bool            `json:"isError"`

	// ResultDigest is the content digest of Result, filled by the decoder.
	ResultDigest string `json:"-"`
}

// ErrMalformedCommand is a semantic_tool.result payload runnerd cannot
// read; its wrapped text names the field, never a value.
var ErrMalformedCommand = errors.New("malformed semantic_tool.result")

// DecodeResultCommand reads and checks a semantic_tool.result payload. An
// input given in place of inputDigest is reduced to its digest.
func DecodeResultCommand(payload json.RawMessage) (ResultCommand, error) {
	var c ResultCommand
	if err := json.Unmarshal(payload, &c); err != nil {
		return ResultCommand{}, fmt.Errorf("%w: not a JSON object", ErrMalformedCommand)
	}
	for _, f := range []struct{ name, v string }{{"callId", c.CallID}, {"operationId", c.OperationID}} {
		if len(f.v) == 0 || len(f.v) > maxStableID || !stableID.MatchString(f.v) {
			return ResultCommand{}, fmt.Errorf("%w: %s is missing or not a stable id", ErrMalformedCommand, f.name)
		}
	}
	if len(c.Result) == 0 {
		return ResultCommand{}, fmt.Errorf("%w: result is missing", ErrMalformedCommand)
	}
	d, err := Digest(c.Result)
	if err != nil {
		return ResultCommand{}, fmt.Errorf("%w: result cannot be digested", ErrMalformedCommand)
	}
	c.ResultDigest = d
	if len(c.Input) > 0 && string(c.Input) != "null" {
		d, err := Digest(c.Input)
		if err != nil {
			return ResultCommand{}, fmt.Errorf("%w: input cannot be digested", ErrMalformedCommand)
		}
		if c.InputDigest != "" && c.InputDigest != d {
			return ResultCommand{}, fmt.Errorf("%w: input and inputDigest disagree", ErrMalformedCommand)
		}
		c.InputDigest = d
	}
	if c.InputDigest != "" && !digestPattern.MatchString(c.InputDigest) {
		return ResultCommand{}, fmt.Errorf("%w: inputDigest is not a sha256 digest", ErrMalformedCommand)
	}
	return c, nil
}

// Outcome returns the command's result as an Outcome.
func (c ResultCommand) Outcome() Outcome {
	return Outcome{Result: c.Result, IsError: c.IsError, Digest: c.ResultDigest}
}

// Verdict is what a semantic_tool.result command does (tools.md §3 items
// 4–5).
type Verdict int

// Verdicts.
const (
	// Deliver: the call is pending with its agent waiting; emit the
	// result event, settle the call, answer the agent: "delivered".
	Deliver Verdict = iota + 1
	// Record: the call is detached; record the result for a re-call,
	// emit the result event: "detached".
	Record
	// Duplicate: the same result was already taken; no event, no
	// redelivery: "duplicate".
	Duplicate
	// Conflict: another result was already taken, or the command names
	// the call with another operation or input: failed
	// semantic_tool_result_conflict.
	Conflict
	// NotPending: no such call: failed semantic_tool_not_pending.
	NotPending
)

// Decision is the table's answer to a command.
type Decision struct {
	Verdict Verdict
	// Call is the matched unsettled call (Deliver, Record, and Duplicate
	// or Conflict of a detached call with a recorded result).
	Call *Call
	// Reason is a fixed text for Conflict and NotPending.
	Reason string
}

// Decide matches cmd to the table. It changes nothing: the caller
// validates, then applies the decision (Settle, Record) in the write that
// records the command's outcome. waiting reports whether the agent still
// waits on a pending call (its HTTP request is alive).
func (t *Table) Decide(cmd ResultCommand, waiting func(callID string) bool) Decision {
	c := t.Find(cmd.CallID)
	if c == nil {
		s, ok := t.FindSettled(cmd.CallID)
		switch {
		case !ok:
			return Decision{Verdict: NotPending, Reason: "no semantic tool call is pending under that callId"}
		case s.OperationID == cmd.OperationID && s.ResultDigest == cmd.ResultDigest && s.IsError == cmd.IsError:
			return Decision{Verdict: Duplicate}
		default:
			return Decision{Verdict: Conflict, Reason: "a different result was already delivered for that callId"}
		}
	}
	switch {
	case c.OperationID != cmd.OperationID:
		return Decision{Verdict: Conflict, Call: c, Reason: "the callId is pending for another operationId"}
	case cmd.InputDigest != "" && cmd.InputDigest != c.InputDigest:
		return Decision{Verdict: Conflict, Call: c, Reason: "the input does not match the pending call's input"}
	case c.Recorded != nil && c.Recorded.Digest == cmd.ResultDigest && c.Recorded.IsError == cmd.IsError:
		return Decision{Verdict: Duplicate, Call: c}
	case c.Recorded != nil:
		return Decision{Verdict: Conflict, Call: c, Reason: "a different result was already recorded for that callId"}
	case c.State == Pending && waiting != nil && waiting(c.CallID):
		return Decision{Verdict: Deliver, Call: c}
	default:
		return Decision{Verdict: Record, Call: c}
	}
}

// StatusResult is the completed command result {status, callId}.
func StatusResult(status, callID string) json.RawMessage {
	return mustJSON(map[string]string{"status": status, "callId": callID})
}

// Status returns the command status word of a completed verdict.
func (v Verdict) Status() string {
	switch v {
	case Deliver:
		return "delivered"
	case Record:
		return "detached"
	case Duplicate:
		return "duplicate"
	}
	return ""
}
