package control

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pcrunner/pcrunner/internal/prp"
)

const (
	// authChallengeTTL bounds how long a challenge stays answerable (CP
	// authChallengeTtlMs); credential expiry bounds it too.
	authChallengeTTL = 5 * time.Second
	// DefaultLeaseTTL is the connection lease TTL when Handshake.LeaseTTL
	// is zero (CP connectionLeaseTtlMs default).
	DefaultLeaseTTL = 60 * time.Second
	// defaultMaxFrameBytes is the welcome's maxFrameBytes when
	// Handshake.MaxFrameBytes is zero (CP maxFrameBytes, older cores).
	defaultMaxFrameBytes = 1 << 20
	// welcomeMaxBatchEvents and welcomeHeartbeatIntervalMs are constants in
	// CP's welcome; runnerd ignores the heartbeat.
	welcomeMaxBatchEvents      = 100
	welcomeHeartbeatIntervalMs = 250
	// leaseRenewalVersion is the welcome's connectionLeaseRenewalVersion:
	// the runner may send lease_renew (spec §5).
	leaseRenewalVersion = 1
)

// Core-side handshake failures. The core closes the connection on each.
var (
	errCredentialRejected = errors.New("credential unknown, used, expired or revoked")
	errChallengeExpired   = errors.New("auth challenge expired")
)

// Credential is a usable ticket or lease as the core's store holds it.
type Credential struct {
	ID   string // credentialId
	Kind string // CredentialBootstrap or CredentialLease
	// AuthKey is the HMAC key derived from the token.
	AuthKey         [32]byte
	ExpiresAtUnixMs int64
	// Lease fields, set for CredentialLease only.
	LeaseID         string
	RevocationEpoch int64
	ProtocolVersion int
}

// CredentialStore holds the core's tickets and leases.
type CredentialStore interface {
	// Lookup returns the credential with this id if it is an unused,
	// unexpired bootstrap ticket or an unrevoked, unexpired lease at now;
	// otherwise an error wrapping errCredentialRejected.
	Lookup(credentialID string, now time.Time) (Credential, error)
	// Admit runs once the client proof validated. It re-validates the
	// credential and, for a bootstrap ticket, atomically marks it used and
	// creates a lease pinned to version with the given TTL, returning it
	// with its Token (the only time the token leaves the store). For a lease
	// it returns the lease without a token.
	Admit(cred Credential, version int, ttl time.Duration, now time.Time) (prp.Lease, error)
}

// Hello is what the core learned from an authenticated runner.
type Hello struct {
	prp.HelloPayload
	// Lease is the connection's lease (without its token).
	Lease prp.Lease
	// Warm is the receipt of the warm transition this connection activates, if any.
	Warm *prp.WarmTransition
}

// Handshake runs the core (controller) half of the handshake: the
// checks of CP #authorizeHello and #authResponse, version selection (§2.5),
// and the welcome. It is a value for one connection.
type Handshake struct {
	// Identity, RunnerVersion and RunnerDigest are the registration the
	// runner must match.
	Identity                    prp.Identity
	RunnerVersion, RunnerDigest string
	Store                       CredentialStore
	// LeaseTTL is the TTL of a lease created on bootstrap; 0 means
	// DefaultLeaseTTL.
	LeaseTTL time.Duration
	// MaxFrameBytes is announced in the welcome; 0 means
	// defaultMaxFrameBytes.
	MaxFrameBytes int
	// ConnectionID names this connection (connection_<n> in CP); empty means
	// a random one.
	ConnectionID string
	// Now is the clock; nil means time.Now. Rand supplies nonces; nil means
	// crypto/rand.
	Now  func() time.Time
	Rand io.Reader
	// PendingCommands returns the commands to deliver in the welcome (at most
	// the lowest pending one); AckedSourceSeq the committed cursor. Either
	// may be nil.
	PendingCommands func() []json.RawMessage
	AckedSourceSeq  func() int64
	// BeforeAdmit, when set, runs once the client proof validated and before
	// the credential is re-validated and consumed (CP
	// beforeAuthenticatedConnection); an error refuses the connection and
	// leaves a ticket unused.
	BeforeAdmit func(ctx context.Context, hello *prp.HelloPayload) error
	// Warm looks up the pending warm transition an auth_hello names by
	// warmTransitionId (prp.md §9.5). A hello naming one authenticates the
	// receipt's new identity with the receipt's lease, gets no pending
	// command, and its welcome carries the receipt with phase "activated".
	// Not found: such a hello is refused. Nil: the id is only echoed
	// (handshake tests).
	Warm func(transitionID string) (prp.WarmTransition, bool)
	// Outbound, when set, sees the welcome's payload before it is sealed
	// and returns the payload to send (Config.Outbound).
	Outbound func(kind string, payload any) (any, error)
	// Indexed, FrameLimit and Challenge are Config's.
	Indexed    bool
	FrameLimit uint64
	Challenge  func(payload map[string]any)
}

