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

// resultCommand is the payload of the semantic_tool.result command
// (tools.md §3 item 4). Either Input or InputDigest may name the input.
type resultCommand struct {
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

// errMalformedCommand is a semantic_tool.result payload runnerd cannot
// read; its wrapped text names the field, never a value.
var errMalformedCommand = errors.New("malformed semantic_tool.result")

// DecodeResultCommand reads and checks a semantic_tool.result payload. An
// input given in place of inputDigest is reduced to its digest.
func DecodeResultCommand(payload json.RawMessage) (resultCommand, error) {
	var c resultCommand
	if err := json.Unmarshal(payload, &c); err != nil {
		return resultCommand{}, fmt.Errorf("%w: not a JSON object", errMalformedCommand)
	}
	for _, f := range []struct{ name, v string }{{"callId", c.CallID}, {"operationId", c.OperationID}} {
		if len(f.v) == 0 || len(f.v) > maxStableID || !stableID.MatchString(f.v) {
			return resultCommand{}, fmt.Errorf("%w: %s is missing or not a stable id", errMalformedCommand, f.name)
		}
	}
	if len(c.Result) == 0 {
		return resultCommand{}, fmt.Errorf("%w: result is missing", errMalformedCommand)
	}
	d, err := digest(c.Result)
	if err != nil {
		return resultCommand{}, fmt.Errorf("%w: result cannot be digested", errMalformedCommand)
	}
	c.ResultDigest = d
	if len(c.Input) > 0 && string(c.Input) != "null" {
		d, err := digest(c.Input)
		if err != nil {
			return resultCommand{}, fmt.Errorf("%w: input cannot be digested", errMalformedCommand)
		}
		if c.InputDigest != "" && c.InputDigest != d {
			return resultCommand{}, fmt.Errorf("%w: input and inputDigest disagree", errMalformedCommand)
		}
		c.InputDigest = d
	}
	if c.InputDigest != "" && !digestPattern.MatchString(c.InputDigest) {
		return resultCommand{}, fmt.Errorf("%w: inputDigest is not a sha256 digest", errMalformedCommand)
	}
	return c, nil
}

// Outcome returns the command's result as an Outcome.
func (c resultCommand) Outcome() Outcome {
	return Outcome{Result: c.Result, IsError: c.IsError, Digest: c.ResultDigest}
}

// verdict is what a semantic_tool.result command does (tools.md §3 items
// 4–5).
type verdict int

// Verdicts.
const (
	// Deliver: the call is pending with its agent waiting; emit the
	// result event, settle the call, answer the agent: "delivered".
	Deliver verdict = iota + 1
	// record: the call is detached; record the result for a re-call,
	// emit the result event: "detached".
	record
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

// decision is the table's answer to a command.
type decision struct {
	Verdict verdict
	// Call is the matched unsettled call (Deliver, record, and Duplicate
	// or Conflict of a detached call with a recorded result).
	Call *Call
	// Reason is a fixed text for Conflict and NotPending.
	Reason string
}

// Decide matches cmd to the table. It changes nothing: the caller
// validates, then applies the decision (Settle, record) in the write that
// records the command's outcome. waiting reports whether the agent still
// waits on a pending call (its HTTP request is alive).
func (t *Table) Decide(cmd resultCommand, waiting func(callID string) bool) decision {
	c := t.Find(cmd.CallID)
	if c == nil {
		s, ok := t.findSettled(cmd.CallID)
		switch {
		case !ok:
			return decision{Verdict: NotPending, Reason: "no semantic tool call is pending under that callId"}
		case s.OperationID == cmd.OperationID && s.ResultDigest == cmd.ResultDigest && s.IsError == cmd.IsError:
			return decision{Verdict: Duplicate}
		default:
			return decision{Verdict: Conflict, Reason: "a different result was already delivered for that callId"}
		}
	}
	switch {
	case c.OperationID != cmd.OperationID:
		return decision{Verdict: Conflict, Call: c, Reason: "the callId is pending for another operationId"}
	case cmd.InputDigest != "" && cmd.InputDigest != c.InputDigest:
		return decision{Verdict: Conflict, Call: c, Reason: "the input does not match the pending call's input"}
	case c.State == answered && (c.Recorded == nil || c.Recorded.Digest != cmd.ResultDigest || c.Recorded.IsError != cmd.IsError):
		return decision{Verdict: Conflict, Call: c, Reason: "a different result was already delivered for that callId"}
	case c.Recorded != nil && c.Recorded.Digest == cmd.ResultDigest && c.Recorded.IsError == cmd.IsError:
		return decision{Verdict: Duplicate, Call: c}
	case c.Recorded != nil:
		return decision{Verdict: Conflict, Call: c, Reason: "a different result was already recorded for that callId"}
	case c.State == Pending && waiting != nil && waiting(c.CallID):
		return decision{Verdict: Deliver, Call: c}
	default:
		return decision{Verdict: record, Call: c}
	}
}

// StatusResult is the completed command result {status, callId}.
func StatusResult(status, callID string) json.RawMessage {
	return mustJSON(map[string]string{"status": status, "callId": callID})
}

// Status returns the command status word of a completed verdict.
func (v verdict) Status() string {
	switch v {
	case Deliver:
		return "delivered"
	case record:
		return "detached"
	case Duplicate:
		return "duplicate"
	}
	return ""
}
