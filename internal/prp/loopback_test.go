package prp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// dialTarget serves core (a control.Core, or a wireTap around one) on a real loopback HTTP server and returns a Dialer to it.
func dialTarget(t *testing.T, core http.Handler) *prp.Dialer { return dialTargetB(t, core) }

func dialTargetB(t testing.TB, core http.Handler) *prp.Dialer {
	t.Helper()
	srv := httptest.NewServer(core)
	t.Cleanup(srv.Close)
	url := "ws://" + strings.TrimPrefix(srv.URL, "http://") + prp.ConnectPath(runnerIdentity.RunID)
	d, err := prp.NewDialer(context.Background(), prp.DialerConfig{URL: url})
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
	cfg := prp.ClientConfig{Dialer: dialTarget(t, core), Ticket: ticket}
	u.hooks(&cfg)
	client, done := startClient(t, ctx, cfg)

	// Scenario 7: the bootstrap welcome delivers the lease; the ticket is spent.
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Connected }))
	u.waitFor(ctx, t, "welcome", func(u *runnerUser) bool { return len(u.welcomes) == 1 })
	lease, ok := client.Lease()
	require.True(t, ok)
	require.NotEmpty(t, lease.Token)
	require.Equal(t, core.Snapshot().Lease.ID, lease.ID)
	require.True(t, core.Store().TicketUsed(ticket))
	require.NotContains(t, lease.String(), lease.Token)

	// A command reaches OnControl; its result reaches the core.
	cmd, err := core.QueueCommand(prp.Command{Type: "session.open", Payload: []byte(`{"reuse":"same_session"}`)})
	require.NoError(t, err)
	u.waitFor(ctx, t, "command", func(u *runnerUser) bool { return len(u.controls) == 1 })
	got := u.controls[0]
	require.Equal(t, prp.KindCommand, got.Kind)
	require.NoError(t, client.Send(ctx, resultEnvelope(t, got)))
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Results[cmd.CommandID] != nil }))

	// Events are committed in order and ACKed cumulatively (one ACK may
	// cover a burst); a duplicate is re-ACKed.
	for seq := int64(1); seq <= 3; seq++ {
		require.NoError(t, client.Send(ctx, eventEnvelope(t, seq)))
	}
	require.NoError(t, client.Send(ctx, eventEnvelope(t, 2)))
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.AckedSourceSeq == 3 }))
	lastAck := func(u *runnerUser) int64 {
		var p prp.AckPayload
		if e := u.controls[len(u.controls)-1]; e.Kind == prp.KindAck {
			_ = e.DecodePayload(&p)
		}
		return p.AckedSourceSeq
	}
	u.waitFor(ctx, t, "ack of 3", func(u *runnerUser) bool { return lastAck(u) == 3 })
	for _, k := range u.kinds()[1:] {
		require.Equal(t, prp.KindAck, k)
	}

	// PRP ping → pong from the Pong hook.
	require.NoError(t, core.Ping(ctx))
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Pongs == 1 }))
	for _, k := range u.kinds() {
		require.Contains(t, []string{prp.KindCommand, prp.KindAck}, k, "ping, lease_renewed and revoke never reach OnControl")
	}

	// Scenario 8: a dropped connection comes back with the lease; no token in that welcome.
	core.DropCurrent()
	u.waitFor(ctx, t, "reconnect", func(u *runnerUser) bool { return len(u.welcomes) == 2 && len(u.lost) == 1 })
	require.True(t, u.welcomes[1].Lease.ID == lease.ID && !u.welcomes[1].Bootstrapped)
	require.EqualValues(t, 3, u.welcomes[1].AckedSourceSeq)
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Authentications == 2 && s.Connected }))

	// Scenario 19: revoke with a higher epoch ends Run with ErrRevoked.
	require.NoError(t, core.Revoke(1))
	select {
	case err := <-done:
		require.ErrorIs(t, err, prp.ErrRevoked)
		var rev *prp.RevokedError
		require.ErrorAs(t, err, &rev, "the revoke's epoch reaches the runner")
		require.EqualValues(t, 1, rev.Epoch)
		require.EqualValues(t, lease.RevocationEpoch, rev.LeaseEpoch)
	case <-ctx.Done():
		t.Fatal("client did not stop on revoke")
	}
}