func (h *Handshake) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *Handshake) rand() io.Reader {
	if h.Rand != nil {
		return h.Rand
	}
	return rand.Reader
}

// Run runs the core half on c. On any error the caller closes the
// connection; a ticket is consumed only by Store.Admit, after the client
// proof validated.
func (h *Handshake) Run(ctx context.Context, c prp.MsgConn) (*prp.Session, *Hello, error) {
	msg, err := prp.ReadAuth(ctx, c)
	if err != nil {
		return nil, nil, fmt.Errorf("core handshake: read auth_hello: %w", err)
	}
	hello, err := prp.ParseAuthHello(msg)
	if err != nil {
		return nil, nil, fmt.Errorf("core handshake: %w", err)
	}
	if h.Indexed && (hello.Durability != prp.DurabilityCapability || hello.OutputBodies != prp.OutputBodiesCapability) {
		// CP #authorizeHello: an indexed core closes before any challenge.
		return nil, nil, fmt.Errorf("core handshake: %w: durability or outputBodies capability missing", prp.ErrHelloRejected)
	}
	expect := h.Identity
	var warm *prp.WarmTransition
	if hello.WarmTransitionID != nil && h.Warm != nil {
		w, ok := h.Warm(*hello.WarmTransitionID)
		if !ok {
			return nil, nil, fmt.Errorf("core handshake: %w: unknown warm transition", prp.ErrHelloRejected)
		}
		expect, warm = w.NewIdentity, &w
	}
	now := h.now()
	cred, err := h.Store.Lookup(hello.CredentialID, now)
	if err != nil {
		return nil, nil, fmt.Errorf("core handshake: %w", err)
	}
	if warm != nil && (cred.Kind != prp.CredentialLease || cred.LeaseID != warm.LeaseID) {
		return nil, nil, fmt.Errorf("core handshake: %w: a warm activation reconnects with the receipt's lease", prp.ErrHelloRejected)
	}
	selected, err := h.checkHello(hello, cred, expect)
	if err != nil {
		return nil, nil, fmt.Errorf("core handshake: %w", err)
	}

	serverNonce, err := randomUUID(h.rand())
	if err != nil {
		return nil, nil, fmt.Errorf("core handshake: server nonce: %w", err)
	}
	ch := prp.ChallengePayload{
		CredentialID: cred.ID, CredentialKind: cred.Kind, ClientNonce: hello.ClientNonce, ServerNonce: serverNonce,
		Identity: hello.Identity, RunnerVersion: hello.RunnerVersion, RunnerDigest: hello.RunnerDigest,
		SelectedVersion:           selected,
		CredentialExpiresAt:       isoMillis(cred.ExpiresAtUnixMs),
		CredentialExpiresAtUnixMs: cred.ExpiresAtUnixMs,
	}
	if cred.Kind == prp.CredentialLease {
		id := cred.LeaseID
		ch.CredentialLeaseID, ch.RevocationEpoch = &id, cred.RevocationEpoch
	}
	if hello.WarmTransitionVersion != nil && *hello.WarmTransitionVersion == prp.WarmTransitionVersion {
		ch.WarmTransitionVersion = hello.WarmTransitionVersion
	}
	ch.WarmTransitionID = hello.WarmTransitionID
	if h.Indexed {
		d, o := prp.DurabilityCapability, prp.OutputBodiesCapability
		ch.Durability, ch.OutputBodies = &d, &o
	}
	payload, err := h.challengePayload(ch, hello)
	if err != nil {
		return nil, nil, fmt.Errorf("core handshake: %w", err)
	}
	signing, err := prp.Canonical(payload)
	if err != nil {
		return nil, nil, fmt.Errorf("core handshake: sign challenge: %w", err)
	}
	ch.ServerProof = prp.ServerProof(cred.AuthKey[:], signing)
	payload["serverProof"] = ch.ServerProof
	deadline := min(cred.ExpiresAtUnixMs, now.Add(authChallengeTTL).UnixMilli())
	if err := prp.WriteAuth(ctx, c, selected, prp.KindAuthChallenge, payload); err != nil {
		return nil, nil, fmt.Errorf("core handshake: send auth_challenge: %w", err)
	}

	rctx, cancel := context.WithTimeout(ctx, authChallengeTTL)
	msg, err = c.ReadMsg(rctx)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("core handshake: read auth_response: %w", err)
	}
	now = h.now()
	if now.UnixMilli() >= deadline {
		return nil, nil, fmt.Errorf("core handshake: %w", errChallengeExpired)
	}
	resp, err := prp.ParseAuthResponse(msg, selected)
	if err != nil {
		return nil, nil, fmt.Errorf("core handshake: %w", err)
	}
	if resp.CredentialID != cred.ID || resp.ClientNonce != hello.ClientNonce || resp.ServerNonce != serverNonce ||
		!prp.VerifyClientProof(cred.AuthKey[:], signing, ch.ServerProof, resp.ClientProof) {
		return nil, nil, fmt.Errorf("core handshake: %w", prp.ErrClientProof)
	}
	if h.BeforeAdmit != nil {
		if err := h.BeforeAdmit(ctx, hello); err != nil {
			return nil, nil, fmt.Errorf("core handshake: admission: %w", err)
		}
		if now = h.now(); now.UnixMilli() >= deadline {
			return nil, nil, fmt.Errorf("core handshake: %w", errChallengeExpired)
		}
	}
	lease, err := h.Store.Admit(cred, selected, h.leaseTTL(), now)
	if err != nil {
		return nil, nil, fmt.Errorf("core handshake: admit: %w", err)
	}

	// The proof verified, so it is exactly the lowercase hex of the expected MAC.
	sess, err := prp.NewCoreSession(cred.AuthKey[:], signing, ch.ServerProof, resp.ClientProof)
	if err != nil {
		return nil, nil, fmt.Errorf("core handshake: %w", err)
	}
	sess.SetFrameLimits(h.FrameLimit, h.FrameLimit)
	sess.Version, sess.Identity, sess.ConnectionLeaseID = selected, expect, lease.ID
	sess.ConnectionID = h.ConnectionID
	if sess.ConnectionID == "" {
		id, err := randomUUID(h.rand())
		if err != nil {
			return nil, nil, fmt.Errorf("core handshake: connection id: %w", err)
		}
		sess.ConnectionID = "connection_" + id
	}
	frame, err := h.sealWelcome(sess, lease, now, hello, warm)
	if err != nil {
		return nil, nil, fmt.Errorf("core handshake: %w", err)
	}
	if err := writeMsg(ctx, c, frame); err != nil {
		return nil, nil, fmt.Errorf("core handshake: send welcome: %w", err)
	}
	lease.Token = ""
	return sess, &Hello{HelloPayload: *hello, Lease: lease, Warm: warm}, nil
}

