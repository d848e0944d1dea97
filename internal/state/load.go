package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// decodeState parses runner-state.json. Errors wrap errCorruptState and
// never quote file content.
func decodeState(b []byte) (*State, error) {
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return nil, fmt.Errorf("decode state: %w: malformed JSON at byte %d of %d (truncated or damaged)", errCorruptState, syn.Offset, len(b))
		case errors.As(err, &typ) && typ.Field == "":
			return nil, fmt.Errorf("decode state: %w: state file: top level is %s, want an object", errCorruptState, jsonValueKind(typ.Value))
		case errors.As(err, &typ):
			return nil, fmt.Errorf("decode state: %w: state file: field %s is %s, want %s", errCorruptState, typ.Field, jsonValueKind(typ.Value), jsonKindOf(typ.Type))
		}
		return nil, fmt.Errorf("decode state: %w: not a state object", errCorruptState)
	}
	// Stored envelopes are compact; compacting tolerates a pretty-printed file.
	for i, e := range st.Outbox {
		var buf bytes.Buffer
		if err := json.Compact(&buf, e.Envelope); err != nil {
			return nil, fmt.Errorf("decode state: %w: outbox envelope %d", errCorruptState, i)
		}
		st.Outbox[i].Envelope = buf.Bytes()
	}
	st.normalize()
	return &st, nil
}

// jsonValueKind names the kind of JSON value encoding/json found, with its
// article. json may append the literal ("number 1e999"); that is file
// content, so only the first word is kept.
func jsonValueKind(v string) string {
	kind, _, _ := strings.Cut(v, " ")
	switch kind {
	case "array", "object":
		return "an " + kind
	case "bool":
		return "a boolean"
	case "":
		return "a value of another type"
	}
	return "a " + kind
}

// jsonKindOf names the JSON kind that decodes into t, with its article.
func jsonKindOf(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another type"
}

// check verifies that the loaded state belongs to this runner and is
// internally consistent (R-state validate_binding). The sections run in this
// order so that a file with several faults reports the same first one as
// before the split; later sections trust the cursors earlier ones checked.
func (st *State) check(cfg Config) error {
	for _, section := range []func() error{
		st.checkSchema,
		func() error { return st.checkBinding(cfg) },
		st.checkOutbox,
		st.checkCommandJournal,
		st.checkExecutorReceipts,
		st.checkV2Replay,
		st.checkFences,
		st.checkBoundedFields,
	} {
		if err := section(); err != nil {
			return err
		}
	}
	return nil
}

// corruptState is check's error for a state that contradicts itself.
func corruptState(what string) error { return fmt.Errorf("check state: %w: %s", errCorruptState, what) }

// checkSchema accepts only this schema: a warm transition in flight was
// settled by recoverWarm before the checks run.
func (st *State) checkSchema() error {
	if st.Schema != schema {
		return corruptState("unknown schema")
	}
	if len(st.WarmTransition) > 0 && string(st.WarmTransition) != "null" {
		return corruptState("warm transition outside the warm-transition schema") // recoverWarm settled any real one
	}
	return nil
}

// checkBinding compares the file with this runner's identity and outbox
// bounds, then checks the lifecycle it recorded.
func (st *State) checkBinding(cfg Config) error {
	id := cfg.Identity
	if st.RunnerInstanceID != id.RunnerInstanceID || st.EnvironmentLeaseID != id.EnvironmentLeaseID ||
		st.RunID != id.RunID || st.NormalizedSessionID != id.NormalizedSessionID ||
		st.TurnID != id.TurnID || st.ItemID != id.ItemID {
		return fmt.Errorf("check state: %w: identity differs", errStateBinding)
	}
	if st.MaxOutboxBytes != cfg.MaxOutboxBytes || st.P0ReserveBytes != cfg.P0ReserveBytes {
		return fmt.Errorf("check state: %w: outbox bounds differ", errStateBinding)
	}
	if !st.Lifecycle.Valid() {
		return corruptState("unknown lifecycle")
	}
	return nil
}

