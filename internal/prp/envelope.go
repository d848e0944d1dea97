package prp

import (
	"encoding/json"
)

// Protocol is the value of every envelope's "protocol" field.
const Protocol = "paperclip.runner"

// Protocol versions runnerd implements (spec §2.5).
const (
	// ProtocolMinVersion is the lowest PRP version runnerd speaks (R-transport PROTOCOL_MIN_VERSION).
	ProtocolMinVersion = 1
	// ProtocolVersion is the highest PRP version runnerd speaks (R-transport PROTOCOL_VERSION).
	ProtocolVersion = 2
)

// Envelope kinds (spec §2.1, §3.2). The plaintext handshake uses the first
// three; every later frame is sealed.
const (
	KindAuthHello     = "auth_hello"
	KindAuthChallenge = "auth_challenge"
	KindAuthResponse  = "auth_response"

	// core → runner
	KindWelcome                    = "welcome"
	KindCommand                    = "command"
	KindAck                        = "ack"
	KindPing                       = "ping"
	KindRevoke                     = "revoke"
	KindLeaseRenewed               = "lease_renewed"
	KindCommandResultAck           = "command_result_ack"
	KindWarmTransitionActivatedAck = "warm_transition_activated_ack"

	// runner → core
	KindEvent                   = "event"
	KindCommandResult           = "command_result"
	KindPong                    = "pong"
	KindLeaseRenew              = "lease_renew"
	KindWarmTransitionActivated = "warm_transition_activated"
)

// Identity is the six identity fields every PRP envelope carries. Its JSON
// names are the wire names; embedded in a struct it flattens into it.
type Identity struct {
	RunnerInstanceID    string `json:"runnerInstanceId"`
	EnvironmentLeaseID  string `json:"environmentLeaseId"`
	RunID               string `json:"runId"`
	NormalizedSessionID string `json:"normalizedSessionId"`
	TurnID              string `json:"turnId"`
	ItemID              string `json:"itemId"`
}

// Envelope is one control envelope after authentication, in either
// direction (spec §3.2). The core adds EnvelopeID and SentAt; runner event and
// command_result envelopes omit ConnectionID and ConnectionLeaseID because
// they are built once and kept durably.
type Envelope struct {
	Protocol   string `json:"protocol"`
	Version    int    `json:"version"`
	EnvelopeID string `json:"envelopeId,omitempty"`
	Kind       string `json:"kind"`
	Identity
	ConnectionID      string          `json:"connectionId,omitempty"`
	ConnectionLeaseID string          `json:"connectionLeaseId,omitempty"`
	SentAt            string          `json:"sentAt,omitempty"`
	Payload           json.RawMessage `json:"payload"`
}
