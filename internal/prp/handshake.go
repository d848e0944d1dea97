package prp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// Credential kinds as auth_hello and auth_challenge name them.
const (
	CredentialBootstrap = "bootstrap"
	CredentialLease     = "lease"
)

const (
	// AuthMessageTimeout bounds each handshake message and the welcome wait
	// (R-transport AUTH_TIMEOUT); the caller's ctx (the lifecycle deadline)
	// bounds them too.
	AuthMessageTimeout = 2 * time.Second
	// clientNonceBytes is the size of auth_hello's clientNonce (spec §2.1).
	clientNonceBytes = 32
	// WarmTransitionVersion is the warm-rotation capability runnerd
	// advertises in every auth_hello and a core echoes when it honours it
	// (spec §2.1, §9.5).
	WarmTransitionVersion = 1
)

// MsgConn is one text-message channel (a WebSocket) as the handshake sees it.
// Each call moves exactly one complete text message; both honour ctx.
type MsgConn interface {
	ReadMsg(ctx context.Context) ([]byte, error)
	WriteMsg(ctx context.Context, b []byte) error
}

// ErrTicketConsumed reports that a bootstrap handshake failed after sending
// auth_response had started: the core may have consumed the one-use ticket
// (spec §2.4). The runner must not retry with the same ticket; the process
// fails closed.
var ErrTicketConsumed = errors.New("bootstrap connection failed closed; provide a fresh one-use ticket")

// Runner-side handshake failures before auth_response. All of them are
// retryable with the same credential (spec §2.4); none carries peer text.
var (
	ErrChallengeRejected = errors.New("auth challenge rejected")
	ErrServerProof       = errors.New("auth challenge server proof invalid")
	ErrWelcomeRejected   = errors.New("welcome rejected")
	// ErrLeaseExpired: the held lease is at or past its expiry; the runner
	// needs a fresh bootstrap ticket (lease_expired_requires_bootstrap).
	ErrLeaseExpired = errors.New("connection lease expired")
	errNoCredential = errors.New("no bootstrap ticket or connection lease")
)

// Core-side handshake refusals of malformed or mismatched runner messages
// (ParseAuthHello, ParseAuthResponse and the controller's checks); the core
// closes the connection on each.
var (
	ErrHelloRejected = errors.New("auth hello rejected")
	ErrClientProof   = errors.New("auth response rejected")
)

// Lease is the runner's connection lease. Token lives only in memory and is
// never logged: String and LogValue redact it.
type Lease struct {
	ID              string
	Token           string
	ExpiresAtUnixMs int64
	RevocationEpoch int64
	// ProtocolVersion is the version the lease pins (spec §2.5).
	ProtocolVersion int
	// RenewalVersion is the welcome's connectionLeaseRenewalVersion; 1
	// means lease_renew is allowed.
	RenewalVersion int
}

// String describes the lease without its token.
func (l Lease) String() string {
	return fmt.Sprintf("lease{id=%s expiresAtUnixMs=%d epoch=%d version=%d token=%s}",
		l.ID, l.ExpiresAtUnixMs, l.RevocationEpoch, l.ProtocolVersion, redacted(l.Token))
}

// GoString keeps %#v from printing the token.
func (l Lease) GoString() string { return l.String() }

// LogValue logs the lease without its token.
func (l Lease) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("id", l.ID),
		slog.Int64("expiresAtUnixMs", l.ExpiresAtUnixMs),
		slog.Int64("revocationEpoch", l.RevocationEpoch),
		slog.Int("protocolVersion", l.ProtocolVersion),
		slog.String("token", redacted(l.Token)),
	)
}

// MarshalJSON keeps the token out of any JSON (a JSON log handler marshals
// structs that embed a Lease); a Lease is never a wire type.
func (l Lease) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID              string `json:"id"`
		ExpiresAtUnixMs int64  `json:"expiresAtUnixMs"`
		RevocationEpoch int64  `json:"revocationEpoch"`
		ProtocolVersion int    `json:"protocolVersion"`
		RenewalVersion  int    `json:"renewalVersion"`
		Token           string `json:"token,omitempty"`
	}{l.ID, l.ExpiresAtUnixMs, l.RevocationEpoch, l.ProtocolVersion, l.RenewalVersion, redacted(l.Token)})
}

