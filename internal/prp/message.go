package prp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// Errors for control envelopes after authentication.
var (
	// ErrControlIdentity reports a control envelope whose identity,
	// connection, lease or version differs from the authenticated connection
	// (spec §3.2). The connection must be dropped.
	ErrControlIdentity = errors.New("control identity mismatch")
	// ErrMalformedEnvelope reports a decrypted frame that is not a valid
	// control envelope, or of a kind this side does not accept
	// ("malformed or unsupported control frame").
	ErrMalformedEnvelope = errors.New("malformed or unsupported control frame")
)

// HelloPayload is the auth_hello payload (spec §2.1), runner → core.
type HelloPayload struct {
	CredentialID   string `json:"credentialId"`
	CredentialKind string `json:"credentialKind"`
	ClientNonce    string `json:"clientNonce"`
	ProtocolMin    int    `json:"protocolMin"`
	ProtocolMax    int    `json:"protocolMax"`
	// WarmTransitionVersion is 1 when the runner supports warm rotation.
	WarmTransitionVersion *int `json:"warmTransitionVersion,omitempty"`
	// WarmTransitionID is set only while activating a warm rotation (§9.5).
	WarmTransitionID *string `json:"warmTransitionId,omitempty"`
	Identity
	RunnerVersion string  `json:"runnerVersion"`
	RunnerDigest  string  `json:"runnerDigest"`
	Resume        *Resume `json:"resume,omitempty"`
	// Durability and OutputBodies are the capability claims
	// (durability.md §1.1): runnerd always sends DurabilityCapability and
	// OutputBodiesCapability; an indexed core refuses a hello without them.
	Durability   string `json:"durability,omitempty"`
	OutputBodies string `json:"outputBodies,omitempty"`
}

// ChallengePayload is the auth_challenge payload (spec §2.1), core → runner.
// The signing bytes are the canonical JSON of the payload without
// serverProof; the optional warm fields are present only when echoed.
type ChallengePayload struct {
	CredentialID   string `json:"credentialId"`
	CredentialKind string `json:"credentialKind"`
	ClientNonce    string `json:"clientNonce"`
	ServerNonce    string `json:"serverNonce"`
	Identity
	RunnerVersion             string  `json:"runnerVersion"`
	RunnerDigest              string  `json:"runnerDigest"`
	SelectedVersion           int     `json:"selectedVersion"`
	CredentialLeaseID         *string `json:"credentialLeaseId"` // null for bootstrap
	CredentialExpiresAt       string  `json:"credentialExpiresAt"`
	CredentialExpiresAtUnixMs int64   `json:"credentialExpiresAtUnixMs"`
	RevocationEpoch           int64   `json:"revocationEpoch"`
	WarmTransitionVersion     *int    `json:"warmTransitionVersion,omitempty"`
	WarmTransitionID          *string `json:"warmTransitionId,omitempty"`
	// Durability and OutputBodies echo the capabilities; only an indexed
	// core sends them (durability.md §1.2).
	Durability   *string `json:"durability,omitempty"`
	OutputBodies *string `json:"outputBodies,omitempty"`
	ServerProof  string  `json:"serverProof,omitempty"`
}

// AuthResponsePayload is the auth_response payload, runner → core.
type AuthResponsePayload struct {
	CredentialID string `json:"credentialId"`
	ClientNonce  string `json:"clientNonce"`
	ServerNonce  string `json:"serverNonce"`
	ClientProof  string `json:"clientProof"`
}

// LeaseBinding is the welcome's leaseBinding object.
type LeaseBinding struct {
	RunnerInstanceID    string `json:"runnerInstanceId"`
	EnvironmentLeaseID  string `json:"environmentLeaseId"`
	RunID               string `json:"runId"`
	NormalizedSessionID string `json:"normalizedSessionId"`
	ProtocolVersion     int    `json:"protocolVersion"`
}

// WelcomePayload is the payload of the encrypted welcome (spec §3.1).
// Pointer fields distinguish "absent" from zero on decode.
type WelcomePayload struct {
	SelectedVersion                int               `json:"selectedVersion"`
	HeartbeatIntervalMs            int64             `json:"heartbeatIntervalMs"`
	ConnectionLeaseRenewalVersion  *int              `json:"connectionLeaseRenewalVersion,omitempty"`
	ConnectionLeaseID              string            `json:"connectionLeaseId"`
	ConnectionLeaseToken           *string           `json:"connectionLeaseToken,omitempty"` // bootstrap only; secret
	ConnectionLeaseExpiresAt       string            `json:"connectionLeaseExpiresAt"`
	ConnectionLeaseExpiresAtUnixMs *int64            `json:"connectionLeaseExpiresAtUnixMs"`
	ConnectionLeaseRevocationEpoch *int64            `json:"connectionLeaseRevocationEpoch"`
	LeaseBinding                   *LeaseBinding     `json:"leaseBinding,omitempty"`
	MaxFrameBytes                  int               `json:"maxFrameBytes,omitempty"`
	MaxBatchEvents                 int               `json:"maxBatchEvents,omitempty"`
	AckedSourceSeq                 *int64            `json:"ackedSourceSeq,omitempty"`
	PendingCommands                []json.RawMessage `json:"pendingCommands"`
	WarmTransitionVersion          *int              `json:"warmTransitionVersion,omitempty"`
	WarmTransition                 json.RawMessage   `json:"warmTransition,omitempty"`
	WarmTransitionPhase            string            `json:"warmTransitionPhase,omitempty"`
	// The epoch grant of this connection (durability.md §1.3). runnerd
	// negotiates no epochs, so it requires all four absent (sourceEpoch may
	// be null); a core marshals them only when it granted epochs.
	CommandEpochs   json.RawMessage `json:"commandEpochs,omitempty"`
	EventEpochs     json.RawMessage `json:"eventEpochs,omitempty"`
	EventEpochLimit json.RawMessage `json:"eventEpochLimit,omitempty"`
	SourceEpoch     json.RawMessage `json:"sourceEpoch,omitempty"`
}

