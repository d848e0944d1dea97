package runner

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// deliverNext sends the first command without a result on this
// connection (a pending one again after a reconnect: the runner answers
// a duplicate with its recorded result).
func (c *versionCore) deliverNext(ctx context.Context, ws *websocket.Conn, sess *prp.Session) error {
	c.mu.Lock()
	var raw json.RawMessage
	if n := len(c.results); n < len(c.commands) {
		raw = c.commands[n]
	}
	c.mu.Unlock()
	if raw == nil {
		return nil
	}
	env, err := sess.NewControl(prp.KindCommand, raw)
	if err != nil {
		return err
	}
	out, err := sess.SealEnvelope(env)
	if err != nil {
		return err
	}
	return ws.Write(ctx, websocket.MessageText, out)
}

// recordResult keeps a command_result; it reports a new one.
func (c *versionCore) recordResult(payload json.RawMessage) bool {
	var p prp.CommandResultPayload
	if json.Unmarshal(payload, &p) != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.results == nil {
		c.results = map[string]prp.CommandResultPayload{}
	}
	if _, ok := c.results[p.CommandID]; ok {
		return false
	}
	c.results[p.CommandID] = p
	c.notifyLocked()
	return true
}

// TestPRP23_GoalEventsDowngradeOnV1: goal commands and an autonomous
// goal update against fakeacp on a PRP v1 connection: the results are the
// real projections, but every session.capabilities.updated and
// session.goal.* event goes out as runner.diagnostic {reasonCode:
// event_requires_prp_v2, originalEventType} under a v1 schema, never with
// its payload; the next v2 connection replays the latest of each family
// with its real payload (prp.md §8.2, scenario 23).
func TestPRP23_GoalEventsDowngradeOnV1(t *testing.T) {
	core, tr := newVersionCore(t)
	core.maxVersion = 1
	cwd := t.TempDir()
	provider, err := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
		"command": fakeacpBin(t), "args": []string{"--goal-actions", allGoalActions}, "cwd": cwd}})
	require.NoError(t, err)
	for i, c := range []struct{ schema, typ, payload string }{
		{prp.CommandSchemaV1, "run.prepare", string(provider)},
		{prp.CommandSchemaV1, "session.open", `{}`},
		{prp.CommandSchemaV2, "session.goal.set", `{"objective":"Ship the change"}`},
		{prp.CommandSchemaV1, "turn.start", `{"text":"goal"}`},
	} {
		core.commands = append(core.commands, rawCommand(t, prp.Command{Schema: c.schema, CommandID: cmdID(i + 1),
			ControllerSeq: uint64(i + 1), Type: c.typ, IssuedAt: fixedIssuedAt, Payload: json.RawMessage(c.payload)}))
	}
	h := &harness{t: t, stateDir: filepath.Join(t.TempDir(), "state"), connectURL: "ws://127.0.0.1:1" + prp.ConnectPath(testIdentity.RunID)}
	cfg := h.config(false, "--pcwrap-path", testbin.Path(t, "pcwrap"))
	start := func() *running {
		tok, err := core.store.IssueTicket(time.Minute, time.Now())
		require.NoError(t, err)
		ticket, err := config.NewBootstrapTicket(tok)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		r := &running{cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- runLoop(ctx, cfg, ticket, testLogger(), options{Transport: tr}) }()
		return r
	}
	type wireEvent struct {
		Version int `json:"version"`
		Payload struct {
			Schema    string          `json:"schema"`
			EventType string          `json:"eventType"`
			Payload   json.RawMessage `json:"payload"`
		} `json:"payload"`
	}
	decode := func(raw json.RawMessage) wireEvent {
		var e wireEvent
		require.NoError(t, json.Unmarshal(raw, &e))
		return e
	}
	// originals counts the downgraded events by their original type.
	originals := func() map[string]int {
		out := map[string]int{}
		for _, raw := range core.events {
			e := decode(raw)
			var p struct {
				ReasonCode, OriginalEventType string
			}
			if e.Payload.EventType == "runner.diagnostic" && json.Unmarshal(e.Payload.Payload, &p) == nil && p.ReasonCode == "event_requires_prp_v2" {
				out[p.OriginalEventType]++
			}
		}
		return out
	}

	r1 := start()
	core.wait(func() bool {
		o := originals()
		return len(core.results) == len(core.commands) && o[prp.EventSessionGoalUpdated] == 2
	})
	r1.cancel()
	require.NoError(t, r1.wait(t))

	core.mu.Lock()
	set := core.results[cmdID(3)]
	require.Equal(t, "completed", set.Status, string(set.Result))
	require.Contains(t, string(set.Result), `"objective":"Ship the change"`, "a command result is not downgraded")
	o := originals()
	require.Equal(t, 2, o[prp.EventSessionCapabilitiesUpdated], "session.open's and the set's: %v", o)
	require.Equal(t, 1, o[prp.EventSessionGoalSnapshot], "session.open's: %v", o)
	require.Equal(t, 2, o[prp.EventSessionGoalUpdated], "the set's and the agent's autonomous update: %v", o)
	// The phase events are in the v1 event schema: they go out as they are.
	for _, typ := range []string{prp.EventRuntimePhaseChanged, prp.EventWorkspaceReady, prp.EventHarnessStarting,
		prp.EventSessionStarting, prp.EventTurnSubmitted} {
		require.Zero(t, o[typ], "%s is never downgraded", typ)
		sent := 0
		for _, raw := range core.events {
			if decode(raw).Payload.EventType == typ {
				sent++
			}
		}
		require.Positive(t, sent, "%s goes out on a v1 connection", typ)
	}
	for _, raw := range core.events {
		e := decode(raw)
		require.Equal(t, 1, e.Version)
		require.NotContains(t, e.Payload.EventType, "goal", "no goal event rides a v1 link")
		require.NotEqual(t, prp.EventSessionCapabilitiesUpdated, e.Payload.EventType)
		require.NotContains(t, string(raw), "Ship the change", "the real payload never rides a v1 link")
		if e.Payload.EventType == "runner.diagnostic" {
			require.Equal(t, "paperclip.prp.event.v1", e.Payload.Schema)
		}
	}
	seen := len(core.events)
	core.maxVersion = 2
	core.mu.Unlock()

	// The next v2 connection: the latest of each family, real payloads.
	r2 := start()
	latest := func() (goal, caps *wireEvent) {
		for _, raw := range core.events[seen:] {
			e := decode(raw)
			switch e.Payload.EventType {
			case prp.EventSessionGoalUpdated:
				goal = &e
			case prp.EventSessionCapabilitiesUpdated:
				caps = &e
			}
		}
		return goal, caps
	}
	core.wait(func() bool { g, c := latest(); return g != nil && c != nil })
	r2.cancel()
	require.NoError(t, r2.wait(t))
	core.mu.Lock()
	defer core.mu.Unlock()
	g, c := latest()
	require.Equal(t, 2, g.Version)
	require.Equal(t, "paperclip.prp.event.v2", g.Payload.Schema)
	var p goalView
	require.NoError(t, json.Unmarshal(g.Payload.Payload, &p))
	require.Equal(t, "Ship the change", p.Goal.Objective)
	require.Equal(t, "complete", p.Goal.Status, "the latest of the family: the agent's autonomous update")
	require.True(t, strings.Contains(string(c.Payload.Payload), `"availability":"available"`), string(c.Payload.Payload))
}
