package prp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// strayPeer dials the runner's listener, reads auth_hello and answers with a
// well-formed challenge whose server proof is wrong: a peer without the key.
func strayPeer(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	c, _, err := websocket.Dial(ctx, url, nil)
	require.NoError(t, err)
	defer c.CloseNow()
	_, b, err := c.Read(ctx)
	require.NoError(t, err)
	var hello struct {
		Payload HelloPayload `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(b, &hello))
	h := hello.Payload
	ch := ChallengePayload{
		CredentialID: h.CredentialID, CredentialKind: h.CredentialKind, ClientNonce: h.ClientNonce,
		ServerNonce: "stray", Identity: h.Identity, RunnerVersion: h.RunnerVersion, RunnerDigest: h.RunnerDigest,
		SelectedVersion: 2, CredentialExpiresAt: "2099-01-01T00:00:00.000Z", CredentialExpiresAtUnixMs: 4070908800000,
		ServerProof: strings.Repeat("00", 32),
	}
	if h.CredentialKind == CredentialLease {
		_ = ch // a lease challenge needs the held lease id; the proof check would fail anyway
	}
	msg, err := jsonenc.Marshal(map[string]any{"protocol": Protocol, "version": 2, "kind": KindAuthChallenge, "payload": ch})
	require.NoError(t, err)
	require.NoError(t, c.Write(ctx, websocket.MessageText, msg))
	// The runner must not answer with auth_response: it drops the socket.
	_, b, err = c.Read(ctx)
	require.Error(t, err, "runner answered a stray challenge: %s", kindOf(b))
}

// TestPRP04_45_25_ListenModeStrayAndNewestWins ports prp.md §15
// scenarios 4 (a bogus peer is rejected without consuming the ticket; a
// later valid peer authenticates with the same ticket), 45 (with a live
// connection a stray peer changes nothing; a peer authenticating with the
// current lease becomes current and the old connection closes) and 25 (the
// core keeps only the newest authenticated connection).
func TestPRP04_45_25_ListenModeStrayAndNewestWins(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := Listen(ListenConfig{Address: "127.0.0.1", Port: 0, Path: ConnectPath(runnerIdentity.RunID)})
	require.NoError(t, err)
	defer ln.Close()
	url := "ws://" + ln.Addr().String() + ln.Path()
	core := newTestCore(nil)
	defer core.Close()
	ticket, err := core.MintTicket()
	require.NoError(t, err)
	u := newRunnerUser()
	cfg := ClientConfig{Listener: ln, Ticket: ticket}
	u.hooks(&cfg)
	client, done := startClient(t, ctx, cfg)

	strayPeer(t, ctx, url)
	require.False(t, core.Store().TicketUsed(ticket), "a stray peer must not consume the ticket")
	require.NoError(t, core.Connect(ctx, url))
	u.waitFor(ctx, t, "bootstrap", func(u *runnerUser) bool { return len(u.welcomes) == 1 })
	require.True(t, core.Store().TicketUsed(ticket))
	lease, ok := client.Lease()
	require.True(t, ok)
	require.NotEmpty(t, lease.Token, "lease token learned")
	first := core.Snapshot().ConnectionID

	// Scenario 45: a stray peer while connected leaves the connection alone.
	strayPeer(t, ctx, url)
	require.NoError(t, core.Ping(ctx))
	require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.Pongs == 1 }))
	require.Empty(t, u.lost)

	// A peer with the current lease supersedes: newest wins on both sides.
	require.NoError(t, core.Connect(ctx, url))
	u.waitFor(ctx, t, "second welcome", func(u *runnerUser) bool { return len(u.welcomes) == 2 })
	require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool {
		return s.Connected && s.ConnectionID != first && s.Authentications == 2
	}))
	require.Equal(t, lease.ID, u.welcomes[1].Lease.ID)
	require.NoError(t, core.Ping(ctx))
	require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.Pongs == 2 }))
	// The superseded connection is dropped after the new one is current:
	// wait for it, bounded, and never fail while holding core.mu (the
	// deferred Close needs it).
	conns := func() int { core.mu.Lock(); defer core.mu.Unlock(); return len(core.conns) }
	for conns() != 1 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, 1, conns(), "core keeps only the newest connection")

	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// failClosedProxy runs the real core handshake but drops the socket right
// after auth_response arrives, before the welcome.
type dropBeforeWelcome struct {
	MsgConn
	writes int
}

func (d *dropBeforeWelcome) WriteMsg(ctx context.Context, b []byte) error {
	d.writes++
	if d.writes == 2 { // challenge, then welcome
		return errors.New("dropped before welcome")
	}
	return d.MsgConn.WriteMsg(ctx, b)
}

// TestPRP05_DialBootstrapFailures ports prp.md §15 scenario 5: a
// failure before auth_response is retryable with the same ticket
// (dial_bootstrap_failure_before_auth_response_is_retryable); a disconnect
// after auth_response and before welcome fails closed
// (dial_bootstrap_failure_after_auth_response_is_fail_closed).
func TestPRP05_DialBootstrapFailures(t *testing.T) {
	t.Run("before auth_response retryable", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		core := newTestCore(nil)
		defer core.Close()
		ticket, err := core.MintTicket()
		require.NoError(t, err)
		var mu sync.Mutex
		attempts := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			attempts++
			n := attempts
			mu.Unlock()
			if n == 1 { // first attempt: a bogus challenge
				c, err := websocket.Accept(w, r, nil)
				if err != nil {
					return
				}
				defer c.CloseNow()
				_, _, _ = c.Read(r.Context())
				_ = c.Write(r.Context(), websocket.MessageText, []byte(`{"protocol":"paperclip.runner","version":2,"kind":"auth_challenge","payload":{}}`))
				_, _, _ = c.Read(r.Context())
				return
			}
			core.ServeHTTP(w, r)
		}))
		defer srv.Close()
		d, err := NewDialer(ctx, DialerConfig{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + ConnectPath(runnerIdentity.RunID)})
		require.NoError(t, err)
		u := newRunnerUser()
		cfg := ClientConfig{Dialer: d, Ticket: ticket}
		u.hooks(&cfg)
		_, done := startClient(t, ctx, cfg)
		u.waitFor(ctx, t, "welcome", func(u *runnerUser) bool { return len(u.welcomes) == 1 })
		mu.Lock()
		require.Equal(t, 2, attempts)
		mu.Unlock()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
	t.Run("after auth_response fail closed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		store := NewMemoryCredentialStore()
		ticket, err := store.IssueTicket(DefaultTicketTTL, time.Now())
		require.NoError(t, err)
		var mu sync.Mutex
		attempts := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			attempts++
			mu.Unlock()
			act := newActivity()
			c, err := websocket.Accept(w, r, acceptOptions(act))
			if err != nil {
				return
			}
			defer c.CloseNow()
			h := CoreHandshake{Identity: runnerIdentity, RunnerVersion: runnerVer, RunnerDigest: runnerDig, Store: store}
			_, _, _ = h.Run(r.Context(), &dropBeforeWelcome{MsgConn: newWSConn(c, act, DefaultMaxFrameBytes)})
		}))
		defer srv.Close()
		d, err := NewDialer(ctx, DialerConfig{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + ConnectPath(runnerIdentity.RunID)})
		require.NoError(t, err)
		_, done := startClient(t, ctx, ClientConfig{Dialer: d, Ticket: ticket})
		err = <-done
		require.ErrorIs(t, err, ErrTicketConsumed)
		require.Contains(t, err.Error(), "provide a fresh one-use ticket")
		require.NotContains(t, err.Error(), ticket)
		mu.Lock()
		require.Equal(t, 1, attempts, "never retried with a possibly consumed ticket")
		mu.Unlock()
	})
}

// connected starts a core on loopback and a dial-mode client authenticated to it.
func connected(t *testing.T, ctx context.Context, modCore func(*CoreConfig), modClient func(*ClientConfig)) (*Core, *Client, *runnerUser, <-chan error) {
	t.Helper()
	core := newTestCore(modCore)
	t.Cleanup(core.Close)
	ticket, err := core.MintTicket()
	require.NoError(t, err)
	u := newRunnerUser()
	cfg := ClientConfig{Dialer: dialTarget(t, core), Ticket: ticket}
	u.hooks(&cfg)
	if modClient != nil {
		modClient(&cfg)
	}
	client, done := startClient(t, ctx, cfg)
	u.waitFor(ctx, t, "welcome", func(u *runnerUser) bool { return len(u.welcomes) == 1 })
	require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.Connected }))
	return core, client, u, done
}

// TestPRP10_ControlIdentityMismatch ports prp.md §15 scenario 10: a
// control frame with another runId closes the connection; the runner
// reconnects with its lease. Scenario 9's plaintext-after-auth case rides along.
func TestPRP10_ControlIdentityMismatchOnTheWire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	core, _, u, done := connected(t, ctx, nil, nil)
	require.NoError(t, core.SendRaw(ctx, func(s *Session) ([]byte, error) {
		env, err := s.NewControl(KindPing, struct{}{})
		if err != nil {
			return nil, err
		}
		env.RunID = "run_other"
		return MarshalEnvelope(env)
	}))
	u.waitFor(ctx, t, "drop and lease reconnect", func(u *runnerUser) bool { return len(u.lost) == 1 && len(u.welcomes) == 2 })
	require.ErrorIs(t, u.lost[0], ErrControlIdentity)
	require.False(t, u.welcomes[1].Bootstrapped)
	require.Empty(t, u.controls, "the mismatched frame never reached the user")

	// Scenario 9: plaintext after authentication ends the connection.
	require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.Connected && s.Authentications == 2 }))
	cur := core.cur()
	require.NoError(t, cur.l.l.ws.WriteMsg(ctx, []byte(`{"protocol":"paperclip.runner","version":2,"kind":"ping","payload":{}}`)))
	u.waitFor(ctx, t, "drop after plaintext", func(u *runnerUser) bool { return len(u.lost) == 2 })
	require.ErrorIs(t, u.lost[1], ErrSecureFrame)
	cancel()
	<-done
}

// TestPRP09_ReplayAndTamperOnTheWire ports prp.md §15 scenario 9 over a
// real socket: a replayed frame and a tampered one each end the connection.
func TestPRP09_ReplayAndTamperOnTheWire(t *testing.T) {
	for name, mutate := range map[string]func(frame []byte) [][]byte{
		"replayed counter": func(f []byte) [][]byte { return [][]byte{f, f} },
		"tampered ciphertext": func(f []byte) [][]byte {
			g := []byte(string(f))
			i := strings.LastIndex(string(g), `"`) - 1
			if g[i] == '0' {
				g[i] = '1'
			} else {
				g[i] = '0'
			}
			return [][]byte{g}
		},
		"bad hex": func(f []byte) [][]byte {
			return [][]byte{[]byte(strings.Replace(string(f), `"ciphertext":"`, `"ciphertext":"zz`, 1))}
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			core, _, u, done := connected(t, ctx, nil, nil)
			require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.Connected }))
			cur := core.cur()
			// Seal out of band on the core's session: the writer is idle, and
			// the link is not used again after this frame.
			env, err := cur.sess.NewControl(KindPing, struct{}{})
			require.NoError(t, err)
			frame, err := cur.sess.SealEnvelope(env)
			require.NoError(t, err)
			for _, f := range mutate(frame) {
				_ = cur.l.l.ws.WriteMsg(ctx, f)
			}
			u.waitFor(ctx, t, "drop", func(u *runnerUser) bool { return len(u.lost) >= 1 })
			require.ErrorIs(t, u.lost[0], ErrSecureFrame)
			cancel()
			<-done
		})
	}
}