// checkOutbox checks the source cursors and that the outbox holds exactly
// the unacked events, contiguous after the ack cursor, within its bound.
func (st *State) checkOutbox() error {
	if st.NextSourceSeq == 0 || st.AckedSourceSeq > st.HighestSourceSeq() {
		return corruptState("source cursors out of order")
	}
	total := 0
	for i, e := range st.Outbox {
		var env envelope
		if json.Unmarshal(e.Envelope, &env) != nil || env.Payload.SourceSeq != e.SourceSeq ||
			e.ByteSize != len(e.Envelope) || e.Priority > P2 || env.Payload.EventType == "" {
			return corruptState("outbox metadata does not match its envelope")
		}
		want := st.AckedSourceSeq + 1 + uint64(i)
		if e.SourceSeq != want {
			return corruptState("outbox sequence is not contiguous after the ack cursor")
		}
		total += e.ByteSize
	}
	if n := len(st.Outbox); (n == 0 && st.AckedSourceSeq != st.HighestSourceSeq()) ||
		(n > 0 && st.Outbox[n-1].SourceSeq != st.HighestSourceSeq()) {
		return corruptState("outbox does not end at the produced cursor")
	}
	if total > st.MaxOutboxBytes {
		return corruptState("outbox exceeds its bound")
	}
	return nil
}

// checkCommandJournal checks the command cursors and that every journal
// entry lies between them, with a fingerprint and a known status.
func (st *State) checkCommandJournal() error {
	if st.CompactedThroughControllerSeq > st.LastControllerCommandSeq {
		return corruptState("command cursors out of order")
	}
	if len(st.ProcessedCommands) > maxRecentCommands || len(st.ProcessedCommandFingerprints) != len(st.ProcessedCommands) {
		return corruptState("command journal size")
	}
	for k, r := range st.ProcessedCommands {
		fp := st.ProcessedCommandFingerprints[k]
		if k != r.CommandID || r.ControllerSeq <= st.CompactedThroughControllerSeq ||
			r.ControllerSeq > st.LastControllerCommandSeq || len(fp) != 64 || !isHex(fp) {
			return corruptState("command journal entry inconsistent")
		}
		switch r.Status {
		case StatusPending, StatusCompleted, StatusFailed, StatusRejected, StatusIndeterminate:
		default:
			return corruptState("command journal status")
		}
	}
	return nil
}

// checkExecutorReceipts bounds the receipts and ties each to a produced
// source sequence.
func (st *State) checkExecutorReceipts() error {
	if len(st.ExecutorEventReceipts) > maxExecutorEventReceipts {
		return corruptState("executor receipts exceed their bound")
	}
	for k, r := range st.ExecutorEventReceipts {
		if !validToken(k, maxEventIDChars) || len(r.Fingerprint) != 64 || !isHex(r.Fingerprint) ||
			r.SourceSeq == 0 || r.SourceSeq > st.HighestSourceSeq() {
			return corruptState("executor receipt inconsistent")
		}
	}
	return nil
}

// checkV2Replay bounds the replay events and checks each sits under its
// family's key with a produced source sequence and an object payload.
func (st *State) checkV2Replay() error {
	if len(st.V2ReplayEvents) > maxV2ReplayEvents {
		return corruptState("v2 replay events exceed their bound")
	}
	for k, e := range st.V2ReplayEvents {
		if prp.EventRuleOf(e.EventType).V2Family != k || e.SourceSeq == 0 || e.SourceSeq > st.HighestSourceSeq() ||
			e.Priority > P2 || !isObject(e.Payload) {
			return corruptState("v2 replay event inconsistent")
		}
	}
	return nil
}

// checkFences requires each terminal fence, when set, to name its command
// and a known lifecycle.
func (st *State) checkFences() error {
	for _, f := range []*TerminalFence{st.PendingTerminalDelivery, st.PendingProviderCleanup} {
		if f != nil && (f.CommandID == "" || !f.Lifecycle.Valid()) {
			return corruptState("fence inconsistent")
		}
	}
	return nil
}

// checkBoundedFields checks the remaining fields that carry a bound of their
// own: the diagnostics count, the last protocol version and the compacted
// command filter's size.
func (st *State) checkBoundedFields() error {
	if len(st.Diagnostics) > maxDiagnostics {
		return corruptState("too many diagnostics")
	}
	if v := st.LastConnectionProtocolVersion; v != nil && (*v < 1 || *v > MaxProtocolVersion) {
		return corruptState("protocol version")
	}
	if n := len(st.CompactedCommandFilter); n != 0 && n != bloomBytes {
		return corruptState("command filter size")
	}
	return nil
}

func isHex(s string) bool {
	for i := range len(s) {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