func redacted(s string) string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// Resume is the cursor triple auth_hello reports (spec §2.1).
type Resume struct {
	LastControllerCommandSeq int64 `json:"lastControllerCommandSeq"`
	NextSourceEventSeq       int64 `json:"nextSourceEventSeq"`
	AckedSourceSeq           int64 `json:"ackedSourceSeq"`
}

// authEnvelope is the plaintext handshake envelope.
type authEnvelope struct {
	Protocol string `json:"protocol"`
	Version  int    `json:"version"`
	Kind     string `json:"kind"`
	Payload  any    `json:"payload"`
}

// ClientHandshake runs the runner half of the handshake (spec §2): it sends
// auth_hello, checks every echoed field of the challenge (§2.3), verifies
// the server proof before it sends the client proof, and opens and checks
// the welcome (§3.1). It is a value for one attempt; the caller reuses it.
type ClientHandshake struct {
	Identity                    Identity
	RunnerVersion, RunnerDigest string
	// Ticket is the bootstrap ticket, used only when Lease is nil.
	Ticket string
	// Lease is the held connection lease for a lease reconnect.
	Lease *Lease
	// RenewalOutstanding says a lease_renew is unanswered, so a later expiry
	// for the same lease is acceptable once (spec §5).
	RenewalOutstanding bool
	// WarmTransitionID is set only while activating a warm rotation;
	// WarmReceipt is then the receipt the welcome must carry, exactly, with
	// phase "activated" (prp.md §9.5 step 4).
	WarmTransitionID string
	WarmReceipt      *WarmTransition
	Resume           Resume
	// IndexedState (--indexed-state) requires the challenge to carry the
	// durability and outputBodies capabilities, as the reference does when
	// its core keeps indexed state (durability.md §1.2).
	IndexedState bool
	// SendFrameLimit and ReceiveFrameLimit lower the session's frame bounds
	// (Session.SetFrameLimits; tests only); 0 means MaxSecureChannelFrames.
	SendFrameLimit, ReceiveFrameLimit uint64
	// Now is the clock for expiry checks; nil means time.Now.
	Now func() time.Time
	// Rand supplies the client nonce; nil means crypto/rand.
	Rand io.Reader
}

// Welcome is the decrypted, checked welcome (spec §3.1).
type Welcome struct {
	EnvelopeID        string
	ConnectionID      string
	ConnectionLeaseID string
	SentAt            string
	// SelectedVersion is the negotiated version (also Session.Version).
	SelectedVersion int
	// HeartbeatIntervalMs is reported by the core; runnerd ignores it.
	HeartbeatIntervalMs int64
	// MaxFrameBytes is the core's frame limit, 0 when absent. The caller
	// honours it within its own 1 KiB–16 MiB range.
	MaxFrameBytes  int
	MaxBatchEvents int
	// AckedSourceSeq is the core's committed cursor; HasAckedSourceSeq says
	// whether the welcome carried one.
	AckedSourceSeq    int64
	HasAckedSourceSeq bool
	// PendingCommands holds the raw command objects (at most one in CP).
	PendingCommands       []json.RawMessage
	WarmTransitionVersion int
	WarmTransition        json.RawMessage
	WarmTransitionPhase   string
	// Lease is the lease to hold from now on: on bootstrap the new lease with
	// its token, on a lease reconnect the held lease with the welcome's
	// expiry. The bootstrap ticket is spent either way.
	Lease Lease
	// Bootstrapped says the welcome exchanged a bootstrap ticket for a lease.
	Bootstrapped bool
}