// AckPayload is core→runner ack: the cumulative committed cursor.
type AckPayload struct {
	AckedSourceSeq int64 `json:"ackedSourceSeq"`
}

// PongPayload is runner→core pong. The core ignores its content.
type PongPayload struct {
	Lifecycle       string `json:"lifecycle"`
	AckedSourceSeq  int64  `json:"ackedSourceSeq"`
	OutboxBytes     int64  `json:"outboxBytes"`
	StoragePressure *bool  `json:"storagePressure,omitempty"`
}

// RevokePayload is core→runner revoke; the epoch must exceed the current one.
type RevokePayload struct {
	RevocationEpoch int64 `json:"revocationEpoch"`
}

// LeaseRenewPayload is runner→core lease_renew: the expiry the runner holds
// and the lease's revocation epoch (spec §5).
type LeaseRenewPayload struct {
	ConnectionLeaseExpiresAtUnixMs int64 `json:"connectionLeaseExpiresAtUnixMs"`
	ConnectionLeaseRevocationEpoch int64 `json:"connectionLeaseRevocationEpoch"`
}

// LeaseRenewedPayload is core→runner lease_renewed.
type LeaseRenewedPayload struct {
	PreviousExpiresAtUnixMs        int64 `json:"previousExpiresAtUnixMs"`
	ConnectionLeaseExpiresAtUnixMs int64 `json:"connectionLeaseExpiresAtUnixMs"`
	ConnectionLeaseRevocationEpoch int64 `json:"connectionLeaseRevocationEpoch"`
}

// CommandResultPayload is runner→core command_result (spec §7.3).
type CommandResultPayload struct {
	CommandID     string          `json:"commandId"`
	ControllerSeq uint64          `json:"controllerSeq"`
	CommandType   string          `json:"commandType"`
	Status        string          `json:"status"`
	Result        json.RawMessage `json:"result"`
}

// CommandResultAckPayload is core→runner command_result_ack.
type CommandResultAckPayload struct {
	CommandID   string `json:"commandId"`
	CommandType string `json:"commandType"`
	// ControllerSeq stays signed: an ACK naming a negative seq matches no
	// result and is ignored rather than failing decode.
	ControllerSeq  int64           `json:"controllerSeq"`
	Status         string          `json:"status"`
	WarmTransition json.RawMessage `json:"warmTransition,omitempty"`
}

// AcksSeq reports whether p acknowledges the result of command seq.
func (p CommandResultAckPayload) AcksSeq(seq uint64) bool {
	return p.ControllerSeq >= 0 && uint64(p.ControllerSeq) == seq
}

// WarmTransitionActivatedPayload is the payload of warm_transition_activated
// (runner→core) and warm_transition_activated_ack (core→runner).
type WarmTransitionActivatedPayload struct {
	TransitionID string `json:"transitionId"`
}

// coreKinds are the kinds a runner accepts from the core after the welcome.
var coreKinds = map[string]bool{
	KindCommand: true, KindAck: true, KindPing: true, KindRevoke: true,
	KindLeaseRenewed: true, KindCommandResultAck: true, KindWarmTransitionActivatedAck: true,
	// Known so that Client.inspect can refuse them as fatal rather than
	// drop the connection as for an unknown kind (durability.md §1.4).
	KindCommandEpochRotate: true, KindEventEpochCommitted: true,
}

// runnerKinds are the kinds a core accepts from a runner.
var runnerKinds = map[string]bool{
	KindEvent: true, KindCommandResult: true, KindPong: true,
	KindLeaseRenew: true, KindWarmTransitionActivated: true,
}

// NewControl builds a control envelope of kind on this session's
// connection: protocol, version, identity, connectionId and
// connectionLeaseId filled in. The core side may set EnvelopeID and SentAt.
func (s *Session) NewControl(kind string, payload any) (*Envelope, error) {
	raw, err := jsonenc.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encode %s payload: %w", kind, err)
	}
	return &Envelope{
		Protocol: Protocol, Version: s.Version, Kind: kind, Identity: s.Identity,
		ConnectionID: s.ConnectionID, ConnectionLeaseID: s.ConnectionLeaseID, Payload: raw,
	}, nil
}

