package prp

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

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
	require.ErrorIs(t, c.applyRenewed(renewed(60_000, 90_000, 0)), errLeaseRenewed, "nothing outstanding")
	c.renewPending = &LeaseRenewPayload{ConnectionLeaseExpiresAtUnixMs: 60_000}
	require.ErrorIs(t, c.applyRenewed(renewed(60_000, 90_000, 7)), errLeaseRenewed, "other epoch")
	require.NoError(t, c.applyRenewed(renewed(60_000, 90_000, 0)))
	l, _ := c.Lease()
	require.EqualValues(t, 90_000, l.ExpiresAtUnixMs)
	require.Nil(t, c.renewPending)
	require.NoError(t, c.applyRenewed(renewed(60_000, 90_000, 0)), "duplicate reply to a resent request")
	l, _ = c.Lease()
	require.EqualValues(t, 90_000, l.ExpiresAtUnixMs)
	require.ErrorIs(t, c.applyRenewed(renewed(60_000, 120_000, 0)), errLeaseRenewed, "unsolicited extension")
}