func (h *ClientHandshake) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// Run runs the runner half on c. On success the Session is bound to the
// welcome's connection and the Welcome carries the lease to hold.
//
// Failures before sending auth_response starts are retryable with the same
// credential. For a bootstrap ticket every failure after that point wraps
// ErrTicketConsumed: the process must fail closed (spec §2.4).
func (h *ClientHandshake) Run(ctx context.Context, c MsgConn) (*Session, *Welcome, error) {
	p, err := h.prove(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	return p.respond(ctx, c)
}

// provenChallenge is a handshake whose peer has proved it holds the
// credential's key: the challenge passed every check and its server proof
// verified. Nothing that could consume a bootstrap ticket has been sent yet.
type provenChallenge struct {
	h           *ClientHandshake
	kind, token string
	authKey     [32]byte
	credID      string
	nonce       string
	ch          *challenge
}

// bootstrap reports whether respond would spend a bootstrap ticket.
func (p *provenChallenge) bootstrap() bool { return p.kind == CredentialBootstrap }

// prove runs the first half of the handshake: auth_hello, the challenge and
// its checks, the server proof. Every failure here is retryable with the
// same credential (spec §2.4), so halves of different peers may run at once.
func (h *ClientHandshake) prove(ctx context.Context, c MsgConn) (*provenChallenge, error) {
	kind, token := CredentialLease, ""
	switch {
	case h.Lease != nil && h.Lease.Token != "":
		token = h.Lease.Token
		if h.now().UnixMilli() >= h.Lease.ExpiresAtUnixMs {
			return nil, fmt.Errorf("client handshake: %w", ErrLeaseExpired)
		}
	case h.Ticket != "":
		kind, token = CredentialBootstrap, h.Ticket
	default:
		return nil, fmt.Errorf("client handshake: %w", errNoCredential)
	}
	authKey := AuthKey(token)
	credID := CredentialID(token)

	var nb [clientNonceBytes]byte
	rnd := h.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	if _, err := io.ReadFull(rnd, nb[:]); err != nil {
		return nil, fmt.Errorf("client handshake: read nonce: %w", err)
	}
	nonce := hex.EncodeToString(nb[:])

	wtv := WarmTransitionVersion
	hello := HelloPayload{
		CredentialID: credID, CredentialKind: kind, ClientNonce: nonce,
		ProtocolMin: ProtocolMinVersion, ProtocolMax: ProtocolVersion,
		WarmTransitionVersion: &wtv, Identity: h.Identity,
		RunnerVersion: h.RunnerVersion, RunnerDigest: h.RunnerDigest, Resume: &h.Resume,
		Durability: DurabilityCapability, OutputBodies: OutputBodiesCapability,
	}
	if h.WarmTransitionID != "" {
		id := h.WarmTransitionID
		hello.WarmTransitionID = &id
	}
	if err := WriteAuth(ctx, c, ProtocolVersion, KindAuthHello, hello); err != nil {
		return nil, fmt.Errorf("client handshake: send auth_hello: %w", err)
	}

	msg, err := ReadAuth(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("client handshake: read auth_challenge: %w", err)
	}
	ch, err := parseChallenge(msg)
	if err != nil {
		return nil, fmt.Errorf("client handshake: %w", err)
	}
	if err := h.checkChallenge(ch, credID, kind, nonce); err != nil {
		return nil, fmt.Errorf("client handshake: %w", err)
	}
	// The server proof is verified before anything that could consume the
	// ticket: a peer without the credential's key learns nothing and costs
	// nothing (spec §1.2, §2.3).
	if !verifyHexMAC(domainHMAC(authKey[:], domainServerProof, ch.signing), ch.ServerProof) {
		return nil, fmt.Errorf("client handshake: %w", ErrServerProof)
	}

	return &provenChallenge{h: h, kind: kind, token: token, authKey: authKey, credID: credID, nonce: nonce, ch: ch}, nil
}

// respond runs the second half: auth_response, the session keys and the
// welcome. For a bootstrap ticket every failure wraps ErrTicketConsumed.
func (p *provenChallenge) respond(ctx context.Context, c MsgConn) (*Session, *Welcome, error) {
	h, kind, token, authKey, credID, nonce, ch := p.h, p.kind, p.token, p.authKey, p.credID, p.nonce, p.ch
	// From here on a bootstrap ticket may be consumed by the core.
	failClosed := func(err error) error {
		if kind == CredentialBootstrap {
			return fmt.Errorf("client handshake: %w: %w", ErrTicketConsumed, err)
		}
		return fmt.Errorf("client handshake: %w", err)
	}
	proof := clientProof(authKey[:], ch.signing, ch.ServerProof)
	resp := AuthResponsePayload{CredentialID: credID, ClientNonce: nonce, ServerNonce: ch.ServerNonce, ClientProof: proof}
	if err := WriteAuth(ctx, c, ch.SelectedVersion, KindAuthResponse, resp); err != nil {
		return nil, nil, failClosed(fmt.Errorf("send auth_response: %w", err))
	}
	sess, err := newSession(roleRunner, authKey[:], ch.signing, ch.ServerProof, proof)
	if err != nil {
		return nil, nil, failClosed(err)
	}
	sess.SetFrameLimits(h.SendFrameLimit, h.ReceiveFrameLimit)
	sess.Version = ch.SelectedVersion
	sess.Identity = h.Identity

	frame, err := ReadAuth(ctx, c)
	if err != nil {
		return nil, nil, failClosed(fmt.Errorf("read welcome: %w", err))
	}
	pt, err := sess.Open(frame)
	if err != nil {
		return nil, nil, failClosed(fmt.Errorf("open welcome: %w", err))
	}
	w, err := h.checkWelcome(pt, ch, kind)
	if err != nil {
		return nil, nil, failClosed(err)
	}
	if kind == CredentialLease {
		w.Lease.Token = token
	}
	sess.ConnectionID = w.ConnectionID
	sess.ConnectionLeaseID = w.ConnectionLeaseID
	return sess, w, nil
}

// challenge is a parsed auth_challenge with the exact bytes it signs.
type challenge struct {
	ChallengePayload
	envelopeVersion int
	signing         []byte
	// epochField names the first epoch member the challenge carries
	// (challengeEpochFields), "" when none.
	epochField string
	// commandResume is the challenge's commandResume member, nil when absent.
	commandResume *jsonValue
}

// parseChallenge parses an auth_challenge envelope. The signing bytes are
// the canonical JSON of the payload exactly as received minus serverProof,
// so a core that signs extra fields (newer cores do) still verifies; typed
// fields are read from the same parse, with exact key names.
func parseChallenge(msg []byte) (*challenge, error) {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrChallengeRejected, what) }
	ver, pl, err := parseAuthEnvelope(msg, KindAuthChallenge, func(int64) bool { return true }, bad)
	if err != nil {
		return nil, err
	}
	r := fieldReader{obj: pl}
	ch := &challenge{envelopeVersion: int(ver)}
	p := &ch.ChallengePayload
	p.CredentialID = r.str("credentialId")
	p.CredentialKind = r.str("credentialKind")
	p.ClientNonce = r.str("clientNonce")
	p.ServerNonce = r.str("serverNonce")
	p.Identity = r.identity()
	p.RunnerVersion = r.str("runnerVersion")
	p.RunnerDigest = r.str("runnerDigest")
	p.SelectedVersion = int(r.int("selectedVersion"))
	p.CredentialLeaseID = r.nullableStr("credentialLeaseId")
	p.CredentialExpiresAt = r.str("credentialExpiresAt")
	p.CredentialExpiresAtUnixMs = r.int("credentialExpiresAtUnixMs")
	p.RevocationEpoch = r.int("revocationEpoch")
	if pl.member("warmTransitionVersion") != nil {
		v := int(r.int("warmTransitionVersion"))
		p.WarmTransitionVersion = &v
	}
	if pl.member("warmTransitionId") != nil {
		v := r.str("warmTransitionId")
		p.WarmTransitionID = &v
	}
	for _, f := range []struct {
		name string
		dst  **string
	}{{"durability", &p.Durability}, {"outputBodies", &p.OutputBodies}} {
		if pl.member(f.name) != nil {
			v := r.str(f.name)
			*f.dst = &v
		}
	}
	for _, name := range challengeEpochFields {
		if pl.member(name) != nil {
			ch.epochField = name
			break
		}
	}
	if cr := pl.member("commandResume"); cr != nil {
		ch.commandResume = cr
	}
	p.ServerProof = r.str("serverProof")
	if r.err != "" {
		return nil, bad(r.err)
	}
	ch.signing, err = pl.without("serverProof").canonical(MaxCanonicalDepth, MaxCanonicalNodes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrChallengeRejected, err)
	}
	return ch, nil
}

