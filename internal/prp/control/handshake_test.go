package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// memMsgConn is one end of an in-memory message pipe: the far side of the
// protocol for handshake tests (real sockets are the transport's tests).
type memMsgConn struct {
	in     chan []byte
	out    chan []byte
	closed chan struct{}
	once   *sync.Once

	mu   sync.Mutex // guards sent: WriteMsg and the test's reads race
	sent [][]byte
}

func newMemPipe() (*memMsgConn, *memMsgConn) {
	ab, ba := make(chan []byte, 16), make(chan []byte, 16)
	closed, once := make(chan struct{}), &sync.Once{}
	return &memMsgConn{in: ba, out: ab, closed: closed, once: once},
		&memMsgConn{in: ab, out: ba, closed: closed, once: once}
}

func (c *memMsgConn) ReadMsg(ctx context.Context) ([]byte, error) {
	select {
	case m := <-c.in:
		return m, nil
	default:
	}
	select {
	case m := <-c.in:
		return m, nil
	case <-c.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *memMsgConn) WriteMsg(ctx context.Context, b []byte) error {
	m := bytes.Clone(b)
	select {
	case <-c.closed:
		return io.ErrClosedPipe
	default:
	}
	select {
	case c.out <- m:
		c.mu.Lock()
		c.sent = append(c.sent, m)
		c.mu.Unlock()
		return nil
	case <-c.closed:
		return io.ErrClosedPipe
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *memMsgConn) Close() { c.once.Do(func() { close(c.closed) }) }

func (c *memMsgConn) sentKinds() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var kinds []string
	for _, m := range c.sent {
		var e struct{ Kind string }
		_ = json.Unmarshal(m, &e)
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

func (c *memMsgConn) sentMsg(i int) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent[i]
}

var testIdentity = prp.Identity{
	RunnerInstanceID: "runner_1", EnvironmentLeaseID: "env_lease_1", RunID: "run_1",
	NormalizedSessionID: "session_1", TurnID: "turn_1", ItemID: "item_1",
}

const (
	testRunnerVersion = "1.0.0"
	testRunnerDigest  = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
)

type handshakeResult struct {
	runner      *prp.Session
	welcome     *prp.Welcome
	runnerErr   error
	core        *prp.Session
	hello       *Hello
	coreErr     error
	runnerConn  *memMsgConn
	coreConn    *memMsgConn
	coreCancels context.CancelFunc
}

// runBoth runs both halves against each other over an in-memory pipe.
func runBoth(t *testing.T, client *prp.ClientHandshake, core *Handshake) handshakeResult {
	t.Helper()
	rc, cc := newMemPipe()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var res handshakeResult
	res.runnerConn, res.coreConn = rc, cc
	var wg sync.WaitGroup
	wg.Go(func() {
		res.core, res.hello, res.coreErr = core.Run(ctx, cc)
		if res.coreErr != nil {
			cc.Close()
		}
	})
	res.runner, res.welcome, res.runnerErr = client.Run(ctx, rc)
	if res.runnerErr != nil {
		rc.Close()
	}
	wg.Wait()
	return res
}

// decodeChallenge decodes an auth_challenge message and returns its
// payload and the bytes it signs: the canonical JSON of the payload as
// sent, without serverProof (spec §2.2).
func decodeChallenge(t *testing.T, msg []byte) (prp.ChallengePayload, []byte) {
	t.Helper()
	var env struct {
		Payload json.RawMessage `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(msg, &env))
	var ch prp.ChallengePayload
	require.NoError(t, json.Unmarshal(env.Payload, &ch))
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(env.Payload, &fields))
	delete(fields, "serverProof")
	signing, err := prp.Canonical(fields)
	require.NoError(t, err)
	return ch, signing
}

func newCore(store CredentialStore) *Handshake {
	return &Handshake{
		Identity: testIdentity, RunnerVersion: testRunnerVersion, RunnerDigest: testRunnerDigest,
		Store: store, ConnectionID: "connection_1",
	}
}

func newClient() *prp.ClientHandshake {
	return &prp.ClientHandshake{Identity: testIdentity, RunnerVersion: testRunnerVersion, RunnerDigest: testRunnerDigest}
}

func bootstrap(t *testing.T) (*MemoryCredentialStore, handshakeResult) {
	t.Helper()
	store := NewMemoryCredentialStore()
	ticket, err := store.IssueTicket(5*time.Second, time.Now())
	require.NoError(t, err)
	c := newClient()
	c.Ticket = ticket
	res := runBoth(t, c, newCore(store))
	require.NoError(t, res.runnerErr)
	require.NoError(t, res.coreErr)
	return store, res
}

// TestPRP07_BootstrapHoldsLease: bootstrap auth, welcome with
// connectionLeaseToken → the runner holds the lease (spec §15 scenario 7).
func TestPRP07_BootstrapHoldsLease(t *testing.T) {
	store := NewMemoryCredentialStore()
	ticket, err := store.IssueTicket(5*time.Second, time.Now())
	require.NoError(t, err)
	c := newClient()
	c.Ticket = ticket
	res := runBoth(t, c, newCore(store))
	require.NoError(t, res.runnerErr)
	require.NoError(t, res.coreErr)

	w := res.welcome
	assert.True(t, w.Bootstrapped)
	assert.True(t, store.TicketUsed(ticket))
	assert.NotEmpty(t, w.Lease.Token)
	assert.True(t, strings.HasPrefix(w.Lease.ID, "connection_lease_"))
	assert.Equal(t, res.hello.Lease.ID, w.Lease.ID)
	assert.Empty(t, res.hello.Lease.Token, "the core returns no token")
	assert.Equal(t, prp.ProtocolVersion, w.Lease.ProtocolVersion)
	assert.Equal(t, 1, w.Lease.RenewalVersion)
	assert.Equal(t, "connection_1", w.ConnectionID)
	assert.Equal(t, "welcome_1", w.EnvelopeID)
	assert.Equal(t, defaultMaxFrameBytes, w.MaxFrameBytes)
	assert.True(t, w.HasAckedSourceSeq)
	assert.Equal(t, res.core.ID, res.runner.ID)
	assert.Equal(t, prp.CredentialBootstrap, res.hello.CredentialKind)

	// The lease token authenticates a lease credential at the store.
	cred, err := store.Lookup(prp.CredentialID(w.Lease.Token), time.Now())
	require.NoError(t, err)
	assert.Equal(t, w.Lease.ID, cred.LeaseID)

	exchangeControl(t, res.runner, res.core)
}

// exchangeControl sends a control envelope each way and checks it.
func exchangeControl(t *testing.T, runner, core *prp.Session) {
	t.Helper()
	ping, err := core.NewControl(prp.KindPing, map[string]any{})
	require.NoError(t, err)
	frame, err := core.SealEnvelope(ping)
	require.NoError(t, err)
	env, err := runner.OpenEnvelope(frame)
	require.NoError(t, err)
	require.NoError(t, prp.ValidateControlIdentity(env, runner))
	assert.Equal(t, prp.KindPing, env.Kind)

	pong, err := runner.NewControl(prp.KindPong, prp.PongPayload{Lifecycle: "ready"})
	require.NoError(t, err)
	frame, err = runner.SealEnvelope(pong)
	require.NoError(t, err)
	env, err = core.OpenEnvelope(frame)
	require.NoError(t, err)
	require.NoError(t, prp.ValidateRunnerEnvelope(env, core))
	var p prp.PongPayload
	require.NoError(t, env.DecodePayload(&p))
	assert.Equal(t, "ready", p.Lifecycle)
}

// TestPRP08_LeaseReconnect: the second connection uses credentialKind
// "lease" and its welcome carries no token; a token on a lease welcome is
// rejected (spec §15 scenario 8).
func TestPRP08_LeaseReconnect(t *testing.T) {
	store, first := bootstrap(t)
	lease := first.welcome.Lease

	c := newClient()
	c.Lease = &lease
	core := newCore(store)
	core.ConnectionID = "connection_2"
	res := runBoth(t, c, core)
	require.NoError(t, res.runnerErr)
	require.NoError(t, res.coreErr)

	var hello struct {
		Version int              `json:"version"`
		Payload prp.HelloPayload `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(res.runnerConn.sentMsg(0), &hello))
	assert.Equal(t, prp.CredentialLease, hello.Payload.CredentialKind)
	assert.Equal(t, prp.CredentialID(lease.Token), hello.Payload.CredentialID)
	assert.False(t, res.welcome.Bootstrapped)
	assert.Equal(t, lease, res.welcome.Lease, "same lease, same token, same expiry")
	assert.Equal(t, "connection_2", res.runner.ConnectionID)
	exchangeControl(t, res.runner, res.core)

	t.Run("token on a lease welcome", func(t *testing.T) {
		c := newClient()
		c.Lease = &lease
		res := runBoth(t, c, newCore(leakyStore{store}))
		require.ErrorIs(t, res.runnerErr, prp.ErrWelcomeRejected)
		assert.NotErrorIs(t, res.runnerErr, prp.ErrTicketConsumed, "a lease reconnect is retryable")
		assert.NotContains(t, res.runnerErr.Error(), "lease_evil")
	})
}

// leakyStore misbehaves like a broken core: it hands a token out on a lease
// reconnect, which the core half then puts into the welcome.
type leakyStore struct{ *MemoryCredentialStore }

func (s leakyStore) Admit(cred Credential, version int, ttl time.Duration, now time.Time) (prp.Lease, error) {
	l, err := s.MemoryCredentialStore.Admit(cred, version, ttl, now)
	l.Token = "lease_evil"
	return l, err
}

// TestPRP47_VersionNegotiation: auth_hello carries version 2,
// protocolMin 1, protocolMax 2; a core selecting 1 gets a v1 connection
// (spec §15 scenario 47, §2.5).
func TestPRP47_VersionNegotiation(t *testing.T) {
	store, res := bootstrap(t)
	var hello struct {
		Protocol string         `json:"protocol"`
		Version  int            `json:"version"`
		Kind     string         `json:"kind"`
		Payload  map[string]any `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(res.runnerConn.sentMsg(0), &hello))
	assert.Equal(t, prp.Protocol, hello.Protocol)
	assert.Equal(t, 2, hello.Version)
	assert.Equal(t, prp.KindAuthHello, hello.Kind)
	assert.EqualValues(t, 1, hello.Payload["protocolMin"])
	assert.EqualValues(t, 2, hello.Payload["protocolMax"])
	assert.EqualValues(t, 1, hello.Payload["warmTransitionVersion"])
	assert.Equal(t, prp.CredentialBootstrap, hello.Payload["credentialKind"])
	assert.Contains(t, hello.Payload, "resume")
	assert.Len(t, hello.Payload["clientNonce"], 64)
	assert.Equal(t, 2, res.runner.Version)

	// The auth_response carries the selected version.
	var resp struct{ Version int }
	require.NoError(t, json.Unmarshal(res.runnerConn.sentMsg(1), &resp))
	assert.Equal(t, 2, resp.Version)

	t.Run("core selects 1", func(t *testing.T) {
		// A lease pinned to v1 makes the core select 1, as an older core does.
		ticket := "ticket-v1"
		store.AddTicket(ticket, time.Now().Add(5*time.Second))
		cred, err := store.Lookup(prp.CredentialID(ticket), time.Now())
		require.NoError(t, err)
		v1, err := store.Admit(cred, 1, time.Minute, time.Now())
		require.NoError(t, err)
		v1.ProtocolVersion = 0 // the runner does not know the pin yet
		c := newClient()
		c.Lease = &v1
		res := runBoth(t, c, newCore(store))
		require.NoError(t, res.runnerErr)
		require.NoError(t, res.coreErr)
		assert.Equal(t, 1, res.runner.Version)
		assert.Equal(t, 1, res.welcome.SelectedVersion)
		assert.Equal(t, 1, res.welcome.Lease.ProtocolVersion)
		exchangeControl(t, res.runner, res.core)

		// A lease never upgrades: holding the v2 pin, a v1 challenge fails.
		v1.ProtocolVersion = 2
		res = runBoth(t, c, newCore(store))
		require.ErrorIs(t, res.runnerErr, prp.ErrChallengeRejected)
	})

	t.Run("core refuses ranges without overlap", func(t *testing.T) {
		for _, r := range [][2]int{{3, 4}, {0, 0}, {2, 1}} {
			core := newCore(store)
			p := &prp.HelloPayload{ProtocolMin: r[0], ProtocolMax: r[1], Identity: testIdentity,
				RunnerVersion: testRunnerVersion, RunnerDigest: testRunnerDigest}
			_, err := core.checkHello(p, Credential{Kind: prp.CredentialBootstrap}, testIdentity)
			assert.ErrorIs(t, err, prp.ErrHelloRejected, "%v", r)
		}
		v, err := newCore(store).checkHello(&prp.HelloPayload{ProtocolMin: 1, ProtocolMax: 1, Identity: testIdentity,
			RunnerVersion: testRunnerVersion, RunnerDigest: testRunnerDigest}, Credential{Kind: prp.CredentialBootstrap}, testIdentity)
		require.NoError(t, err)
		assert.Equal(t, 1, v, "min(2, protocolMax)")
	})
}

// TestPRP09_SecureFrameRejections: a replayed counter, tampered
// ciphertext, bad hex or a plaintext envelope after authentication is
// rejected, in both directions, and the direction stays failed (spec §15
// scenario 9).
func TestPRP09_SecureFrameRejections(t *testing.T) {
	_, res := bootstrap(t)
	type pair struct {
		name           string
		sender, opener *prp.Session
	}
	for _, p := range []pair{{"core to runner", res.core, res.runner}, {"runner to core", res.runner, res.core}} {
		t.Run(p.name, func(t *testing.T) {
			frame, err := p.sender.Seal([]byte(`{"n":0}`))
			require.NoError(t, err)
			_, err = p.opener.Open(frame)
			require.NoError(t, err)

			next, err := p.sender.Seal([]byte(`{"n":1}`))
			require.NoError(t, err)
			var f struct {
				Counter    uint64 `json:"counter"`
				Ciphertext string `json:"ciphertext"`
			}
			require.NoError(t, json.Unmarshal(next, &f))
			ctr := []byte(fmt.Sprintf(`"counter":%d`, f.Counter))
			withCounter := func(c string) []byte { return bytes.Replace(next, ctr, []byte(`"counter":`+c), 1) }
			cases := []struct {
				name  string
				frame []byte
				want  error
			}{
				{"replayed counter", frame, prp.ErrFrameCounter},
				{"counter ahead", withCounter(fmt.Sprint(f.Counter + 1)), prp.ErrFrameCounter},
				{"tampered ciphertext", flipHexDigit(next, len(next)-5), prp.ErrFrameAuth},
				{"tampered tag only", flipHexDigit(next, len(next)-3), prp.ErrFrameAuth},
				{"uppercase hex", bytes.ToUpper(next), prp.ErrPlaintextFrame},
				{"bad hex digit", bytes.Replace(next, []byte(`"ciphertext":"`), []byte(`"ciphertext":"zz`), 1), prp.ErrFrameMalformed},
				{"odd hex", bytes.Replace(next, []byte(`"}`), []byte(`0"}`), 1), prp.ErrFrameMalformed},
				{"short ciphertext", []byte(fmt.Sprintf(`{"schema":%q,"counter":%d,"ciphertext":"00"}`, prp.SecureFrameSchema, f.Counter)), prp.ErrFrameMalformed},
				{"plaintext envelope", []byte(`{"protocol":"paperclip.runner","version":2,"kind":"ping","payload":{}}`), prp.ErrPlaintextFrame},
				{"not JSON", []byte(`ping`), prp.ErrFrameMalformed},
				{"counter as string", []byte(`{"schema":"paperclip.runner.secure-frame.v1","counter":"1","ciphertext":"00"}`), prp.ErrFrameMalformed},
				{"negative counter", withCounter("-1"), prp.ErrFrameMalformed},
				{"fractional counter", withCounter(fmt.Sprint(f.Counter) + ".0"), prp.ErrFrameMalformed},
				{"counter beyond 2^53-1", withCounter("9007199254740992"), prp.ErrFrameMalformed},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					// Each rejection is checked on a fresh copy of the
					// receiving state, since a failure poisons the direction.
					fresh := *p.opener
					_, err := fresh.Open(c.frame)
					require.ErrorIs(t, err, prp.ErrSecureFrame)
					assert.ErrorIs(t, err, c.want)
					_, err = fresh.Open(next)
					assert.ErrorIs(t, err, prp.ErrSecureFrame, "fail closed: the genuine next frame is refused too")
					assert.NotContains(t, err.Error(), string(next[len(next)-20:]), "no frame bytes in errors")
				})
			}
			// Semantics-preserving variants of the genuine frame are fine:
			// other key order, whitespace, unknown members.
			reordered := fmt.Sprintf(`{ "ciphertext" : %q, "counter" : %d, "extra": true, "schema": %q }`, f.Ciphertext, f.Counter, prp.SecureFrameSchema)
			pt, err := p.opener.Open([]byte(reordered))
			require.NoError(t, err)
			assert.Equal(t, `{"n":1}`, string(pt))
		})
	}
}

func flipHexDigit(frame []byte, i int) []byte {
	out := bytes.Clone(frame)
	if out[i] == '0' {
		out[i] = '1'
	} else {
		out[i] = '0'
	}
	return out
}

// TestPRP10_ControlIdentityMismatch: a control envelope whose identity,
// connection, lease or version differs is refused (spec §15 scenario 10).
func TestPRP10_ControlIdentityMismatch(t *testing.T) {
	_, res := bootstrap(t)
	mutations := map[string]func(*prp.Envelope){
		"runId":             func(e *prp.Envelope) { e.RunID = "run_other" },
		"runnerInstanceId":  func(e *prp.Envelope) { e.RunnerInstanceID = "runner_other" },
		"turnId":            func(e *prp.Envelope) { e.TurnID = "" },
		"connectionId":      func(e *prp.Envelope) { e.ConnectionID = "connection_9" },
		"connectionLeaseId": func(e *prp.Envelope) { e.ConnectionLeaseID = "connection_lease_other" },
		"version":           func(e *prp.Envelope) { e.Version = 1 },
		"protocol":          func(e *prp.Envelope) { e.Protocol = "paperclip.other" },
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			env, err := res.core.NewControl(prp.KindAck, prp.AckPayload{AckedSourceSeq: 1})
			require.NoError(t, err)
			mutate(env)
			frame, err := res.core.SealEnvelope(env)
			require.NoError(t, err)
			got, err := res.runner.OpenEnvelope(frame)
			if err != nil {
				require.ErrorIs(t, err, prp.ErrMalformedEnvelope) // protocol checked at decode
				return
			}
			assert.ErrorIs(t, prp.ValidateControlIdentity(got, res.runner), prp.ErrControlIdentity)
		})
	}
	t.Run("runner kind from the core", func(t *testing.T) {
		env, err := res.core.NewControl(prp.KindEvent, map[string]any{})
		require.NoError(t, err)
		assert.ErrorIs(t, prp.ValidateControlIdentity(env, res.runner), prp.ErrMalformedEnvelope)
	})
	t.Run("core side: lease_renew needs the full binding", func(t *testing.T) {
		env, err := res.runner.NewControl(prp.KindLeaseRenew, prp.LeaseRenewPayload{ConnectionLeaseExpiresAtUnixMs: 1})
		require.NoError(t, err)
		require.NoError(t, prp.ValidateRunnerEnvelope(env, res.core))
		env.ConnectionID = ""
		assert.ErrorIs(t, prp.ValidateRunnerEnvelope(env, res.core), prp.ErrControlIdentity)
		ev := prp.NewEventEnvelope(prp.KindEvent, res.runner.Version, testIdentity, json.RawMessage(`{}`))
		assert.NoError(t, prp.ValidateRunnerEnvelope(ev, res.core), "events carry no connection ids")
		ev.RunID = "run_other"
		assert.ErrorIs(t, prp.ValidateRunnerEnvelope(ev, res.core), prp.ErrControlIdentity)
	})
}

// fakeCore answers one auth_hello with a challenge built by the real core
// logic for token, then mutated, like a stray or broken listener peer.
func fakeCore(ctx context.Context, t *testing.T, c *memMsgConn, token string, mutate func(*prp.ChallengePayload), badProof bool) {
	msg, err := c.ReadMsg(ctx)
	if err != nil {
		return
	}
	hello, err := prp.ParseAuthHello(msg)
	if !assert.NoError(t, err) {
		return
	}
	key := prp.AuthKey(token)
	ch := prp.ChallengePayload{
		CredentialID: hello.CredentialID, CredentialKind: hello.CredentialKind, ClientNonce: hello.ClientNonce,
		ServerNonce: "6f1c2b7e-9d3a-4c5b-8e2f-1a0b9c8d7e6f", Identity: hello.Identity,
		RunnerVersion: hello.RunnerVersion, RunnerDigest: hello.RunnerDigest, SelectedVersion: 2,
		CredentialExpiresAt:       isoMillis(time.Now().Add(time.Minute).UnixMilli()),
		CredentialExpiresAtUnixMs: time.Now().Add(time.Minute).UnixMilli(),
	}
	if mutate != nil {
		mutate(&ch)
	}
	signing, err := prp.Canonical(ch)
	if !assert.NoError(t, err) {
		return
	}
	ch.ServerProof = prp.ServerProof(key[:], signing)
	if badProof {
		ch.ServerProof = prp.ServerProof(make([]byte, 32), signing)
	}
	_ = prp.WriteAuth(ctx, c, ch.SelectedVersion, prp.KindAuthChallenge, ch)
	// Then hang up, whatever the runner does.
	_, _ = c.ReadMsg(ctx)
	c.Close()
}

// TestPRP04_BogusChallengeKeepsTicket: a peer sending a bogus challenge
// is rejected before auth_response, so the ticket is not consumed; a later
// valid peer authenticates with the same ticket (spec §15 scenario 4, at
// the handshake level; the listener test covers the sockets).
func TestPRP04_BogusChallengeKeepsTicket(t *testing.T) {
	store := NewMemoryCredentialStore()
	ticket, err := store.IssueTicket(10*time.Second, time.Now())
	require.NoError(t, err)
	past := time.Now().Add(-time.Second).UnixMilli()
	leaseID := "connection_lease_x"
	other := "wt_other"
	bogus := map[string]struct {
		mutate   func(*prp.ChallengePayload)
		badProof bool
		want     error
	}{
		"wrong server proof":      {nil, true, prp.ErrServerProof},
		"wrong client nonce":      {func(c *prp.ChallengePayload) { c.ClientNonce = "00" }, false, prp.ErrChallengeRejected},
		"wrong credential id":     {func(c *prp.ChallengePayload) { c.CredentialID = prp.CredentialID("other") }, false, prp.ErrChallengeRejected},
		"wrong kind":              {func(c *prp.ChallengePayload) { c.CredentialKind = prp.CredentialLease }, false, prp.ErrChallengeRejected},
		"other run":               {func(c *prp.ChallengePayload) { c.RunID = "run_2" }, false, prp.ErrChallengeRejected},
		"other runner digest":     {func(c *prp.ChallengePayload) { c.RunnerDigest = "sha256:00" }, false, prp.ErrChallengeRejected},
		"empty server nonce":      {func(c *prp.ChallengePayload) { c.ServerNonce = "" }, false, prp.ErrChallengeRejected},
		"version 3":               {func(c *prp.ChallengePayload) { c.SelectedVersion = 3 }, false, prp.ErrChallengeRejected},
		"version 0":               {func(c *prp.ChallengePayload) { c.SelectedVersion = 0 }, false, prp.ErrChallengeRejected},
		"expired credential":      {func(c *prp.ChallengePayload) { c.CredentialExpiresAtUnixMs = past }, false, prp.ErrChallengeRejected},
		"lease id on a bootstrap": {func(c *prp.ChallengePayload) { c.CredentialLeaseID = &leaseID }, false, prp.ErrChallengeRejected},
		"epoch on a bootstrap":    {func(c *prp.ChallengePayload) { c.RevocationEpoch = 1 }, false, prp.ErrChallengeRejected},
		"unsolicited warm id":     {func(c *prp.ChallengePayload) { c.WarmTransitionID = &other }, false, prp.ErrChallengeRejected},
	}
	for name, b := range bogus {
		t.Run(name, func(t *testing.T) {
			rc, cc := newMemPipe()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			wg.Go(func() { fakeCore(ctx, t, cc, ticket, b.mutate, b.badProof) })
			c := newClient()
			c.Ticket = ticket
			_, _, err := c.Run(ctx, rc)
			rc.Close()
			wg.Wait()
			require.ErrorIs(t, err, b.want)
			assert.NotErrorIs(t, err, prp.ErrTicketConsumed, "retryable with the same ticket")
			assert.Equal(t, []string{prp.KindAuthHello}, rc.sentKinds(), "no auth_response sent")
			assert.NotContains(t, err.Error(), ticket)
		})
	}
	assert.False(t, store.TicketUsed(ticket))

	c := newClient()
	c.Ticket = ticket
	res := runBoth(t, c, newCore(store))
	require.NoError(t, res.runnerErr)
	assert.NotEmpty(t, res.welcome.Lease.Token, "the same ticket still bootstraps")
}

// TestPRP05_FailClosedAfterAuthResponse: a disconnect after
// auth_response and before welcome is fatal for a bootstrap ticket; before
// auth_response it is retryable; for a lease it is retryable (spec §15
// scenario 5, §2.4).
func TestPRP05_FailClosedAfterAuthResponse(t *testing.T) {
	store := NewMemoryCredentialStore()
	dropAfter := func(t *testing.T, c *prp.ClientHandshake, reads int) error {
		rc, cc := newMemPipe()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		wg.Go(func() {
			// A real core that drops the TCP connection after `reads`
			// messages (the reference core drops rather than closing).
			core := newCore(store)
			_, _, _ = core.Run(ctx, &dropConn{memMsgConn: cc, reads: reads})
			cc.Close()
		})
		_, _, err := c.Run(ctx, rc)
		rc.Close()
		wg.Wait()
		return err
	}

	ticket, err := store.IssueTicket(10*time.Second, time.Now())
	require.NoError(t, err)
	c := newClient()
	c.Ticket = ticket

	err = dropAfter(t, c, 1) // after reading auth_hello, before the challenge
	require.Error(t, err)
	assert.NotErrorIs(t, err, prp.ErrTicketConsumed)

	err = dropAfter(t, c, 2) // after reading auth_response, before welcome
	require.ErrorIs(t, err, prp.ErrTicketConsumed)
	assert.Contains(t, err.Error(), "bootstrap connection failed closed; provide a fresh one-use ticket")
	assert.NotContains(t, err.Error(), ticket)
	assert.True(t, store.TicketUsed(ticket), "the core did consume it")

	// A lease credential is never fail-closed.
	store2, res := bootstrap(t)
	lease := res.welcome.Lease
	store = store2
	c = newClient()
	c.Lease = &lease
	err = dropAfter(t, c, 2)
	require.Error(t, err)
	assert.NotErrorIs(t, err, prp.ErrTicketConsumed)
	assert.NotContains(t, err.Error(), lease.Token)
}

// dropConn lets the core read `reads` messages, then drops the connection
// instead of writing (the welcome or the challenge never arrives).
type dropConn struct {
	*memMsgConn
	reads int
	n     int
}

func (d *dropConn) ReadMsg(ctx context.Context) ([]byte, error) {
	m, err := d.memMsgConn.ReadMsg(ctx)
	d.n++
	return m, err
}

func (d *dropConn) WriteMsg(ctx context.Context, b []byte) error {
	if d.n >= d.reads {
		d.memMsgConn.Close()
		return io.ErrClosedPipe
	}
	return d.memMsgConn.WriteMsg(ctx, b)
}

// TestPRP06_AuthIONearDeadline: handshake I/O never runs past the
// caller's deadline, and each message is bounded by AuthMessageTimeout even
// without one (spec §15 scenario 6; simulated time).
func TestPRP06_AuthIONearDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rc, cc := newMemPipe()
		defer rc.Close()
		_ = cc // a silent peer
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		c := newClient()
		c.Ticket = "ticket"
		start := time.Now()
		_, _, err := c.Run(ctx, rc)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 300*time.Millisecond, time.Since(start))

		start = time.Now()
		_, _, err = c.Run(context.Background(), rc)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, prp.AuthMessageTimeout, time.Since(start))
	})
	synctest.Test(t, func(t *testing.T) {
		// The core's challenge expires after authChallengeTTL.
		store := NewMemoryCredentialStore()
		ticket, err := store.IssueTicket(time.Minute, time.Now())
		require.NoError(t, err)
		rc, cc := newMemPipe()
		defer rc.Close()
		var wg sync.WaitGroup
		var coreErr error
		wg.Go(func() { _, _, coreErr = newCore(store).Run(context.Background(), cc) })
		_ = prp.WriteAuth(context.Background(), rc, 2, prp.KindAuthHello, prp.HelloPayload{
			CredentialID: prp.CredentialID(ticket), ClientNonce: "n", ProtocolMin: 1, ProtocolMax: 2,
			Identity: testIdentity, RunnerVersion: testRunnerVersion, RunnerDigest: testRunnerDigest,
		})
		wg.Wait()
		require.ErrorIs(t, coreErr, context.DeadlineExceeded)
		assert.False(t, store.TicketUsed(ticket))
	})
}

// TestLeaseRenewalLostReply: after a lost lease_renewed the challenge and
// welcome carry a later expiry, accepted only while a renewal is
// outstanding (spec §5; scenario 21, handshake part).
func TestLeaseRenewalLostReply(t *testing.T) {
	store, res := bootstrap(t)
	lease := res.welcome.Lease
	renewed, err := store.renewLease(lease.ID, prp.LeaseRenewPayload{
		ConnectionLeaseExpiresAtUnixMs: lease.ExpiresAtUnixMs, ConnectionLeaseRevocationEpoch: 0,
	}, 2*time.Minute, time.Now())
	require.NoError(t, err)
	require.Greater(t, renewed.ConnectionLeaseExpiresAtUnixMs, lease.ExpiresAtUnixMs)

	c := newClient()
	held := lease
	c.Lease = &held
	r := runBoth(t, c, newCore(store))
	require.ErrorIs(t, r.runnerErr, prp.ErrChallengeRejected, "a later expiry without an outstanding renewal")

	c.RenewalOutstanding = true
	r = runBoth(t, c, newCore(store))
	require.NoError(t, r.runnerErr)
	assert.Equal(t, renewed.ConnectionLeaseExpiresAtUnixMs, r.welcome.Lease.ExpiresAtUnixMs)
	assert.Equal(t, lease.Token, r.welcome.Lease.Token)

	c.WarmTransitionID = "wt_1"
	r = runBoth(t, c, newCore(store))
	require.ErrorIs(t, r.runnerErr, prp.ErrChallengeRejected, "not during a warm transition")

	// A retried renewal with the older stated expiry replays the recorded one.
	again, err := store.renewLease(lease.ID, prp.LeaseRenewPayload{ConnectionLeaseExpiresAtUnixMs: lease.ExpiresAtUnixMs}, 2*time.Minute, time.Now().Add(time.Second))
	require.NoError(t, err)
	assert.Equal(t, renewed.ConnectionLeaseExpiresAtUnixMs, again.ConnectionLeaseExpiresAtUnixMs)
	assert.Equal(t, lease.ExpiresAtUnixMs, again.PreviousExpiresAtUnixMs)
	_, err = store.renewLease(lease.ID, prp.LeaseRenewPayload{ConnectionLeaseExpiresAtUnixMs: renewed.ConnectionLeaseExpiresAtUnixMs + 1}, time.Minute, time.Now())
	assert.ErrorIs(t, err, errLeaseRenewMismatch)
	_, err = store.renewLease(lease.ID, prp.LeaseRenewPayload{ConnectionLeaseExpiresAtUnixMs: renewed.ConnectionLeaseExpiresAtUnixMs, ConnectionLeaseRevocationEpoch: 3}, time.Minute, time.Now())
	assert.ErrorIs(t, err, errLeaseRenewMismatch)
}

// TestExpiredOrRevokedLease: an expired lease is not even offered; a revoked
// one is refused by the core (spec §5; scenarios 20 and 27, handshake part).
func TestExpiredOrRevokedLease(t *testing.T) {
	store, res := bootstrap(t)
	lease := res.welcome.Lease

	expired := lease
	expired.ExpiresAtUnixMs = time.Now().UnixMilli()
	c := newClient()
	c.Lease = &expired
	rc, _ := newMemPipe()
	_, _, err := c.Run(context.Background(), rc)
	require.ErrorIs(t, err, prp.ErrLeaseExpired)
	assert.Empty(t, rc.sentKinds(), "nothing sent")

	_, err = store.Revoke(lease.ID, 0)
	require.ErrorIs(t, err, prp.ErrRevokeEpoch)
	rev, err := store.Revoke(lease.ID, 1)
	require.NoError(t, err)
	assert.EqualValues(t, 1, rev.RevocationEpoch)
	_, ok := store.LeaseState(lease.ID, time.Now())
	assert.False(t, ok)
	c.Lease = &lease
	r := runBoth(t, c, newCore(store))
	require.ErrorIs(t, r.coreErr, errCredentialRejected)
	require.Error(t, r.runnerErr)
}

// TestPRP50_ChallengeWithHTMLCharacters: a challenge whose strings hold
// '<', '>' and '&' signs over the raw characters, as Node does, and both
// halves agree on it (spec §15 scenario 50).
func TestPRP50_ChallengeWithHTMLCharacters(t *testing.T) {
	store := NewMemoryCredentialStore()
	ticket := "ticket-<&>"
	store.AddTicket(ticket, time.Now().Add(5*time.Second))
	c := newClient()
	c.Ticket = ticket
	c.RunnerVersion = "1.0.0-<rc>&x\u2028"
	core := newCore(store)
	core.RunnerVersion = c.RunnerVersion
	res := runBoth(t, c, core)
	require.NoError(t, res.runnerErr)
	require.NoError(t, res.coreErr)

	ch, signing := decodeChallenge(t, res.coreConn.sentMsg(0))
	assert.Contains(t, string(signing), `"runnerVersion":"1.0.0-<rc>&x`+"\u2028"+`"`)
	goJSON, err := json.Marshal(ch.RunnerVersion)
	require.NoError(t, err)
	assert.Contains(t, string(goJSON), `\u003c`, "encoding/json would have escaped it")
}

// TestClientProofRejected: a wrong client proof is refused and the ticket
// stays unused.
func TestClientProofRejected(t *testing.T) {
	store := NewMemoryCredentialStore()
	ticket, err := store.IssueTicket(5*time.Second, time.Now())
	require.NoError(t, err)
	rc, cc := newMemPipe()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var coreErr error
	wg.Go(func() { _, _, coreErr = newCore(store).Run(ctx, cc); cc.Close() })
	require.NoError(t, prp.WriteAuth(ctx, rc, 2, prp.KindAuthHello, prp.HelloPayload{
		CredentialID: prp.CredentialID(ticket), ClientNonce: "n", ProtocolMin: 1, ProtocolMax: 2,
		Identity: testIdentity, RunnerVersion: testRunnerVersion, RunnerDigest: testRunnerDigest,
	}))
	msg, err := rc.ReadMsg(ctx)
	require.NoError(t, err)
	ch, _ := decodeChallenge(t, msg)
	require.NoError(t, prp.WriteAuth(ctx, rc, 2, prp.KindAuthResponse, prp.AuthResponsePayload{
		CredentialID: ch.CredentialID, ClientNonce: "n", ServerNonce: ch.ServerNonce,
		ClientProof: strings.Repeat("0", 64),
	}))
	wg.Wait()
	require.ErrorIs(t, coreErr, prp.ErrClientProof)
	assert.False(t, store.TicketUsed(ticket))
}

// TestSecretsStayOutOfLogs: the lease token never appears when a lease or a
// welcome is printed or logged.
func TestSecretsStayOutOfLogs(t *testing.T) {
	_, res := bootstrap(t)
	l := res.welcome.Lease
	require.NotEmpty(t, l.Token)
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("lease", "lease", l, "welcome", res.welcome)
	for _, s := range []string{
		fmt.Sprint(l), fmt.Sprintf("%v %+v %#v %s", l, l, l, l), fmt.Sprintf("%v %+v", *res.welcome, *res.welcome),
		logs.String(),
	} {
		assert.NotContains(t, s, l.Token)
	}
	assert.Contains(t, l.String(), "[redacted]")
}

func TestHandshakeErrorsAreTyped(t *testing.T) {
	// Unsupported core kinds and malformed envelopes are one sentinel.
	_, err := prp.DecodeEnvelope([]byte(`{"protocol":"paperclip.runner","kind":"ack","payload":[]}`))
	assert.ErrorIs(t, err, prp.ErrMalformedEnvelope)
	_, err = prp.DecodeEnvelope([]byte(`{"protocol":"paperclip.runner","kind":"ack"}`))
	assert.ErrorIs(t, err, prp.ErrMalformedEnvelope)
	assert.True(t, errors.Is(prp.ErrFrameAuth, prp.ErrSecureFrame))
}

// TestCoreRefusesHello: the core half refuses a hello that does not match
// the registration, and a refused admission leaves the ticket unused.
func TestCoreRefusesHello(t *testing.T) {
	store := NewMemoryCredentialStore()
	ticket, err := store.IssueTicket(10*time.Second, time.Now())
	require.NoError(t, err)
	cases := map[string]func(c *prp.ClientHandshake, core *Handshake){
		"other identity": func(c *prp.ClientHandshake, _ *Handshake) { c.Identity.ItemID = "item_2" },
		"other digest":   func(c *prp.ClientHandshake, _ *Handshake) { c.RunnerDigest = "sha256:bb" },
		"other version":  func(c *prp.ClientHandshake, _ *Handshake) { c.RunnerVersion = "0.9" },
		"unknown ticket": func(c *prp.ClientHandshake, _ *Handshake) { c.Ticket = "bootstrap_unknown" },
		"admission denied": func(_ *prp.ClientHandshake, core *Handshake) {
			core.BeforeAdmit = func(context.Context, *prp.HelloPayload) error { return errors.New("busy") }
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient()
			c.Ticket = ticket
			core := newCore(store)
			mutate(c, core)
			res := runBoth(t, c, core)
			require.Error(t, res.coreErr)
			require.Error(t, res.runnerErr)
			assert.False(t, store.TicketUsed(ticket))
		})
	}
	c := newClient()
	c.Ticket = ticket
	core := newCore(store)
	var admitted *prp.HelloPayload
	core.BeforeAdmit = func(_ context.Context, h *prp.HelloPayload) error { admitted = h; return nil }
	res := runBoth(t, c, core)
	require.NoError(t, res.runnerErr)
	require.NotNil(t, admitted)
	assert.Equal(t, testIdentity, admitted.Identity)
	require.NotNil(t, admitted.Resume)
}

// mutateConn corrupts the nth message written through it.
type mutateConn struct {
	prp.MsgConn
	n      int
	writes int
	mutate func([]byte) []byte
}

func (m *mutateConn) WriteMsg(ctx context.Context, b []byte) error {
	m.writes++
	if m.writes == m.n {
		b = m.mutate(b)
	}
	return m.MsgConn.WriteMsg(ctx, b)
}

// TestTamperedWelcomeFailsClosed: a welcome that does not open ends a
// bootstrap attempt fail-closed (the ticket is spent at the core).
func TestTamperedWelcomeFailsClosed(t *testing.T) {
	store := NewMemoryCredentialStore()
	ticket, err := store.IssueTicket(5*time.Second, time.Now())
	require.NoError(t, err)
	rc, cc := newMemPipe()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		mc := &mutateConn{MsgConn: cc, n: 2, mutate: func(b []byte) []byte { return flipHexDigit(b, len(b)-4) }}
		_, _, _ = newCore(store).Run(ctx, mc)
	})
	c := newClient()
	c.Ticket = ticket
	_, _, err = c.Run(ctx, rc)
	wg.Wait()
	require.ErrorIs(t, err, prp.ErrTicketConsumed)
	require.ErrorIs(t, err, prp.ErrFrameAuth)
	assert.True(t, store.TicketUsed(ticket))
}