// challengePayload is the challenge as a JSON object: the typed fields, an
// indexed core's commandResume, then the Challenge hook's edits.
func (h *Handshake) challengePayload(ch prp.ChallengePayload, hello *prp.HelloPayload) (map[string]any, error) {
	b, err := json.Marshal(ch)
	if err != nil {
		return nil, fmt.Errorf("build challenge: %w", err)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // integers stay exact through the round trip
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("build challenge: %w", err)
	}
	if h.Indexed {
		// CP adds commandResume whenever its authority store runs (§11
		// scenario 2): no epoch yet, the hello's controller sequence.
		var seq int64
		if hello.Resume != nil {
			seq = hello.Resume.LastControllerCommandSeq
		}
		m["commandResume"] = prp.CommandResume{LastControllerCommandSeq: seq}
	}
	if h.Challenge != nil {
		h.Challenge(m)
	}
	return m, nil
}

func (h *Handshake) leaseTTL() time.Duration {
	if h.LeaseTTL > 0 {
		return h.LeaseTTL
	}
	return DefaultLeaseTTL
}

// checkHello applies CP #authorizeHello and selects the version: the lease's
// pinned version for a lease, else min(ProtocolVersion, protocolMax).
func (h *Handshake) checkHello(p *prp.HelloPayload, cred Credential, expect prp.Identity) (int, error) {
	bad := func(what string) error { return fmt.Errorf("%w: %s", prp.ErrHelloRejected, what) }
	if p.Identity != expect {
		return 0, bad("identity does not match the registration")
	}
	if p.RunnerVersion != h.RunnerVersion || p.RunnerDigest != h.RunnerDigest {
		return 0, bad("runner version or digest does not match")
	}
	if p.ProtocolMin > prp.ProtocolVersion || p.ProtocolMax < prp.ProtocolMinVersion || p.ProtocolMin > p.ProtocolMax {
		return 0, bad("no common protocol version")
	}
	if cred.Kind == prp.CredentialLease {
		if cred.ProtocolVersion < p.ProtocolMin || cred.ProtocolVersion > p.ProtocolMax {
			return 0, bad("lease version outside the offered range")
		}
		return cred.ProtocolVersion, nil
	}
	return min(prp.ProtocolVersion, p.ProtocolMax), nil
}

