package prp

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// dialTarget serves core on a real loopback HTTP server and returns a Dialer to it.
func dialTarget(t *testing.T, core *Core) *Dialer { return dialTargetB(t, core) }

func dialTargetB(t testing.TB, core *Core) *Dialer {
	t.Helper()
	srv := httptest.NewServer(core)
	t.Cleanup(srv.Close)
	url := "ws://" + strings.TrimPrefix(srv.URL, "http://") + ConnectPath(runnerIdentity.RunID)
	d, err := NewDialer(context.Background(), DialerConfig{URL: url})
	require.NoError(t, err)
	return d
}

// TestClientCoreLoopback drives both halves over real loopback sockets:
// bootstrap (scenario 7), a command and its result, events and cumulative
// ACKs, PRP ping/pong, a dropped connection and a lease reconnect
// (scenario 8), and revoke with a higher epoch (scenario 19).
func TestClientCoreLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	core := newTestCore(nil)
	defer core.Close()
	ticket, err := core.MintTicket()
	require.NoError(t, err)
	u := newRunnerUser()
	cfg := ClientConfig{Dialer: dialTarget(t, core), Ticket: ticket}
	u.hooks(&cfg)
	client, done := startClient(t, ctx, cfg)

	// Scenario 7: the bootstrap welcome delivers the lease; the ticket is spent.
	require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.Connected }))
	u.waitFor(ctx, t, "welcome", func(u *runnerUser) bool { return len(u.welcomes) == 1 })
	lease, ok := client.Lease()
	require.True(t, ok)
	require.NotEmpty(t, lease.Token)
	require.Equal(t, core.Snapshot().Lease.ID, lease.ID)
	require.True(t, core.Store().TicketUsed(ticket))
	require.NotContains(t, lease.String(), lease.Token)

	// A command reaches OnControl; its result reaches the core.
	cmd, err := core.QueueCommand(Command{Type: "session.open", Payload: []byte(`{"reuse":"same_session"}`)})
	require.NoError(t, err)
	u.waitFor(ctx, t, "command", func(u *runnerUser) bool { return len(u.controls) == 1 })
	got := u.controls[0]
	require.Equal(t, KindCommand, got.Kind)
	require.NoError(t, client.Send(ctx, resultEnvelope(t, got)))
	require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.Results[cmd.CommandID] != nil }))

	// Events are committed in order and ACKed cumulatively (one ACK may
	// cover a burst); a duplicate is re-ACKed.
	for seq := int64(1); seq <= 3; seq++ {
		require.NoError(t, client.Send(ctx, eventEnvelope(t, seq)))
	}
	require.NoError(t, client.Send(ctx, eventEnvelope(t, 2)))
	require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.AckedSourceSeq == 3 }))
	lastAck := func(u *runnerUser) int64 {
		var p AckPayload
		if e := u.controls[len(u.controls)-1]; e.Kind == KindAck {
			_ = e.DecodePayload(&p)
		}
		return p.AckedSourceSeq
	}
	u.waitFor(ctx, t, "ack of 3", func(u *runnerUser) bool { return lastAck(u) == 3 })
	for _, k := range u.kinds()[1:] {
		require.Equal(t, KindAck, k)
	}

	// PRP ping → pong from the Pong hook.
	require.NoError(t, core.Ping(ctx))
	require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.Pongs == 1 }))
	for _, k := range u.kinds() {
		require.Contains(t, []string{KindCommand, KindAck}, k, "ping, lease_renewed and revoke never reach OnControl")
	}

	// Scenario 8: a dropped connection comes back with the lease; no token in that welcome.
	core.DropCurrent()
	u.waitFor(ctx, t, "reconnect", func(u *runnerUser) bool { return len(u.welcomes) == 2 && len(u.lost) == 1 })
	require.True(t, u.welcomes[1].Lease.ID == lease.ID && !u.welcomes[1].Bootstrapped)
	require.EqualValues(t, 3, u.welcomes[1].AckedSourceSeq)
	require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.Authentications == 2 && s.Connected }))

	// Scenario 19: revoke with a higher epoch ends Run with ErrRevoked.
	require.NoError(t, core.Revoke(1))
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrRevoked)
		var rev *RevokedError
		require.ErrorAs(t, err, &rev, "the revoke's epoch reaches the runner")
		require.EqualValues(t, 1, rev.Epoch)
		require.EqualValues(t, lease.RevocationEpoch, rev.LeaseEpoch)
	case <-ctx.Done():
		t.Fatal("client did not stop on revoke")
	}
}

