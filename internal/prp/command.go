package prp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Command schemas (prp.md §7.1).
const (
	CommandSchemaV1 = "paperclip.prp.command.v1"
	CommandSchemaV2 = "paperclip.prp.command.v2"
	commandSchemaV3 = "paperclip.prp.command.v3"
)

// maxCommandIDChars bounds command ids and timestamps (prp.md §7.2, §14.7:
// reference runner 64).
const maxCommandIDChars = 64

// ErrInvalidCommand: a command failed validation (prp.md §7.2 step 1). Fatal
// for the runner.
var ErrInvalidCommand = errors.New("invalid command")

// Command is a command object (prp.md §7.1): the core builds one to send
// (QueueCommand), the runner gets one from DecodeCommand and the state's
// journal admits it. Admission rules (§7.2 steps 2–7) belong to the journal.
//
// ControllerSeq is uint64, like every sequence the state stores: it is a
// 1-based position (prp.md §7.1), so a negative value is malformed input and
// the decoder refuses it rather than every user checking the sign.
type Command struct {
	Schema        string          `json:"schema"`
	CommandID     string          `json:"commandId"`
	ControllerSeq uint64          `json:"controllerSeq"`
	Type          string          `json:"type"`
	IssuedAt      string          `json:"issuedAt"`
	DeadlineAt    string          `json:"deadlineAt,omitempty"`
	Precondition  json.RawMessage `json:"precondition,omitempty"`
	Payload       json.RawMessage `json:"payload"`
	// Raw is the command exactly as received (DecodeCommand); the
	// fingerprint covers all of it. Never encoded.
	Raw json.RawMessage `json:"-"`

	fingerprint string // cached by DecodeCommand
}

// DecodeCommand decodes and validates a command object (prp.md §7.2 step 1)
// and computes its fingerprint. Every failure wraps ErrInvalidCommand and
// names the field, never its value.
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

// validCommandText: non-empty, at most maxCommandIDChars bytes, no control
// characters.
func validCommandText(s string) bool {
	return s != "" && len(s) <= maxCommandIDChars && !strings.ContainsFunc(s, unicode.IsControl)
}

// Validate checks schema, type, ids and timestamps (prp.md §7.2 step 1).
func (c *Command) Validate() error {
	version := 0
	switch c.Schema {
	case CommandSchemaV1:
		version = 1
	case CommandSchemaV2:
		version = 2
	case commandSchemaV3:
		version = 3
	default:
		return fmt.Errorf("validate command: %w: unsupported schema", ErrInvalidCommand)
	}
	if err := checkType(c.Type, version); err != nil {
		return err
	}
	if !validCommandText(c.CommandID) {
		return fmt.Errorf("validate command: %w: commandId empty, over %d chars or has control characters", ErrInvalidCommand, maxCommandIDChars)
	}
	if !validCommandText(c.IssuedAt) || (c.DeadlineAt != "" && !validCommandText(c.DeadlineAt)) {
		return fmt.Errorf("validate command: %w: timestamp empty, over %d chars or has control characters", ErrInvalidCommand, maxCommandIDChars)
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

// Fingerprint is the hex SHA-256 of the canonical JSON of the whole command
// as received (CanonicalDigest of Raw).
func (c *Command) Fingerprint() (string, error) {
	if c.fingerprint != "" {
		return c.fingerprint, nil
	}
	d, err := CanonicalDigest(c.Raw)
	if err != nil {
		return "", fmt.Errorf("fingerprint command: %w", ErrInvalidCommand)
	}
	return d, nil
}