// checkChallenge applies the runner's checks (spec §2.3, R-transport
// validate_challenge). Errors name the field, never its value.
func (h *ClientHandshake) checkChallenge(ch *challenge, credID, kind, nonce string) error {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrChallengeRejected, what) }
	for _, f := range []struct{ name, got, want string }{
		{"credentialId", ch.CredentialID, credID},
		{"credentialKind", ch.CredentialKind, kind},
		{"clientNonce", ch.ClientNonce, nonce},
		{"runnerInstanceId", ch.RunnerInstanceID, h.Identity.RunnerInstanceID},
		{"environmentLeaseId", ch.EnvironmentLeaseID, h.Identity.EnvironmentLeaseID},
		{"runId", ch.RunID, h.Identity.RunID},
		{"normalizedSessionId", ch.NormalizedSessionID, h.Identity.NormalizedSessionID},
		{"turnId", ch.TurnID, h.Identity.TurnID},
		{"itemId", ch.ItemID, h.Identity.ItemID},
		{"runnerVersion", ch.RunnerVersion, h.RunnerVersion},
		{"runnerDigest", ch.RunnerDigest, h.RunnerDigest},
	} {
		if f.got != f.want {
			return bad(f.name + " does not match")
		}
	}
	if ch.ServerNonce == "" {
		return bad("serverNonce is empty")
	}
	if ch.SelectedVersion < ProtocolMinVersion || ch.SelectedVersion > ProtocolVersion {
		return bad("selectedVersion unsupported")
	}
	if ch.envelopeVersion != ch.SelectedVersion {
		return bad("envelope version differs from selectedVersion")
	}
	if ch.CredentialExpiresAtUnixMs <= h.now().UnixMilli() {
		return bad("credential expired")
	}
	if ch.WarmTransitionVersion != nil && *ch.WarmTransitionVersion != WarmTransitionVersion {
		return bad("warmTransitionVersion")
	}
	switch {
	case ch.WarmTransitionID != nil && *ch.WarmTransitionID != h.WarmTransitionID:
		return bad("warmTransitionId does not match")
	case ch.WarmTransitionID == nil && h.WarmTransitionID != "" && ch.SelectedVersion >= 2:
		return bad("warmTransitionId not echoed")
	}
	if err := h.checkChallengeDurability(ch); err != nil {
		return err
	}
	if kind == CredentialBootstrap {
		if ch.CredentialLeaseID != nil {
			return bad("credentialLeaseId must be null for bootstrap")
		}
		if ch.RevocationEpoch != 0 {
			return bad("revocationEpoch must be 0 for bootstrap")
		}
		return nil
	}
	l := h.Lease
	if ch.CredentialLeaseID == nil || *ch.CredentialLeaseID != l.ID {
		return bad("credentialLeaseId does not match the held lease")
	}
	if ch.RevocationEpoch != l.RevocationEpoch {
		return bad("revocationEpoch does not match the held lease")
	}
	if !h.expiryAcceptable(ch.CredentialExpiresAtUnixMs) {
		return bad("credential expiry does not match the held lease")
	}
	if l.ProtocolVersion != 0 && ch.SelectedVersion != l.ProtocolVersion {
		return bad("selectedVersion differs from the version the lease pins")
	}
	return nil
}