// TestPRP19_RevokeEpochMustAdvance: a revoke that does not advance the
// epoch is a fatal protocol error (prp.md §5, scenario 19).
func TestPRP19_RevokeEpochMustAdvance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	core, _, _, done := connected(t, ctx, nil, nil)
	require.NoError(t, core.SendRaw(ctx, func(s *Session) ([]byte, error) {
		env, err := s.NewControl(KindRevoke, RevokePayload{RevocationEpoch: 0})
		if err != nil {
			return nil, err
		}
		return MarshalEnvelope(env)
	}))
	require.ErrorIs(t, <-done, ErrRevokeEpoch)
}

// TestPRP27_CoreClosesOnRevokedLease ports prp.md §15 scenario 27: once
// the lease is revoked or expired, every later runner frame (lease_renew
// included) closes the connection on the core side.
func TestPRP27_CoreClosesOnRevokedLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	core, client, u, done := connected(t, ctx, nil, nil)
	require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.Connected }))
	lease, _ := client.Lease()
	_, err := core.Store().Revoke(lease.ID, 5) // revoked in the store; the runner was not told
	require.NoError(t, err)
	require.NoError(t, client.Send(ctx, eventEnvelope(t, 1)))
	u.waitFor(ctx, t, "core closes", func(u *runnerUser) bool { return len(u.lost) == 1 })
	require.EqualValues(t, 0, core.Snapshot().AckedSourceSeq, "the event after revocation was not admitted")
	cancel()
	<-done
}