func (h *Handshake) sealWelcome(s *prp.Session, lease prp.Lease, now time.Time, hello *prp.HelloPayload, warm *prp.WarmTransition) ([]byte, error) {
	pending := []json.RawMessage{}
	if h.PendingCommands != nil && warm == nil {
		if pc := h.PendingCommands(); pc != nil {
			pending = pc
		}
	}
	var acked int64
	if h.AckedSourceSeq != nil {
		acked = h.AckedSourceSeq()
	}
	maxFrame := h.MaxFrameBytes
	if maxFrame == 0 {
		maxFrame = defaultMaxFrameBytes
	}
	renewal := leaseRenewalVersion
	expiry, epoch := lease.ExpiresAtUnixMs, lease.RevocationEpoch
	p := prp.WelcomePayload{
		SelectedVersion: s.Version, HeartbeatIntervalMs: welcomeHeartbeatIntervalMs,
		ConnectionLeaseRenewalVersion: &renewal, ConnectionLeaseID: lease.ID,
		ConnectionLeaseExpiresAt: isoMillis(expiry), ConnectionLeaseExpiresAtUnixMs: &expiry,
		ConnectionLeaseRevocationEpoch: &epoch,
		LeaseBinding: &prp.LeaseBinding{
			RunnerInstanceID: s.Identity.RunnerInstanceID, EnvironmentLeaseID: s.Identity.EnvironmentLeaseID,
			RunID: s.Identity.RunID, NormalizedSessionID: s.Identity.NormalizedSessionID, ProtocolVersion: s.Version,
		},
		MaxFrameBytes: maxFrame, MaxBatchEvents: welcomeMaxBatchEvents, AckedSourceSeq: &acked,
		PendingCommands: pending,
	}
	if lease.Token != "" {
		tok := lease.Token
		p.ConnectionLeaseToken = &tok
	}
	if v := hello.WarmTransitionVersion; v != nil && *v == prp.WarmTransitionVersion {
		p.WarmTransitionVersion = v // CP echoes the capability it will honour
	}
	if warm != nil {
		p.WarmTransition, p.WarmTransitionPhase = warm.Marshal(), prp.WarmPhaseActivated
	}
	var payload any = p
	if h.Outbound != nil {
		var err error
		if payload, err = h.Outbound(prp.KindWelcome, p); err != nil {
			return nil, fmt.Errorf("send welcome: %w", err)
		}
	}
	env, err := s.NewControl(prp.KindWelcome, payload)
	if err != nil {
		return nil, err
	}
	env.EnvelopeID = "welcome_" + strings.TrimPrefix(s.ConnectionID, "connection_")
	env.SentAt = isoMillis(now.UnixMilli())
	return s.SealEnvelope(env)
}

// writeMsg sends one message within AuthMessageTimeout.
func writeMsg(ctx context.Context, c prp.MsgConn, b []byte) error {
	ctx, cancel := context.WithTimeout(ctx, prp.AuthMessageTimeout)
	defer cancel()
	return c.WriteMsg(ctx, b)
}

// isoMillis formats Unix milliseconds as JavaScript's Date.toISOString.
func isoMillis(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// randomUUID returns a random RFC 4122 version-4 UUID string, the shape of
// the reference's randomUUID().
func randomUUID(r io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}
