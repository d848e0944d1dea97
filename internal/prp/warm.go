package prp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// Warm run rotation (run.attach, prp.md §9.5). The receipt is built the
// same way by both peers from the command, its result and the lease the old
// connection held; each side compares the other's copy canonically, so a
// single differing byte of meaning refuses the rotation.
const (
	// WarmTransitionSchema is the receipt's schema (CP DurableWarmRunTransition).
	WarmTransitionSchema = "paperclip.runner.warm-transition.v1"
	// WarmPhaseActivated is the welcome's warmTransitionPhase once the core
	// accepted a reconnect under the new identity (CP #welcome).
	WarmPhaseActivated = "activated"
)

// Warm-rotation refusals.
var (
	// ErrWarmTransition: a receipt, its binding or its identities break §9.5.
	ErrWarmTransition = errors.New("warm transition refused")
)

// maxStableIDChars is the length bound of CP's stableIdPattern,
// ^[A-Za-z0-9][A-Za-z0-9._:-]{0,239}$.
const maxStableIDChars = 240

// isStableID matches CP's stableIdPattern for the ids a receipt binds. It
// is a loop, not a regexp: compiling the counted repetition at init cost
// runnerd about 0.7 MiB of idle RSS and a millisecond of start.
func isStableID(s string) bool {
	if len(s) == 0 || len(s) > maxStableIDChars {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != ':' && c != '-')) {
			return false
		}
	}
	return true
}

// WarmTransition is the receipt paperclip.runner.warm-transition.v1.
// Connection is the command's paperclipNextAuthority.connection as sent.
type WarmTransition struct {
	Schema               string          `json:"schema"`
	TransitionID         string          `json:"transitionId"`
	OldIdentity          Identity        `json:"oldIdentity"`
	NewIdentity          Identity        `json:"newIdentity"`
	CommandID            string          `json:"commandId"`
	ControllerSeq        uint64          `json:"controllerSeq"`
	CommandFingerprint   string          `json:"commandFingerprint"`
	ResultDigest         string          `json:"resultDigest"`
	OldAckedSourceSeq    int64           `json:"oldAckedSourceSeq"`
	Connection           json.RawMessage `json:"connection"`
	RunnerVersion        string          `json:"runnerVersion"`
	RunnerDigest         string          `json:"runnerDigest"`
	LeaseID              string          `json:"leaseId"`
	LeaseExpiresAtUnixMs int64           `json:"leaseExpiresAtUnixMs"`
	LeaseRevocationEpoch int64           `json:"leaseRevocationEpoch"`
}

// NextAuthority is run.attach's paperclipNextAuthority: the identity and
// connection of the run that takes the warm runner over.
type NextAuthority struct {
	Identity   Identity        `json:"identity"`
	Connection json.RawMessage `json:"connection"`
}

// AuthorityConnection is the decoded connection of a NextAuthority. Mode
// is "connect" (ConnectURL, CABundlePath) or "listen" (ListenAddress,
// ListenPort, ListenPath).
type AuthorityConnection struct {
	Mode          string `json:"mode"`
	ConnectURL    string `json:"connectUrl,omitempty"`
	CABundlePath  string `json:"caBundlePath,omitempty"`
	ListenAddress string `json:"listenAddress,omitempty"`
	ListenPort    int    `json:"listenPort,omitempty"`
	ListenPath    string `json:"listenPath,omitempty"`
}

// ParseNextAuthority reads paperclipNextAuthority out of a run.attach
// payload. Only its shape is checked here; CheckWarmIdentity applies the
// identity rules and the runner checks the connection against its flags.
func ParseNextAuthority(payload json.RawMessage) (NextAuthority, AuthorityConnection, error) {
	var p struct {
		Next *struct {
			Identity   json.RawMessage `json:"identity"`
			Connection json.RawMessage `json:"connection"`
		} `json:"paperclipNextAuthority"`
	}
	if err := json.Unmarshal(payload, &p); err != nil || p.Next == nil {
		return NextAuthority{}, AuthorityConnection{}, fmt.Errorf("parse next authority: %w: paperclipNextAuthority missing", ErrWarmTransition)
	}
	id, err := exactIdentity(p.Next.Identity)
	if err != nil {
		return NextAuthority{}, AuthorityConnection{}, fmt.Errorf("parse next authority: %w", err)
	}
	if !isObject(p.Next.Connection) {
		return NextAuthority{}, AuthorityConnection{}, fmt.Errorf("parse next authority: %w: connection is not an object", ErrWarmTransition)
	}
	var conn AuthorityConnection
	if err := json.Unmarshal(p.Next.Connection, &conn); err != nil {
		return NextAuthority{}, AuthorityConnection{}, fmt.Errorf("parse next authority: %w: connection fields", ErrWarmTransition)
	}
	switch conn.Mode {
	case "connect":
		if conn.ConnectURL == "" || conn.ListenPath != "" || conn.ListenAddress != "" || conn.ListenPort != 0 {
			return NextAuthority{}, AuthorityConnection{}, fmt.Errorf("parse next authority: %w: connect mode fields", ErrWarmTransition)
		}
	case "listen":
		if conn.ListenPath == "" || conn.ListenAddress == "" || conn.ConnectURL != "" || conn.CABundlePath != "" {
			return NextAuthority{}, AuthorityConnection{}, fmt.Errorf("parse next authority: %w: listen mode fields", ErrWarmTransition)
		}
	default:
		return NextAuthority{}, AuthorityConnection{}, fmt.Errorf("parse next authority: %w: connection mode", ErrWarmTransition)
	}
	return NextAuthority{Identity: id, Connection: bytes.Clone(p.Next.Connection)}, conn, nil
}

