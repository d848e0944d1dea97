package prp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"
)

// MsgConn is one text-message channel (a WebSocket) as the handshake sees it.
// Each call moves exactly one complete text message.
type MsgConn interface {
	ReadMsg(ctx context.Context) ([]byte, error)
	WriteMsg(ctx context.Context, b []byte) error
}

// ErrTicketConsumed reports that a bootstrap handshake failed after sending
// auth_response had started: the core may have consumed the one-use ticket
// (spec §2.4). The runner must not retry with the same ticket.
var ErrTicketConsumed = errors.New("bootstrap connection failed closed; provide a fresh one-use ticket")

// Lease is the runner's connection lease. Token lives only in memory and is
// never logged: String and LogValue redact it.
type Lease struct {
	ID              string
	Token           string
	ExpiresAtUnixMs int64
	RevocationEpoch int64
	ProtocolVersion int
	RenewalVersion  int
}

// Resume is the cursor triple auth_hello reports (spec §2.1).
type Resume struct {
	LastControllerCommandSeq int64 `json:"lastControllerCommandSeq"`
	NextSourceEventSeq       int64 `json:"nextSourceEventSeq"`
	AckedSourceSeq           int64 `json:"ackedSourceSeq"`
}

// ClientHandshake runs the runner half of the handshake.
type ClientHandshake struct {
	Identity                    Identity
	RunnerVersion, RunnerDigest string
	// Ticket is the bootstrap ticket; empty when Lease is set.
	Ticket string
	// Lease is the held connection lease for a lease reconnect.
	Lease *Lease
	// RenewalOutstanding says a lease_renew is unanswered, so a later expiry
	// for the same lease is acceptable (spec §5).
	RenewalOutstanding bool
	Resume             Resume
	Now                func() time.Time
	Rand               io.Reader
}

// Welcome is the decrypted welcome (spec §3.1).
type Welcome struct {
	ConnectionID      string
	ConnectionLeaseID string
	PendingCommands   []json.RawMessage
	AckedSourceSeq    int64
	MaxFrameBytes     int
	// Lease is the lease to hold from now on.
	Lease Lease
}

// Run runs the runner half on c.
func (h *ClientHandshake) Run(ctx context.Context, c MsgConn) (*Session, *Welcome, error) {
	return nil, nil, errors.New("client handshake: not implemented")
}

// Hello is the parsed auth_hello payload as the core received it.
type Hello struct {
	CredentialID   string
	CredentialKind string
	Identity       Identity
	Resume         Resume
}

// CredentialStore holds the core's tickets and leases.
type CredentialStore interface{}

// CoreHandshake runs the core (controller) half of the handshake.
type CoreHandshake struct {
	Identity                    Identity
	RunnerVersion, RunnerDigest string
	Store                       CredentialStore
	LeaseTTL                    time.Duration
	MaxFrameBytes               int
	Now                         func() time.Time
	Rand                        io.Reader
	PendingCommands             func() []json.RawMessage
	AckedSourceSeq              func() int64
}

// Run runs the core half on c.
func (h *CoreHandshake) Run(ctx context.Context, c MsgConn) (*Session, *Hello, error) {
	return nil, nil, errors.New("core handshake: not implemented")
}