// TestPRP26_CoreEventAdmission ports prp.md §15 scenario 26's core
// rules: sourceSeq ≠ acked+1 closes; an identical duplicate is re-ACKed; a
// conflicting duplicate is source_event_replay_conflict.
func TestPRP26_CoreEventAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	core, client, u, done := connected(t, ctx, nil, nil)
	require.NoError(t, client.Send(ctx, eventEnvelope(t, 1)))
	u.waitFor(ctx, t, "ack", func(u *runnerUser) bool { return len(u.controls) == 1 })
	require.NoError(t, client.Send(ctx, eventEnvelope(t, 1)))
	u.waitFor(ctx, t, "re-ack of the duplicate", func(u *runnerUser) bool { return len(u.controls) == 2 })
	require.Equal(t, []string{"ack", "ack"}, u.kinds())

	conflict := strings.Replace(string(eventEnvelope(t, 1)), `"<&>"`, `"changed"`, 1)
	require.NoError(t, client.Send(ctx, []byte(conflict)))
	u.waitFor(ctx, t, "close on conflict", func(u *runnerUser) bool { return len(u.lost) == 1 })
	u.waitFor(ctx, t, "reconnect", func(u *runnerUser) bool { return len(u.welcomes) == 2 })
	require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.Connected && s.Authentications == 2 }))
	require.NoError(t, client.Send(ctx, eventEnvelope(t, 3))) // gap: acked is 1
	u.waitFor(ctx, t, "close on gap", func(u *runnerUser) bool { return len(u.lost) == 2 })
	require.EqualValues(t, 1, core.Snapshot().AckedSourceSeq)
	cancel()
	<-done
}
