package runner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// fakeacpBin builds test/fakeacp once per test process.
func fakeacpBin(t testing.TB) string {
	t.Helper()
	return testbin.Build(t, "test/fakeacp")
}

// agentRun starts a runner whose config finds the test pcwrap.
func (h *harness) agentRun(extra ...string) *running {
	h.t.Helper()
	cfg := h.config(false, append([]string{"--pcwrap-path", testbin.Path(h.t, "pcwrap")}, extra...)...)
	return h.start(cfg, options{})
}

func (h *harness) prepareFake(flags ...string) {
	h.t.Helper()
	b, err := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
		"command": fakeacpBin(h.t), "args": flags, "cwd": h.t.TempDir()}})
	require.NoError(h.t, err)
	res := h.waitResult(h.queue("run.prepare", string(b)).CommandID)
	require.Equal(h.t, "completed", res.Status, string(res.Result))
}

// TestAgentTurnThroughLoop: the executor's events reach the core through
// the durable outbox, the provider turn and item ids ride in the payload,
// consecutive deltas coalesce, and the ACP record lives in
// runner-state.json without any environment value (acp.md §3.3, §3.4).
func TestAgentTurnThroughLoop(t *testing.T) {
	h := newHarness(t, nil)
	run := h.agentRun()
	h.prepareFake()
	res := h.waitResult(h.queue("session.open", `{"reuse":"same_session"}`).CommandID)
	require.Equal(t, "completed", res.Status, string(res.Result))
	res = h.waitResult(h.queue("turn.start", `{"text":"echo hello"}`).CommandID)
	require.Equal(t, "completed", res.Status)
	s := h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "run.terminal")) == 1
	})
	evs := prptest.DecodeEvents(t, s.Events)
	deltas := prptest.OfType(evs, "item.delta")
	require.NotEmpty(t, deltas)
	var p map[string]any
	require.NoError(t, json.Unmarshal(deltas[0].Payload, &p))
	require.Equal(t, "pturn-1", p["providerTurnId"])
	require.NotEmpty(t, p["itemId"])
	require.Equal(t, "hello", p["text"])

	snap := h.waitResult(h.queue("session.snapshot", `{}`).CommandID)
	require.Equal(t, "completed", snap.Status)
	// Idle agent: warmAttachReady once the core's ACK of the turn's last
	// event reached the runner (each look is a new command, bounded).
	ready := false
	for i := 0; i < 50 && !ready; i++ {
		snap = h.waitResult(h.queue("session.snapshot", `{"quiesceForWarmAttach":true}`).CommandID)
		var r struct {
			Active any  `json:"activeProviderTurnId"`
			Ready  bool `json:"warmAttachReady"`
		}
		require.NoError(t, json.Unmarshal(snap.Result, &r))
		require.Nil(t, r.Active)
		ready = r.Ready
	}
	require.True(t, ready, "an idle agent with a drained outbox is ready for a warm attach")

	run.cancel()
	require.NoError(t, run.wait(t))
	st := h.readState()
	var rec map[string]any
	ok, err := st.Record(agentRecord, &rec)
	require.NoError(t, err)
	require.True(t, ok)
	raw, _ := json.Marshal(rec)
	require.Contains(t, string(raw), `"acpSessionId":"sess-0001"`)
	require.NotContains(t, string(raw), "PATH=")
	require.NotContains(t, string(raw), os.Getenv("HOME")+"\"", "no environment value in the record")
	_ = state.FileName
}

// TestAgentHandshakeTimeoutCode: a handshake timeout fails session.open
// with the protocol-named code session_handshake_timeout, not the generic
// command_execution_failed (acp.md §4.1 step 4).
func TestAgentHandshakeTimeoutCode(t *testing.T) {
	h := newHarness(t, nil)
	h.agentRun("--session-open-cold-timeout-agent", "claude=500")
	h.prepareFake("--hang-on-new-session")
	res := h.waitResult(h.queue("session.open", `{}`).CommandID)
	require.Equal(t, "failed", res.Status)
	require.Equal(t, "session_handshake_timeout", resultCodeOf(t, res))
	require.True(t, strings.Contains(string(res.Result), "within 500ms"), string(res.Result))
	_ = context.Background
}