// checkChallengeDurability applies durability.md §1.2's refusals at level
// D1: no epoch member (runnerd requests no epoch capability, so every one
// is unrequested, eventResume and eventEpochLimit included), a
// commandResume only as an indexed core sends it to such a runner (no
// command epoch, a sequence of the right shape), each
// capability echo exactly its constant, and both echoes present under
// --indexed-state. Each fails the attempt before auth_response, so it is
// retryable and never spends a ticket.
func (h *ClientHandshake) checkChallengeDurability(ch *challenge) error {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrChallengeRejected, what) }
	if ch.epochField != "" {
		return bad(ch.epochField + " was not requested")
	}
	if cr := ch.commandResume; cr != nil {
		// runnerd holds no command epoch, so the echo names none; the
		// sequence is the core's and is only checked for shape.
		r := fieldReader{obj: cr}
		if cr.kind != jsonObject {
			return bad("commandResume is not an object")
		}
		if r.int("lastControllerCommandSeq") < 0 || r.err != "" {
			return bad("commandResume.lastControllerCommandSeq missing or mistyped")
		}
		if e := cr.member("controllerEpoch"); e != nil && e.kind != jsonNull {
			return bad("commandResume names a command epoch runnerd does not hold")
		}
	}
	for _, f := range []struct {
		name, want string
		got        *string
	}{{"durability", DurabilityCapability, ch.Durability}, {"outputBodies", OutputBodiesCapability, ch.OutputBodies}} {
		switch {
		case f.got == nil && h.IndexedState:
			return bad(f.name + " missing (required with --indexed-state)")
		case f.got != nil && *f.got != f.want:
			return bad(f.name + " is not " + f.want)
		}
	}
	return nil
}

