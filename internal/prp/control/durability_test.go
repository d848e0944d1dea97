package control

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// payloadOf returns a handshake message's payload as raw members.
func payloadOf(t *testing.T, msg []byte) map[string]json.RawMessage {
	t.Helper()
	var env struct {
		Payload map[string]json.RawMessage `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(msg, &env))
	return env.Payload
}

// epochKeys are every member an epoch grant or resume may add to a
// challenge or a welcome (durability.md §1.1–§1.3).
var epochKeys = []string{"commandEpochs", "commandResume", "eventEpochs", "eventResume", "eventEpochLimit", "sourceEpoch"}

// ticketed returns a store holding one fresh ticket.
func ticketed(t *testing.T) (*MemoryCredentialStore, string) {
	t.Helper()
	store := NewMemoryCredentialStore()
	ticket, err := store.IssueTicket(10*time.Second, time.Now())
	require.NoError(t, err)
	return store, ticket
}

// TestDurability01_LegacyCoreNoEpochFields: durability.md §11 scenario 1:
// "Legacy core, no flags → hello has `durability` and `outputBodies`; core
// accepts; no epoch fields anywhere."
func TestDurability01_LegacyCoreNoEpochFields(t *testing.T) {
	store, ticket := ticketed(t)
	c := newClient()
	c.Ticket = ticket
	res := runBoth(t, c, newCore(store))
	require.NoError(t, res.runnerErr)
	require.NoError(t, res.coreErr)

	hello := payloadOf(t, res.runnerConn.sentMsg(0))
	assert.JSONEq(t, `"durability.indexed_state.v1"`, string(hello["durability"]))
	assert.JSONEq(t, `"history.output_bodies.v1"`, string(hello["outputBodies"]))
	assert.Equal(t, prp.DurabilityCapability, res.hello.Durability, "the core reads the claims")
	assert.Equal(t, prp.OutputBodiesCapability, res.hello.OutputBodies)
	challenge := payloadOf(t, res.coreConn.sentMsg(0))
	for _, k := range append(epochKeys, "commandEpochs", "eventEpochs", "resume") {
		if k != "resume" {
			assert.NotContains(t, hello, k)
		}
		assert.NotContains(t, challenge, k)
	}
	assert.NotContains(t, challenge, "durability", "a legacy core echoes nothing")
	var resume map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(hello["resume"], &resume))
	assert.NotContains(t, resume, "controllerEpoch")
}

// TestDurability02_IndexedCoreAuthenticates: durability.md §11 scenario 2:
// "Indexed core → authenticates; challenge has `durability`,
// `outputBodies`, `commandResume` → proofs verify." The runner signs the
// challenge exactly as received (prp.md §2.2): a field it does not know
// (here one the core adds) is signed too, or the core's check of the client
// proof fails.
func TestDurability02_IndexedCoreAuthenticates(t *testing.T) {
	for _, extra := range []bool{false, true} {
		store, ticket := ticketed(t)
		c := newClient()
		c.Ticket = ticket
		c.IndexedState = true
		core := newCore(store)
		core.Indexed = true
		if extra {
			core.Challenge = func(p map[string]any) { p["futureCapability"] = map[string]any{"v": 1} }
		}
		res := runBoth(t, c, core)
		require.NoError(t, res.runnerErr, "extra=%v", extra)
		require.NoError(t, res.coreErr, "the client proof verified over the whole challenge")

		ch := payloadOf(t, res.coreConn.sentMsg(0))
		assert.JSONEq(t, `"durability.indexed_state.v1"`, string(ch["durability"]))
		assert.JSONEq(t, `"history.output_bodies.v1"`, string(ch["outputBodies"]))
		assert.JSONEq(t, `{"controllerEpoch":null,"lastControllerCommandSeq":0}`, string(ch["commandResume"]))
		_, signing := decodeChallenge(t, res.coreConn.sentMsg(0))
		for _, k := range []string{"durability", "outputBodies", "commandResume"} {
			assert.Contains(t, string(signing), `"`+k+`":`, "signed")
		}
		exchangeControl(t, res.runner, res.core)
	}

	// An indexed core refuses a hello without the claims before any
	// challenge (CP #authorizeHello).
	store, _ := ticketed(t)
	core := newCore(store)
	core.Indexed = true
	rc, cc := newMemPipe()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, prp.WriteAuth(ctx, rc, prp.ProtocolVersion, prp.KindAuthHello, prp.HelloPayload{
		CredentialID: "x", CredentialKind: prp.CredentialBootstrap, ClientNonce: "00",
		ProtocolMin: 1, ProtocolMax: 2, Identity: testIdentity, RunnerVersion: testRunnerVersion, RunnerDigest: testRunnerDigest,
		OutputBodies: prp.OutputBodiesCapability,
	}))
	_, _, err := core.Run(ctx, cc)
	require.ErrorIs(t, err, prp.ErrHelloRejected)
	assert.Empty(t, cc.sentKinds(), "no challenge")
}

// requireRefusedBeforeResponse runs one attempt whose challenge the runner
// must refuse: a retryable ErrChallengeRejected, no auth_response sent, the
// ticket unused; then the same ticket authenticates against a plain
// indexed core.
func requireRefusedBeforeResponse(t *testing.T, indexedRunner bool, core func(*Handshake)) {
	t.Helper()
	store, ticket := ticketed(t)
	c := newClient()
	c.Ticket, c.IndexedState = ticket, indexedRunner
	h := newCore(store)
	core(h)
	res := runBoth(t, c, h)
	require.ErrorIs(t, res.runnerErr, prp.ErrChallengeRejected)
	assert.NotErrorIs(t, res.runnerErr, prp.ErrTicketConsumed, "retryable")
	assert.Equal(t, []string{prp.KindAuthHello}, res.runnerConn.sentKinds(), "nothing after auth_hello")
	assert.False(t, store.TicketUsed(ticket))

	h = newCore(store)
	h.Indexed = true
	res = runBoth(t, c, h)
	require.NoError(t, res.runnerErr, "the ticket works next try")
	require.NoError(t, res.coreErr)
	assert.True(t, store.TicketUsed(ticket))
}

// TestDurability03_IndexedStateNeedsChallengeDurability: durability.md §11
// scenario 3: "`--indexed-state`, challenge without `durability` → fails
// before `auth_response`; the ticket works next try."
func TestDurability03_IndexedStateNeedsChallengeDurability(t *testing.T) {
	requireRefusedBeforeResponse(t, true, func(*Handshake) {}) // a legacy core echoes neither
	for _, field := range []string{"durability", "outputBodies"} {
		t.Run(field, func(t *testing.T) {
			requireRefusedBeforeResponse(t, true, func(h *Handshake) {
				h.Indexed = true
				h.Challenge = func(p map[string]any) { delete(p, field) }
			})
		})
	}
}

// TestDurability04_UnrequestedEpochGrant: durability.md §11 scenario 4:
// "Challenge grants `eventEpochs` the runner did not request → attempt
// fails before `auth_response`." runnerd requests no epoch (level D1), so
// every epoch member of §1.2 is unrequested, and a commandResume naming a
// command epoch names one runnerd does not hold.
func TestDurability04_UnrequestedEpochGrant(t *testing.T) {
	cases := map[string]any{
		"eventEpochs":     prp.EventEpochsCapability,
		"commandEpochs":   prp.CommandEpochsCapability,
		"eventResume":     map[string]any{"sourceEpoch": nil, "nextSourceEventSeq": 1, "ackedSourceSeq": 0, "transition": nil},
		"eventEpochLimit": 8,
		"commandResume":   map[string]any{"controllerEpoch": "6f1c1a52-9a3c-4d7e-8b1a-2f0e5c4d3b2a", "lastControllerCommandSeq": 0},
	}
	for field, v := range cases {
		t.Run(field, func(t *testing.T) {
			requireRefusedBeforeResponse(t, false, func(h *Handshake) {
				h.Indexed = true
				h.Challenge = func(p map[string]any) { p[field] = v }
			})
		})
	}
	for name, v := range map[string]any{"not an object": "x", "negative sequence": map[string]any{"controllerEpoch": nil, "lastControllerCommandSeq": -1}} {
		t.Run("commandResume "+name, func(t *testing.T) {
			requireRefusedBeforeResponse(t, false, func(h *Handshake) {
				h.Indexed = true
				h.Challenge = func(p map[string]any) { p["commandResume"] = v }
			})
		})
	}
}

// TestDurability23_CapabilityValueMismatch: durability.md §11 scenario 23:
// "Challenge `outputBodies` (or `durability`) with a value other than the
// constant → fails before `auth_response`; the ticket works next try."
func TestDurability23_CapabilityValueMismatch(t *testing.T) {
	for _, field := range []string{"durability", "outputBodies"} {
		for _, indexed := range []bool{false, true} {
			for _, v := range []any{"history.output_bodies.v2", "", nil, 1} {
				requireRefusedBeforeResponse(t, indexed, func(h *Handshake) {
					h.Indexed = true
					h.Challenge = func(p map[string]any) { p[field] = v }
				})
			}
		}
	}
}

// TestDurability24_WelcomeGrantMismatch: durability.md §11 scenario 24:
// "Welcome `commandEpochs` presence or `eventEpochLimit` unlike the
// challenge's, or `sourceEpoch` unlike the durable one → connection
// dropped, nothing processed; reconnect." On a lease reconnect the attempt
// fails retryably and the next one works. (On a bootstrap the welcome came
// after auth_response, so it fails closed as any bad welcome does, prp.md
// §2.4.)
func TestDurability24_WelcomeGrantMismatch(t *testing.T) {
	store, first := bootstrap(t)
	lease := first.welcome.Lease
	cases := map[string]func(p *prp.WelcomePayload){
		"commandEpochs":   func(p *prp.WelcomePayload) { p.CommandEpochs = json.RawMessage(`"transport.command_epochs.v1"`) },
		"eventEpochs":     func(p *prp.WelcomePayload) { p.EventEpochs = json.RawMessage(`"transport.event_epochs.v1"`) },
		"eventEpochLimit": func(p *prp.WelcomePayload) { p.EventEpochLimit = json.RawMessage(`16`) },
		"sourceEpoch":     func(p *prp.WelcomePayload) { p.SourceEpoch = json.RawMessage(`"6f1c1a52-9a3c-4d7e-8b1a-2f0e5c4d3b2a"`) },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient()
			c.Lease = &lease
			core := newCore(store)
			core.Outbound = func(kind string, payload any) (any, error) {
				p := payload.(prp.WelcomePayload)
				edit(&p)
				return p, nil
			}
			res := runBoth(t, c, core)
			require.ErrorIs(t, res.runnerErr, prp.ErrWelcomeRejected)
			assert.NotErrorIs(t, res.runnerErr, prp.ErrTicketConsumed)
			assert.Nil(t, res.runner, "no session: nothing is processed")

			res = runBoth(t, c, newCore(store))
			require.NoError(t, res.runnerErr, "the reconnect works")
		})
	}
	// A null sourceEpoch is the same as none.
	c := newClient()
	c.Lease = &lease
	core := newCore(store)
	core.Outbound = func(kind string, payload any) (any, error) {
		p := payload.(prp.WelcomePayload)
		p.SourceEpoch = json.RawMessage(`null`)
		return p, nil
	}
	res := runBoth(t, c, core)
	require.NoError(t, res.runnerErr)
}