// TestAgentEventsMatchSchema: every event of a turn with tool calls, a
// plan, a permission and usage, as it reaches the core, validates against
// the reference event schema (the server validates payloads, prp.md §8.4).
func TestAgentEventsMatchSchema(t *testing.T) {
	schemas := prpschema.Load(t)
	h := newHarness(t, nil)
	h.agentRun()
	h.prepareFake()
	require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
	for i, text := range []string{"plan", "permission allow", "usage", "think hard", "echo done"} {
		b, _ := json.Marshal(map[string]string{"text": text})
		require.Equal(t, "completed", h.waitResult(h.queue("turn.start", string(b)).CommandID).Status)
		h.waitCore(func(s control.Snapshot) bool {
			return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "run.terminal")) == i+1
		})
	}
	for _, raw := range h.core.Snapshot().Events {
		var env struct {
			Payload json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(raw, &env))
		require.NoError(t, prpschema.Validate(schemas.EventV1, env.Payload), "event %s", env.Payload)
	}
}

// TestAgentDeltasCoalesceInTheOutbox: the production path drives the
// outbox's coalescing (CoalesceKey = itemId, prp.md §9.3): deltas of one
// item from separate commits become one unsent P2 event whose text is the
// concatenation, with a credential split across two deltas still
// redacted; another item starts a new event; the bytes validate against
// the reference event schema.
func TestAgentDeltasCoalesceInTheOutbox(t *testing.T) {
	schemas := prpschema.Load(t)
	st, err := state.Open(state.Config{Dir: filepath.Join(t.TempDir(), "state"), Identity: testIdentity})
	require.NoError(t, err)
	defer st.Close()
	delta := func(item, text string) provider.Event {
		return provider.Event{EventType: "item.delta", Priority: provider.P2, TurnID: "pturn-1", ItemID: item,
			Payload: map[string]any{"kind": "assistant_message", "text": text}}
	}
	commit := func(evs ...provider.Event) {
		events, err := stateEvents(evs)
		require.NoError(t, err)
		require.NoError(t, st.Update(func(tx *state.Tx) error {
			for _, e := range events {
				if _, err := tx.Enqueue(e); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	before := len(st.Unacked())
	commit(delta("it-1", "a <b> "), delta("it-1", "key sk-ant-0123"))
	commit(delta("it-1", "456789abcdefghij done"))
	commit(delta("it-2", "other"))
	out := st.Unacked()[before:]
	require.Equal(t, 2, len(out), "one event per item")
	var texts []string
	for _, e := range out {
		var env struct {
			Payload struct {
				Payload map[string]any `json:"payload"`
			} `json:"payload"`
		}
		raw, err := e.Wire(2)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &env))
		var whole struct {
			Payload json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(raw, &whole))
		require.NoError(t, prpschema.Validate(schemas.EventV1, whole.Payload), "event %s", whole.Payload)
		texts = append(texts, env.Payload.Payload["text"].(string))
	}
	require.Equal(t, "a <b> key "+state.Redacted+" done", texts[0])
	require.Equal(t, "other", texts[1])
}

// TestAgentNoticeInTurnMatchesSchema: a provider notice raised during a
// turn (the real codex app-server sends one in every turn) keeps its
// closed payload: no providerTurnId or itemId is added, which
// paperclip.provider.notice.v1 refuses (found by TestRealCodexAppServer).
func TestAgentNoticeInTurnMatchesSchema(t *testing.T) {
	schemas := prpschema.Load(t)
	st, err := state.Open(state.Config{Dir: filepath.Join(t.TempDir(), "state"), Identity: testIdentity})
	require.NoError(t, err)
	defer st.Close()
	events, err := stateEvents([]provider.Event{{EventType: "provider.notice.recorded", Priority: provider.P0, TurnID: "pturn-1", ItemID: "it-1",
		Payload: map[string]any{"schema": "paperclip.provider.notice.v1", "noticeId": "codex-notice-2", "severity": "warning",
			"category": "warning", "scope": "turn", "recoverable": true, "userActionable": false, "summary": "the provider reported a warning"}}})
	require.NoError(t, err)
	before := len(st.Unacked())
	require.NoError(t, st.Update(func(tx *state.Tx) error {
		_, err := tx.Enqueue(events[0])
		return err
	}))
	out := st.Unacked()[before:]
	require.Len(t, out, 1)
	raw, err := out[0].Wire(2)
	require.NoError(t, err)
	var whole struct {
		Payload json.RawMessage `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(raw, &whole))
	require.NoError(t, prpschema.Validate(schemas.EventV1, whole.Payload), "event %s", whole.Payload)
}