// expiryAcceptable: the held expiry, or a later one only while a renewal is
// outstanding and no warm transition runs (a lost lease_renewed, spec §5).
func (h *ClientHandshake) expiryAcceptable(got int64) bool {
	held := h.Lease.ExpiresAtUnixMs
	return got == held || (got > held && h.RenewalOutstanding && h.WarmTransitionID == "")
}

// welcomeWire is the decrypted welcome envelope.
type welcomeWire struct {
	Protocol   string `json:"protocol"`
	Version    int    `json:"version"`
	EnvelopeID string `json:"envelopeId"`
	Kind       string `json:"kind"`
	Identity
	ConnectionID      string          `json:"connectionId"`
	ConnectionLeaseID string          `json:"connectionLeaseId"`
	SentAt            string          `json:"sentAt"`
	Payload           *WelcomePayload `json:"payload"`
}

// checkWelcome applies the runner's welcome checks (spec §3.1, R-transport
// validate_welcome).
func (h *ClientHandshake) checkWelcome(pt []byte, ch *challenge, kind string) (*Welcome, error) {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrWelcomeRejected, what) }
	var w welcomeWire
	if err := json.Unmarshal(pt, &w); err != nil {
		return nil, bad("not a welcome envelope")
	}
	if w.Protocol != Protocol || w.Kind != KindWelcome || w.Version != ch.SelectedVersion {
		return nil, bad("protocol, kind or version")
	}
	if w.Identity != h.Identity {
		return nil, bad("identity does not match")
	}
	if w.ConnectionID == "" || w.ConnectionLeaseID == "" || w.Payload == nil {
		return nil, bad("connectionId, connectionLeaseId or payload missing")
	}
	p := w.Payload
	if p.SelectedVersion != ch.SelectedVersion {
		return nil, bad("selectedVersion differs from the challenge")
	}
	if p.ConnectionLeaseID != w.ConnectionLeaseID {
		return nil, bad("payload connectionLeaseId differs")
	}
	if p.ConnectionLeaseExpiresAtUnixMs == nil || p.ConnectionLeaseRevocationEpoch == nil {
		return nil, bad("lease expiry or revocation epoch missing")
	}
	expiry, epoch := *p.ConnectionLeaseExpiresAtUnixMs, *p.ConnectionLeaseRevocationEpoch
	if expiry <= h.now().UnixMilli() {
		return nil, bad("lease already expired")
	}
	if b := p.LeaseBinding; b != nil {
		if b.RunnerInstanceID != h.Identity.RunnerInstanceID || b.EnvironmentLeaseID != h.Identity.EnvironmentLeaseID ||
			b.RunID != h.Identity.RunID || b.NormalizedSessionID != h.Identity.NormalizedSessionID ||
			b.ProtocolVersion != ch.SelectedVersion {
			return nil, bad("leaseBinding does not match")
		}
	}
	for _, c := range p.PendingCommands {
		if len(c) == 0 || c[0] != '{' {
			return nil, bad("pending command is not an object")
		}
	}
	// No epoch was granted (checkChallengeDurability), so the welcome may
	// carry no grant and no source epoch (durability.md §1.3).
	for _, f := range []struct {
		name string
		v    json.RawMessage
	}{{"commandEpochs", p.CommandEpochs}, {"eventEpochs", p.EventEpochs}, {"eventEpochLimit", p.EventEpochLimit}, {"sourceEpoch", p.SourceEpoch}} {
		if len(f.v) > 0 && string(f.v) != "null" {
			return nil, bad(f.name + " differs from the challenge's grant")
		}
	}
	if h.WarmTransitionID != "" {
		if h.WarmReceipt == nil || p.WarmTransitionPhase != WarmPhaseActivated || !SameWarmTransition(p.WarmTransition, *h.WarmReceipt) {
			return nil, bad("warm activation welcome does not carry the exact receipt")
		}
	}
	out := &Welcome{
		EnvelopeID: w.EnvelopeID, ConnectionID: w.ConnectionID, ConnectionLeaseID: w.ConnectionLeaseID,
		SentAt: w.SentAt, SelectedVersion: p.SelectedVersion, HeartbeatIntervalMs: p.HeartbeatIntervalMs,
		MaxFrameBytes: p.MaxFrameBytes, MaxBatchEvents: p.MaxBatchEvents, PendingCommands: p.PendingCommands,
		WarmTransition: p.WarmTransition, WarmTransitionPhase: p.WarmTransitionPhase,
		Lease: Lease{ID: w.ConnectionLeaseID, ExpiresAtUnixMs: expiry, RevocationEpoch: epoch, ProtocolVersion: p.SelectedVersion},
	}
	if p.AckedSourceSeq != nil {
		out.AckedSourceSeq, out.HasAckedSourceSeq = *p.AckedSourceSeq, true
	}
	if p.ConnectionLeaseRenewalVersion != nil {
		out.Lease.RenewalVersion = *p.ConnectionLeaseRenewalVersion
	}
	if p.WarmTransitionVersion != nil {
		out.WarmTransitionVersion = *p.WarmTransitionVersion
	}
	if kind == CredentialBootstrap {
		if p.ConnectionLeaseToken == nil || *p.ConnectionLeaseToken == "" {
			return nil, bad("bootstrap welcome carries no lease token")
		}
		out.Lease.Token = *p.ConnectionLeaseToken
		out.Bootstrapped = true
		return out, nil
	}
	// Lease reconnect: same lease, no new token (spec §3.1, scenario 8).
	if p.ConnectionLeaseToken != nil {
		return nil, bad("lease welcome carries a lease token")
	}
	if w.ConnectionLeaseID != h.Lease.ID || epoch != h.Lease.RevocationEpoch || expiry != ch.CredentialExpiresAtUnixMs {
		return nil, bad("lease binding changed")
	}
	return out, nil
}