// exactIdentity decodes an object with exactly the six identity fields,
// each a stable id (CP exactIdentity).
func exactIdentity(raw json.RawMessage) (Identity, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || len(m) != 6 {
		return Identity{}, fmt.Errorf("%w: identity must have exactly six fields", ErrWarmTransition)
	}
	var id Identity
	if err := json.Unmarshal(raw, &id); err != nil {
		return Identity{}, fmt.Errorf("%w: identity fields", ErrWarmTransition)
	}
	for _, s := range []string{id.RunnerInstanceID, id.EnvironmentLeaseID, id.RunID, id.NormalizedSessionID, id.TurnID, id.ItemID} {
		if !isStableID(s) {
			return Identity{}, fmt.Errorf("%w: identity field is not a stable id", ErrWarmTransition)
		}
	}
	return id, nil
}

// CheckWarmIdentity applies §9.5's identity rules: runnerInstanceId,
// environmentLeaseId and normalizedSessionId are immutable; runId must change.
func CheckWarmIdentity(old, next Identity) error {
	switch {
	case next.RunnerInstanceID != old.RunnerInstanceID:
		return fmt.Errorf("check warm identity: %w: runnerInstanceId is immutable", ErrWarmTransition)
	case next.EnvironmentLeaseID != old.EnvironmentLeaseID:
		return fmt.Errorf("check warm identity: %w: environmentLeaseId is immutable", ErrWarmTransition)
	case next.NormalizedSessionID != old.NormalizedSessionID:
		return fmt.Errorf("check warm identity: %w: normalizedSessionId is immutable", ErrWarmTransition)
	case next.RunID == old.RunID:
		return fmt.Errorf("check warm identity: %w: runId must change", ErrWarmTransition)
	}
	return nil
}

// WarmTransitionInput is what a receipt binds.
type WarmTransitionInput struct {
	Old Identity
	// Command is the run.attach command (its Raw bytes, as delivered).
	Command *Command
	// Result is the command_result payload {commandId, controllerSeq,
	// commandType, status, result}.
	Result            json.RawMessage
	OldAckedSourceSeq int64
	RunnerVersion     string
	RunnerDigest      string
	Lease             Lease
}

// NewWarmTransition builds the receipt as CP warmTransitionReceipt does,
// refusing a binding it would refuse.
func NewWarmTransition(in WarmTransitionInput) (WarmTransition, error) {
	bad := func(what string) (WarmTransition, error) {
		return WarmTransition{}, fmt.Errorf("build warm transition: %w: %s", ErrWarmTransition, what)
	}
	if in.Command == nil || in.Command.Type != CommandRunAttach {
		return bad("not a run.attach command")
	}
	if _, err := exactIdentity(jsonenc.MustMarshal(in.Old)); err != nil {
		return bad("old identity")
	}
	next, _, err := ParseNextAuthority(in.Command.Payload)
	if err != nil {
		return WarmTransition{}, fmt.Errorf("build warm transition: %w", err)
	}
	if err := CheckWarmIdentity(in.Old, next.Identity); err != nil {
		return WarmTransition{}, fmt.Errorf("build warm transition: %w", err)
	}
	var res CommandResultPayload
	if err := json.Unmarshal(in.Result, &res); err != nil {
		return bad("result payload")
	}
	if res.Status != "completed" || res.CommandID != in.Command.CommandID || res.CommandType != in.Command.Type ||
		res.ControllerSeq != in.Command.ControllerSeq {
		return bad("result does not complete this command")
	}
	if !isStableID(in.RunnerVersion) || !isRunnerDigest(in.RunnerDigest) ||
		!isStableID(in.Lease.ID) || in.Lease.ExpiresAtUnixMs <= 0 || in.Lease.RevocationEpoch < 0 ||
		in.OldAckedSourceSeq < 0 {
		return bad("runner or lease binding")
	}
	fp, err := warmCommandFingerprint(in.Command)
	if err != nil {
		return WarmTransition{}, err
	}
	rd, err := CanonicalDigest(in.Result)
	if err != nil {
		return bad("result digest")
	}
	w := WarmTransition{
		Schema: WarmTransitionSchema, OldIdentity: in.Old, NewIdentity: next.Identity,
		CommandID: in.Command.CommandID, ControllerSeq: in.Command.ControllerSeq,
		CommandFingerprint: fp, ResultDigest: rd, OldAckedSourceSeq: in.OldAckedSourceSeq,
		Connection: next.Connection, RunnerVersion: in.RunnerVersion, RunnerDigest: in.RunnerDigest,
		LeaseID: in.Lease.ID, LeaseExpiresAtUnixMs: in.Lease.ExpiresAtUnixMs, LeaseRevocationEpoch: in.Lease.RevocationEpoch,
	}
	if w.TransitionID, err = w.digest(); err != nil {
		return WarmTransition{}, err
	}
	return w, nil
}

