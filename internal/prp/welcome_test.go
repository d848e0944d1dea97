package prp

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testIdentity, testRunnerVersion and testRunnerDigest are the registration
// the welcome checks expect (the handshake pair's tests use the same in
// package control).
var testIdentity = Identity{
	RunnerInstanceID: "runner_1", EnvironmentLeaseID: "env_lease_1", RunID: "run_1",
	NormalizedSessionID: "session_1", TurnID: "turn_1", ItemID: "item_1",
}

const (
	testRunnerVersion = "1.0.0"
	testRunnerDigest  = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
)

func newClient() *ClientHandshake {
	return &ClientHandshake{Identity: testIdentity, RunnerVersion: testRunnerVersion, RunnerDigest: testRunnerDigest}
}

// TestWelcomeChecks: every check of the welcome (spec §3.1, R-transport
// validate_welcome), applied to variants of a genuine welcome.
func TestWelcomeChecks(t *testing.T) {
	expiry := time.Now().Add(time.Minute).UnixMilli()
	genuine := func() map[string]any {
		return map[string]any{
			"protocol": Protocol, "version": 2, "envelopeId": "welcome_1", "kind": KindWelcome,
			"runnerInstanceId": testIdentity.RunnerInstanceID, "environmentLeaseId": testIdentity.EnvironmentLeaseID,
			"runId": testIdentity.RunID, "normalizedSessionId": testIdentity.NormalizedSessionID,
			"turnId": testIdentity.TurnID, "itemId": testIdentity.ItemID,
			"connectionId": "connection_1", "connectionLeaseId": "lease_a", "sentAt": "2026-01-01T00:00:00.000Z",
			"payload": map[string]any{
				"selectedVersion": 2, "heartbeatIntervalMs": 250, "connectionLeaseRenewalVersion": 1,
				"connectionLeaseId": "lease_a", "connectionLeaseToken": "lease_tok",
				"connectionLeaseExpiresAt": time.UnixMilli(expiry).UTC().Format("2006-01-02T15:04:05.000Z"), "connectionLeaseExpiresAtUnixMs": expiry,
				"connectionLeaseRevocationEpoch": 0,
				"leaseBinding": map[string]any{
					"runnerInstanceId": testIdentity.RunnerInstanceID, "environmentLeaseId": testIdentity.EnvironmentLeaseID,
					"runId": testIdentity.RunID, "normalizedSessionId": testIdentity.NormalizedSessionID, "protocolVersion": 2,
				},
				"maxFrameBytes": 4194304, "maxBatchEvents": 100, "ackedSourceSeq": 7,
				"pendingCommands": []any{map[string]any{"commandId": "command_prp_00000001"}},
			},
		}
	}
	ch := &challenge{ChallengePayload: ChallengePayload{SelectedVersion: 2, CredentialExpiresAtUnixMs: expiry}}
	c := newClient()
	check := func(m map[string]any, kind string) (*Welcome, error) {
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return c.checkWelcome(b, ch, kind)
	}
	w, err := check(genuine(), CredentialBootstrap)
	require.NoError(t, err)
	assert.Equal(t, "lease_tok", w.Lease.Token)
	assert.Equal(t, 4194304, w.MaxFrameBytes)
	assert.EqualValues(t, 7, w.AckedSourceSeq)
	assert.Len(t, w.PendingCommands, 1)

	payload := func(m map[string]any) map[string]any { return m["payload"].(map[string]any) }
	bad := map[string]func(m map[string]any){
		"kind":                 func(m map[string]any) { m["kind"] = KindCommand },
		"version":              func(m map[string]any) { m["version"] = 1 },
		"identity":             func(m map[string]any) { m["runId"] = "run_2" },
		"no connectionId":      func(m map[string]any) { delete(m, "connectionId") },
		"no payload":           func(m map[string]any) { delete(m, "payload") },
		"selectedVersion":      func(m map[string]any) { payload(m)["selectedVersion"] = 1 },
		"payload lease id":     func(m map[string]any) { payload(m)["connectionLeaseId"] = "lease_b" },
		"no expiry":            func(m map[string]any) { delete(payload(m), "connectionLeaseExpiresAtUnixMs") },
		"no epoch":             func(m map[string]any) { delete(payload(m), "connectionLeaseRevocationEpoch") },
		"expired lease":        func(m map[string]any) { payload(m)["connectionLeaseExpiresAtUnixMs"] = 1 },
		"no token":             func(m map[string]any) { delete(payload(m), "connectionLeaseToken") },
		"empty token":          func(m map[string]any) { payload(m)["connectionLeaseToken"] = "" },
		"binding run":          func(m map[string]any) { payload(m)["leaseBinding"].(map[string]any)["runId"] = "run_2" },
		"binding version":      func(m map[string]any) { payload(m)["leaseBinding"].(map[string]any)["protocolVersion"] = 1 },
		"command not object":   func(m map[string]any) { payload(m)["pendingCommands"] = []any{"x"} },
		"expiry is a string":   func(m map[string]any) { payload(m)["connectionLeaseExpiresAtUnixMs"] = "1" },
		"identity is a number": func(m map[string]any) { m["turnId"] = 1 },
	}
	for name, mutate := range bad {
		t.Run(name, func(t *testing.T) {
			m := genuine()
			mutate(m)
			_, err := check(m, CredentialBootstrap)
			require.ErrorIs(t, err, ErrWelcomeRejected)
			assert.NotContains(t, err.Error(), "lease_tok")
		})
	}

	t.Run("lease reconnect", func(t *testing.T) {
		held := Lease{ID: "lease_a", Token: "held", ExpiresAtUnixMs: expiry}
		c.Lease = &held
		m := genuine()
		delete(payload(m), "connectionLeaseToken")
		w, err := check(m, CredentialLease)
		require.NoError(t, err)
		assert.Empty(t, w.Lease.Token, "Run fills in the held token")
		payload(m)["connectionLeaseToken"] = nil
		_, err = check(m, CredentialLease)
		require.NoError(t, err, "null is absent")
		for name, mutate := range map[string]func(m map[string]any){
			"token": func(m map[string]any) { payload(m)["connectionLeaseToken"] = "new" },
			"other lease": func(m map[string]any) {
				m["connectionLeaseId"] = "lease_b"
				payload(m)["connectionLeaseId"] = "lease_b"
			},
			"other epoch":  func(m map[string]any) { payload(m)["connectionLeaseRevocationEpoch"] = 1 },
			"other expiry": func(m map[string]any) { payload(m)["connectionLeaseExpiresAtUnixMs"] = expiry + 1 },
		} {
			m := genuine()
			delete(payload(m), "connectionLeaseToken")
			mutate(m)
			_, err := check(m, CredentialLease)
			assert.ErrorIs(t, err, ErrWelcomeRejected, name)
		}
	})
}