// ParseAuthHello parses an auth_hello envelope (the core half's first
// read); its version must be a supported one. Errors wrap ErrHelloRejected
// and name the part that was wrong, never the peer's bytes.
func ParseAuthHello(msg []byte) (*HelloPayload, error) {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrHelloRejected, what) }
	supported := func(v int64) bool { return v >= ProtocolMinVersion && v <= ProtocolVersion }
	_, pl, err := parseAuthEnvelope(msg, KindAuthHello, supported, bad)
	if err != nil {
		return nil, err
	}
	r := fieldReader{obj: pl}
	p := &HelloPayload{
		CredentialID: r.str("credentialId"), ClientNonce: r.str("clientNonce"),
		ProtocolMin: int(r.int("protocolMin")), ProtocolMax: int(r.int("protocolMax")),
		Identity: r.identity(), RunnerVersion: r.str("runnerVersion"), RunnerDigest: r.str("runnerDigest"),
	}
	// The reference core ignores credentialKind and resume; read them when
	// present, for the caller.
	p.CredentialKind, _ = pl.member("credentialKind").goString()
	p.Durability, _ = pl.member("durability").goString()
	p.OutputBodies, _ = pl.member("outputBodies").goString()
	if v, ok := pl.member("warmTransitionVersion").safeInt(); ok {
		n := int(v)
		p.WarmTransitionVersion = &n
	}
	if s, ok := pl.member("warmTransitionId").goString(); ok {
		p.WarmTransitionID = &s
	}
	if rv := pl.member("resume"); rv != nil && rv.kind == jsonObject {
		rr := fieldReader{obj: rv}
		p.Resume = &Resume{
			LastControllerCommandSeq: rr.int("lastControllerCommandSeq"),
			NextSourceEventSeq:       rr.int("nextSourceEventSeq"),
			AckedSourceSeq:           rr.int("ackedSourceSeq"),
		}
		if rr.err != "" {
			p.Resume = nil
		}
	}
	if r.err != "" {
		return nil, bad(r.err)
	}
	return p, nil
}