// FuzzClientInspect feeds arbitrary decrypted frames to the runner's
// control-envelope check: it never panics, and anything it forwards is a
// valid envelope of this connection.
func FuzzClientInspect(f *testing.F) {
	sess := &Session{Version: ProtocolVersion, Identity: runnerIdentity, ConnectionID: "connection_1", ConnectionLeaseID: "lease_1"}
	good, err := sess.NewControl(KindCommand, map[string]any{"commandId": "c1"})
	require.NoError(f, err)
	gb, err := MarshalEnvelope(good)
	require.NoError(f, err)
	f.Add(gb)
	f.Add([]byte(`{"protocol":"paperclip.runner","version":2,"kind":"ping","payload":{}}`))
	f.Add([]byte(`{"kind":"revoke","payload":{"revocationEpoch":1}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, pt []byte) {
		c, err := NewClient(ClientConfig{Dialer: &Dialer{}, Lease: &Lease{ID: "lease_1", Token: "t", ExpiresAtUnixMs: 1 << 50}})
		require.NoError(t, err)
		act, env, err := c.inspect(sess, pt)
		if err != nil || act != FrameForward {
			return
		}
		require.NoError(t, ValidateControlIdentity(env, sess))
		again, err := DecodeEnvelope(pt)
		require.NoError(t, err)
		require.Equal(t, again, env, "the forwarded envelope is the frame's")
	})
}

// TestApplyLeaseRenewed: the reply to the outstanding request extends the
// lease; a second reply to a resent request is ignored; an unsolicited
// extension or another epoch is a fault.
func TestApplyLeaseRenewed(t *testing.T) {
	c, err := NewClient(ClientConfig{Dialer: &Dialer{}, Lease: &Lease{ID: "l", Token: "t", ExpiresAtUnixMs: 60_000, RenewalVersion: 1}})
	require.NoError(t, err)
	renewed := func(prev, next, epoch int64) *Envelope {
		b, err := jsonenc.Marshal(LeaseRenewedPayload{PreviousExpiresAtUnixMs: prev, ConnectionLeaseExpiresAtUnixMs: next, ConnectionLeaseRevocationEpoch: epoch})
		require.NoError(t, err)
		return &Envelope{Kind: KindLeaseRenewed, Payload: b}
	}
	require.ErrorIs(t, c.applyRenewed(renewed(60_000, 90_000, 0)), ErrLeaseRenewed, "nothing outstanding")
	c.renewPending = &LeaseRenewPayload{ConnectionLeaseExpiresAtUnixMs: 60_000}
	require.ErrorIs(t, c.applyRenewed(renewed(60_000, 90_000, 7)), ErrLeaseRenewed, "other epoch")
	require.NoError(t, c.applyRenewed(renewed(60_000, 90_000, 0)))
	l, _ := c.Lease()
	require.EqualValues(t, 90_000, l.ExpiresAtUnixMs)
	require.Nil(t, c.renewPending)
	require.NoError(t, c.applyRenewed(renewed(60_000, 90_000, 0)), "duplicate reply to a resent request")
	l, _ = c.Lease()
	require.EqualValues(t, 90_000, l.ExpiresAtUnixMs)
	require.ErrorIs(t, c.applyRenewed(renewed(60_000, 120_000, 0)), ErrLeaseRenewed, "unsolicited extension")
}