// isRunnerDigest matches CP's runner digest form, sha256:<64 lower-case hex>.
func isRunnerDigest(s string) bool {
	hexPart, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	for i := 0; i < len(hexPart); i++ {
		if c := hexPart[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// warmCommandFingerprint is the receipt's commandFingerprint: the digest of
// the command as delivered with deadlineAt and precondition forced to null
// (CP: "Rust's closed Command representation serializes these optional
// fields"). It differs from the journal fingerprint (Command.Fingerprint),
// which covers the raw bytes as received.
func warmCommandFingerprint(cmd *Command) (string, error) {
	raw := cmd.Raw
	if len(raw) == 0 {
		raw = jsonenc.MustMarshal(cmd)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("fingerprint warm command: %w", ErrInvalidCommand)
	}
	delete(m, "status")
	delete(m, "result")
	m["deadlineAt"], m["precondition"] = json.RawMessage(`null`), json.RawMessage(`null`)
	d, err := CanonicalDigest(jsonenc.MustMarshal(m))
	if err != nil {
		return "", fmt.Errorf("fingerprint warm command: %w", ErrInvalidCommand)
	}
	return d, nil
}

// digest is the canonical digest of the receipt without transitionId (CP:
// transitionId = canonicalDigest(body)).
func (w WarmTransition) digest() (string, error) {
	b, err := jsonenc.Marshal(w)
	if err != nil {
		return "", fmt.Errorf("digest warm transition: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("digest warm transition: %w", err)
	}
	delete(m, "transitionId")
	d, err := CanonicalDigest(jsonenc.MustMarshal(m))
	if err != nil {
		return "", fmt.Errorf("digest warm transition: %w", err)
	}
	return d, nil
}

// Marshal is the receipt's JSON.
func (w WarmTransition) Marshal() json.RawMessage { return jsonenc.MustMarshal(w) }

// SameWarmTransition reports whether got is exactly the receipt want: the
// same canonical JSON, nothing added or missing.
func SameWarmTransition(got json.RawMessage, want WarmTransition) bool {
	if len(got) == 0 {
		return false
	}
	g, err := Canonical(got)
	if err != nil {
		return false
	}
	w, err := Canonical(want.Marshal())
	return err == nil && bytes.Equal(g, w)
}

// DecodeWarmTransition decodes a receipt and checks its schema and
// transitionId; the fields it binds are the caller's to compare.
func DecodeWarmTransition(raw json.RawMessage) (WarmTransition, error) {
	var w WarmTransition
	if err := json.Unmarshal(raw, &w); err != nil {
		return WarmTransition{}, fmt.Errorf("decode warm transition: %w: not a receipt", ErrWarmTransition)
	}
	if w.Schema != WarmTransitionSchema {
		return WarmTransition{}, fmt.Errorf("decode warm transition: %w: schema", ErrWarmTransition)
	}
	d, err := w.digest()
	if err != nil || d != w.TransitionID {
		return WarmTransition{}, fmt.Errorf("decode warm transition: %w: transitionId is not the receipt's digest", ErrWarmTransition)
	}
	if !SameWarmTransition(raw, w) {
		return WarmTransition{}, fmt.Errorf("decode warm transition: %w: unknown or missing fields", ErrWarmTransition)
	}
	return w, nil
}