// ParseAuthResponse parses an auth_response envelope at the selected
// version (the core half's second read). Errors wrap ErrClientProof.
func ParseAuthResponse(msg []byte, version int) (*AuthResponsePayload, error) {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrClientProof, what) }
	selected := func(v int64) bool { return v == int64(version) }
	_, pl, err := parseAuthEnvelope(msg, KindAuthResponse, selected, bad)
	if err != nil {
		return nil, err
	}
	r := fieldReader{obj: pl}
	p := &AuthResponsePayload{
		CredentialID: r.str("credentialId"), ClientNonce: r.str("clientNonce"),
		ServerNonce: r.str("serverNonce"), ClientProof: r.str("clientProof"),
	}
	if r.err != "" {
		return nil, bad(r.err)
	}
	return p, nil
}

// WriteAuth sends one plaintext handshake envelope within AuthMessageTimeout.
func WriteAuth(ctx context.Context, c MsgConn, version int, kind string, payload any) error {
	b, err := jsonenc.Marshal(authEnvelope{Protocol: Protocol, Version: version, Kind: kind, Payload: payload})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, AuthMessageTimeout)
	defer cancel()
	return c.WriteMsg(ctx, b)
}

// ReadAuth reads one handshake message within AuthMessageTimeout.
func ReadAuth(ctx context.Context, c MsgConn) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, AuthMessageTimeout)
	defer cancel()
	return c.ReadMsg(ctx)
}

// safeInt returns an integral number within ±(2^53−1), as the reference's
// Number.isSafeInteger accepts.
func (v *jsonValue) safeInt() (int64, bool) {
	if v == nil || v.kind != jsonNumber || v.number != math.Trunc(v.number) || math.Abs(v.number) > maxFrameCounter {
		return 0, false
	}
	return int64(v.number), true
}

// fieldReader reads required typed members of a parsed object and records
// the first missing or mistyped one.
type fieldReader struct {
	obj *jsonValue
	err string
}

func (r *fieldReader) fail(key string) {
	if r.err == "" {
		r.err = key + " missing or mistyped"
	}
}

func (r *fieldReader) str(key string) string {
	s, ok := r.obj.member(key).goString()
	if !ok {
		r.fail(key)
	}
	return s
}

func (r *fieldReader) nullableStr(key string) *string {
	v := r.obj.member(key)
	if v != nil && v.kind == jsonNull {
		return nil
	}
	s, ok := v.goString()
	if !ok {
		r.fail(key)
		return nil
	}
	return &s
}

func (r *fieldReader) int(key string) int64 {
	n, ok := r.obj.member(key).safeInt()
	if !ok {
		r.fail(key)
	}
	return n
}

func (r *fieldReader) identity() Identity {
	return Identity{
		RunnerInstanceID:    r.str("runnerInstanceId"),
		EnvironmentLeaseID:  r.str("environmentLeaseId"),
		RunID:               r.str("runId"),
		NormalizedSessionID: r.str("normalizedSessionId"),
		TurnID:              r.str("turnId"),
		ItemID:              r.str("itemId"),
	}
}

// parseAuthEnvelope parses a plaintext handshake frame: a JSON object with
// protocol paperclip.runner, the expected kind, a version okVersion accepts
// and an object payload. Failures are reported through bad, which names
// the part that was wrong (never the peer's bytes).
func parseAuthEnvelope(msg []byte, kind string, okVersion func(int64) bool, bad func(string) error) (int64, *jsonValue, error) {
	env, err := parseJSON(msg)
	if err != nil || env.kind != jsonObject {
		return 0, nil, bad("not a JSON object")
	}
	if p, _ := env.member("protocol").goString(); p != Protocol {
		return 0, nil, bad("protocol")
	}
	if k, _ := env.member("kind").goString(); k != kind {
		return 0, nil, bad("kind")
	}
	ver, ok := env.member("version").safeInt()
	if !ok || !okVersion(ver) {
		return 0, nil, bad("version")
	}
	pl := env.member("payload")
	if pl == nil || pl.kind != jsonObject {
		return 0, nil, bad("payload")
	}
	return ver, pl, nil
}
