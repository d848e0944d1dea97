package prp_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
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
		Payload prp.HelloPayload `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(b, &hello))
	h := hello.Payload
	ch := prp.ChallengePayload{
		CredentialID: h.CredentialID, CredentialKind: h.CredentialKind, ClientNonce: h.ClientNonce,
		ServerNonce: "stray", Identity: h.Identity, RunnerVersion: h.RunnerVersion, RunnerDigest: h.RunnerDigest,
		SelectedVersion: 2, CredentialExpiresAt: "2099-01-01T00:00:00.000Z", CredentialExpiresAtUnixMs: 4070908800000,
		ServerProof: strings.Repeat("00", 32),
	}
	if h.CredentialKind == prp.CredentialLease {
		_ = ch // a lease challenge needs the held lease id; the proof check would fail anyway
	}
	msg, err := jsonenc.Marshal(map[string]any{"protocol": prp.Protocol, "version": 2, "kind": prp.KindAuthChallenge, "payload": ch})
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
	ln, err := prp.Listen(prp.ListenConfig{Address: "127.0.0.1", Port: 0, Path: prp.ConnectPath(runnerIdentity.RunID)})
	require.NoError(t, err)
	defer ln.Close()
	url := "ws://" + ln.Addr().String() + ln.Path()
	core := newTestCore(nil)
	defer core.Close()
	ticket, err := core.MintTicket()
	require.NoError(t, err)
	u := newRunnerUser()
	cfg := prp.ClientConfig{Listener: ln, Ticket: ticket}
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
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Pongs == 1 }))
	require.Empty(t, u.lost)

	// A peer with the current lease supersedes: newest wins on both sides.
	require.NoError(t, core.Connect(ctx, url))
	u.waitFor(ctx, t, "second welcome", func(u *runnerUser) bool { return len(u.welcomes) == 2 })
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool {
		return s.Connected && s.ConnectionID != first && s.Authentications == 2
	}))
	require.Equal(t, lease.ID, u.welcomes[1].Lease.ID)
	require.NoError(t, core.Ping(ctx))
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Pongs == 2 }))
	// The superseded connection is dropped after the new one is current:
	// wait for it, bounded by ctx.
	_ = core.Wait(ctx, func(s control.Snapshot) bool { return s.Connections == 1 })
	require.Equal(t, 1, core.Snapshot().Connections, "core keeps only the newest connection")

	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// failClosedProxy runs the real core handshake but drops the socket right
// after auth_response arrives, before the welcome.
type dropBeforeWelcome struct {
	prp.MsgConn
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
		d, err := prp.NewDialer(ctx, prp.DialerConfig{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + prp.ConnectPath(runnerIdentity.RunID)})
		require.NoError(t, err)
		u := newRunnerUser()
		cfg := prp.ClientConfig{Dialer: d, Ticket: ticket}
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
		store := control.NewMemoryCredentialStore()
		ticket, err := store.IssueTicket(control.DefaultTicketTTL, time.Now())
		require.NoError(t, err)
		var mu sync.Mutex
		attempts := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			attempts++
			mu.Unlock()
			c, err := prp.AcceptPeer(w, r)
			if err != nil {
				return
			}
			defer c.Close()
			h := control.Handshake{Identity: runnerIdentity, RunnerVersion: runnerVer, RunnerDigest: runnerDig, Store: store}
			_, _, _ = h.Run(r.Context(), &dropBeforeWelcome{MsgConn: c})
		}))
		defer srv.Close()
		d, err := prp.NewDialer(ctx, prp.DialerConfig{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + prp.ConnectPath(runnerIdentity.RunID)})
		require.NoError(t, err)
		_, done := startClient(t, ctx, prp.ClientConfig{Dialer: d, Ticket: ticket})
		err = <-done
		require.ErrorIs(t, err, prp.ErrTicketConsumed)
		require.Contains(t, err.Error(), "provide a fresh one-use ticket")
		require.NotContains(t, err.Error(), ticket)
		mu.Lock()
		require.Equal(t, 1, attempts, "never retried with a possibly consumed ticket")
		mu.Unlock()
	})
}

// connected starts a core on loopback and a dial-mode client authenticated to it.
func connected(t *testing.T, ctx context.Context, modCore func(*control.Config), modClient func(*prp.ClientConfig)) (*control.Core, *prp.Client, *runnerUser, <-chan error) {
	t.Helper()
	core, client, u, done, _ := connectedTap(t, ctx, modCore, modClient)
	return core, client, u, done
}

// connectedTap is connected with the core served through a wireTap.
func connectedTap(t *testing.T, ctx context.Context, modCore func(*control.Config), modClient func(*prp.ClientConfig)) (*control.Core, *prp.Client, *runnerUser, <-chan error, *wireTap) {
	t.Helper()
	core := newTestCore(modCore)
	t.Cleanup(core.Close)
	ticket, err := core.MintTicket()
	require.NoError(t, err)
	u := newRunnerUser()
	tap := &wireTap{h: core}
	cfg := prp.ClientConfig{Dialer: dialTarget(t, tap), Ticket: ticket}
	u.hooks(&cfg)
	if modClient != nil {
		modClient(&cfg)
	}
	client, done := startClient(t, ctx, cfg)
	u.waitFor(ctx, t, "welcome", func(u *runnerUser) bool { return len(u.welcomes) == 1 })
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Connected }))
	return core, client, u, done, tap
}

// wireTap serves h and keeps the server end of the newest upgraded
// connection, so that a test can put bytes on the wire in the core's place:
// a plaintext frame after authentication, a replayed or tampered one.
type wireTap struct {
	h http.Handler

	mu   sync.Mutex // guards conn
	conn *tapConn   // the newest hijacked connection
}

func (w *wireTap) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w.h.ServeHTTP(&tapWriter{ResponseWriter: rw, tap: w}, r)
}

// writeText writes one WebSocket text message carrying b to the runner on
// the newest connection, as the core's WebSocket would: an unmasked server
// frame, written whole under the connection's write lock, so it never
// lands inside a frame of the core's own.
func (w *wireTap) writeText(b []byte) error {
	w.mu.Lock()
	c := w.conn
	w.mu.Unlock()
	if c == nil {
		return errors.New("wire tap: no connection")
	}
	hdr := []byte{0x81} // FIN, text
	switch n := len(b); {
	case n <= 125:
		hdr = append(hdr, byte(n))
	case n <= 0xffff:
		hdr = binary.BigEndian.AppendUint16(append(hdr, 126), uint16(n))
	default:
		hdr = binary.BigEndian.AppendUint64(append(hdr, 127), uint64(n))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.Conn.Write(append(hdr, b...))
	return err
}

// tapWriter hands the upgrade a connection whose writes the tap can
// interleave with, frame by frame.
type tapWriter struct {
	http.ResponseWriter
	tap *wireTap
}

func (tw *tapWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := tw.ResponseWriter.(http.Hijacker).Hijack()
	if err != nil {
		return nil, nil, err
	}
	tc := &tapConn{Conn: c}
	tw.tap.mu.Lock()
	tw.tap.conn = tc
	tw.tap.mu.Unlock()
	return tc, bufio.NewReadWriter(brw.Reader, bufio.NewWriter(tc)), nil
}

type tapConn struct {
	net.Conn
	mu sync.Mutex // serialises Write: the WebSocket's frames and the tap's
}

func (c *tapConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.Write(b)
}

// TestPRP10_ControlIdentityMismatch ports prp.md §15 scenario 10: a
// control frame with another runId closes the connection; the runner
// reconnects with its lease. Scenario 9's plaintext-after-auth case rides along.
func TestPRP10_ControlIdentityMismatchOnTheWire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	core, _, u, done, tap := connectedTap(t, ctx, nil, nil)
	require.NoError(t, core.SendRaw(ctx, func(s *prp.Session) ([]byte, error) {
		env, err := s.NewControl(prp.KindPing, struct{}{})
		if err != nil {
			return nil, err
		}
		env.RunID = "run_other"
		return prp.MarshalEnvelope(env)
	}))
	u.waitFor(ctx, t, "drop and lease reconnect", func(u *runnerUser) bool { return len(u.lost) == 1 && len(u.welcomes) == 2 })
	require.ErrorIs(t, u.lost[0], prp.ErrControlIdentity)
	require.False(t, u.welcomes[1].Bootstrapped)
	require.Empty(t, u.controls, "the mismatched frame never reached the user")

	// Scenario 9: plaintext after authentication ends the connection.
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Connected && s.Authentications == 2 }))
	require.NoError(t, tap.writeText([]byte(`{"protocol":"paperclip.runner","version":2,"kind":"ping","payload":{}}`)))
	u.waitFor(ctx, t, "drop after plaintext", func(u *runnerUser) bool { return len(u.lost) == 2 })
	require.ErrorIs(t, u.lost[1], prp.ErrSecureFrame)
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
			core, _, u, done, tap := connectedTap(t, ctx, nil, nil)
			require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Connected }))
			// Seal out of band on the core's session: the writer is idle, and
			// the link is not used again after this frame. The build function
			// returns errSealed, so SendRaw sends nothing itself.
			errSealed := errors.New("sealed out of band")
			var frame []byte
			require.ErrorIs(t, core.SendRaw(ctx, func(s *prp.Session) ([]byte, error) {
				env, err := s.NewControl(prp.KindPing, struct{}{})
				if err != nil {
					return nil, err
				}
				if frame, err = s.SealEnvelope(env); err != nil {
					return nil, err
				}
				return nil, errSealed
			}), errSealed)
			for _, f := range mutate(frame) {
				_ = tap.writeText(f)
			}
			u.waitFor(ctx, t, "drop", func(u *runnerUser) bool { return len(u.lost) >= 1 })
			require.ErrorIs(t, u.lost[0], prp.ErrSecureFrame)
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
	require.NoError(t, core.SendRaw(ctx, func(s *prp.Session) ([]byte, error) {
		env, err := s.NewControl(prp.KindRevoke, prp.RevokePayload{RevocationEpoch: 0})
		if err != nil {
			return nil, err
		}
		return prp.MarshalEnvelope(env)
	}))
	require.ErrorIs(t, <-done, prp.ErrRevokeEpoch)
}

// TestPRP27_CoreClosesOnRevokedLease ports prp.md §15 scenario 27: once
// the lease is revoked or expired, every later runner frame (lease_renew
// included) closes the connection on the core side.
func TestPRP27_CoreClosesOnRevokedLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	core, client, u, done := connected(t, ctx, nil, nil)
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Connected }))
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
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Connected && s.Authentications == 2 }))
	require.NoError(t, client.Send(ctx, eventEnvelope(t, 3))) // gap: acked is 1
	u.waitFor(ctx, t, "close on gap", func(u *runnerUser) bool { return len(u.lost) == 2 })
	require.EqualValues(t, 1, core.Snapshot().AckedSourceSeq)
	cancel()
	<-done
}