// NewEventEnvelope builds a runner event (or command_result) envelope. It
// carries only the identity fields, never connection ids, because it is
// built once, kept durably and replayed byte for byte on later connections.
func NewEventEnvelope(kind string, version int, id Identity, payload json.RawMessage) *Envelope {
	return &Envelope{Protocol: Protocol, Version: version, Kind: kind, Identity: id, Payload: payload}
}

// MarshalEnvelope encodes an envelope as one frame's plaintext.
func MarshalEnvelope(env *Envelope) ([]byte, error) {
	b, err := jsonenc.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	return b, nil
}

// SealEnvelope encodes env and seals it under the next outbound counter.
func (s *Session) SealEnvelope(env *Envelope) ([]byte, error) {
	b, err := MarshalEnvelope(env)
	if err != nil {
		return nil, err
	}
	return s.Seal(b)
}

// DecodeEnvelope parses a decrypted frame into an envelope. It requires the
// protocol name, a kind and an object payload; identity checks are
// ValidateControlIdentity's (runner side) or ValidateRunnerEnvelope's
// (core side) job.
func DecodeEnvelope(plaintext []byte) (*Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(plaintext, &env); err != nil {
		return nil, fmt.Errorf("decode envelope: %w", ErrMalformedEnvelope)
	}
	if env.Protocol != Protocol || env.Kind == "" {
		return nil, fmt.Errorf("decode envelope: %w: protocol or kind", ErrMalformedEnvelope)
	}
	if p := bytes.TrimSpace(env.Payload); len(p) == 0 || p[0] != '{' {
		return nil, fmt.Errorf("decode envelope: %w: payload is not an object", ErrMalformedEnvelope)
	}
	return &env, nil
}

// OpenEnvelope opens one frame and decodes the envelope in it. Errors wrap
// ErrSecureFrame (fatal, fail closed) or ErrMalformedEnvelope.
func (s *Session) OpenEnvelope(frame []byte) (*Envelope, error) {
	pt, err := s.Open(frame)
	if err != nil {
		return nil, err
	}
	return DecodeEnvelope(pt)
}

// DecodePayload decodes env's payload into v.
func (env *Envelope) DecodePayload(v any) error {
	if err := json.Unmarshal(env.Payload, v); err != nil {
		return fmt.Errorf("decode %s payload: %w", env.Kind, ErrMalformedEnvelope)
	}
	return nil
}

// ValidateControlIdentity checks a core→runner control envelope against the
// authenticated session (R-transport validate_control_identity): protocol,
// version, the six identity fields, connectionId and connectionLeaseId must
// all equal the session's, and kind must be one the core may send. Lease
// expiry is the caller's check (it owns the clock and the renewed expiry).
// Any error means: drop the connection and reconnect.
func ValidateControlIdentity(env *Envelope, s *Session) error {
	if env.Protocol != Protocol || env.Version != s.Version {
		return fmt.Errorf("validate control envelope: %w: protocol or version", ErrControlIdentity)
	}
	if env.Identity != s.Identity {
		return fmt.Errorf("validate control envelope: %w: identity", ErrControlIdentity)
	}
	if env.ConnectionID != s.ConnectionID || env.ConnectionLeaseID != s.ConnectionLeaseID {
		return fmt.Errorf("validate control envelope: %w: connection or lease", ErrControlIdentity)
	}
	if !coreKinds[env.Kind] {
		return fmt.Errorf("validate control envelope: %w: kind", ErrMalformedEnvelope)
	}
	return nil
}

// ValidateRunnerEnvelope checks a runner→core envelope on the core side:
// protocol and version must match the connection and the kind must be one a
// runner sends. Identity fields that are present must match the session;
// lease_renew must carry the full identity and connection (spec §5).
// Event and command_result envelopes carry no connection ids by design.
func ValidateRunnerEnvelope(env *Envelope, s *Session) error {
	if env.Protocol != Protocol || env.Version != s.Version {
		return fmt.Errorf("validate runner envelope: %w: protocol or version", ErrControlIdentity)
	}
	if !runnerKinds[env.Kind] {
		return fmt.Errorf("validate runner envelope: %w: kind", ErrMalformedEnvelope)
	}
	strict := env.Kind == KindLeaseRenew
	check := func(got, want string) bool { return got == want || (!strict && got == "") }
	id, want := env.Identity, s.Identity
	if !check(id.RunnerInstanceID, want.RunnerInstanceID) || !check(id.EnvironmentLeaseID, want.EnvironmentLeaseID) ||
		!check(id.RunID, want.RunID) || !check(id.NormalizedSessionID, want.NormalizedSessionID) ||
		!check(id.TurnID, want.TurnID) || !check(id.ItemID, want.ItemID) ||
		!check(env.ConnectionID, s.ConnectionID) || !check(env.ConnectionLeaseID, s.ConnectionLeaseID) {
		return fmt.Errorf("validate runner envelope: %w", ErrControlIdentity)
	}
	return nil
}
