package runner

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/sandbox"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
	"github.com/pcrunner/pcrunner/internal/workspace"
)

// TestWorkspaceEventsThroughCore: a turn in which fakeacp edits a file
// and links it reaches prpctl's core with the harness snapshot, the
// verified set, its record and the file reference, each valid against
// the reference event schema (closed workspace payloads: no id added),
// and the core keeps the connection (the turn's run.terminal arrives).
func TestWorkspaceEventsThroughCore(t *testing.T) {
	schemas := prpschema.Load(t)
	h := newHarness(t, nil)
	h.agentRun()
	cwd := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("one\ntwo\n"), 0o644))
	b, err := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
		"command": fakeacpBin(t), "cwd": cwd}})
	require.NoError(t, err)
	require.Equal(t, "completed", h.waitResult(h.queue("run.prepare", string(b)).CommandID).Status)
	require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
	tb, _ := json.Marshal(map[string]string{"text": `edit a.txt one\n2\n`})
	require.Equal(t, "completed", h.waitResult(h.queue("turn.start", string(tb)).CommandID).Status)
	h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "run.terminal")) == 1
	})
	var order []string
	for _, raw := range h.core.Snapshot().Events {
		var env struct {
			EventType string          `json:"eventType"`
			Payload   json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(raw, &env))
		require.NoError(t, prpschema.Validate(schemas.EventV1, env.Payload), "event %s", env.Payload)
		var whole struct {
			EventType string         `json:"eventType"`
			Payload   map[string]any `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(env.Payload, &whole))
		if strings.HasPrefix(whole.EventType, "workspace.") || whole.EventType == "turn.completed" {
			order = append(order, whole.EventType)
		}
		if strings.HasPrefix(whole.EventType, "workspace.") {
			require.NotContains(t, whole.Payload, "providerTurnId")
			require.NotContains(t, whole.Payload, "itemId")
		}
	}
	require.Equal(t, []string{"workspace.ready", "workspace.change.updated", "workspace.change.updated", "workspace.diff.recorded",
		"workspace.file.referenced", "turn.completed"}, order)
}

// TestWorkspaceEnvelopesInOutbox: workspace events as the outbox stores
// them (stateEvents, then the store's sanitiser and envelope) keep their
// exact payloads and validate against the reference schema; a credential
// in diff text is redacted, the counts kept.
func TestWorkspaceEnvelopesInOutbox(t *testing.T) {
	schemas := prpschema.Load(t)
	st, err := state.Open(state.Config{Dir: filepath.Join(t.TempDir(), "state"), Identity: testIdentity})
	require.NoError(t, err)
	defer st.Close()
	secret := "ghp_" + strings.Repeat("a", 36)
	h := workspace.NewHarness("pturn-1", workspace.NewBudget(workspace.WorkspaceDiffBudget, time.Now), func(s string) string { return s })
	old := "x\n"
	h.AddDiff("env.sh", &old, "TOKEN="+secret+"\n")
	cs := h.Snapshot()
	done := cs
	done.Complete = true
	evs := []provider.Event{
		{EventType: "workspace.change.updated", Priority: 2, TurnID: "pturn-1", ItemID: "item-9", Payload: cs.Payload()},
		{EventType: "workspace.diff.recorded", Priority: 1, TurnID: "pturn-1", Payload: done.Payload()},
	}
	events, err := stateEvents(evs)
	require.NoError(t, err)
	before := len(st.Unacked())
	require.NoError(t, st.Update(func(tx *state.Tx) error {
		for _, e := range events {
			if _, err := tx.Enqueue(e); err != nil {
				return err
			}
		}
		return nil
	}))
	stored := st.Unacked()[before:]
	require.Len(t, stored, 2, "snapshots are never coalesced")
	for _, e := range stored {
		raw, err := e.Wire(1)
		require.NoError(t, err)
		var whole struct {
			Payload json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(raw, &whole))
		require.NoError(t, prpschema.Validate(schemas.EventV1, whole.Payload), "event %s", whole.Payload)
		require.NotContains(t, string(whole.Payload), secret)
		require.NotContains(t, string(whole.Payload), `"providerTurnId"`)
		require.Contains(t, string(whole.Payload), `"additions":1`)
	}
}

// TestWorkspace29_SealedFrameBound: with a 64 KiB frame limit, from
// --max-frame-bytes or from a smaller welcome maxFrameBytes, a turn that
// leaves 8 files of about 21 KB of diff each sends its workspace events
// each within the limit once sealed, 2×(len+16)+128 bytes: the last
// files keep their stats with diff null; the core (announcing the same
// limit) takes every frame, and a later turn's events all arrive (no
// stall).
func TestWorkspace29_SealedFrameBound(t *testing.T) {
	const limit = 65536
	for name, flags := range map[string][]string{
		"flag":    {"--max-frame-bytes", "65536"},
		"welcome": nil,
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, func(c *control.Config) { c.MaxFrameBytes = limit })
			// An outbox with room for the turn's events: the default's
			// 32 KiB for P1 and P2 would refuse the second 27 KB set.
			h.agentRun(append(flags, "--max-outbox-bytes", "1048576")...)
			evs := shedTurns(t, h, 2200)
			for _, e := range evs {
				require.LessOrEqual(t, state.SealedFrameBytes(len(e.raw)), limit, "the envelope of %s", e.eventType)
			}
			requireShed(t, evs, 2200)
		})
	}
}

// TestWorkspaceVerifiedFitsDefaultOutbox: with runnerd's default outbox
// (64 KiB, 32 KiB reserved for P0), a turn whose diffs would fill the
// room sheds diff text so that both verified events are accepted and
// arrive; the last files keep their stats with diff null.
func TestWorkspaceVerifiedFitsDefaultOutbox(t *testing.T) {
	h := newHarness(t, nil)
	h.agentRun()
	requireShed(t, shedTurns(t, h, 400), 400)
}

// workspaceEvent is a committed workspace event: its envelope as the
// core took it, its type and payload.
type workspaceEvent struct {
	raw       json.RawMessage
	eventType string
	payload   map[string]any
}

// shedTurns prepares a fakeacp session, runs a turn whose shell writes 8
// files of lines lines each, then a second turn (later events still
// arrive), and returns the workspace events the core committed.
func shedTurns(t *testing.T, h *harness, lines int) []workspaceEvent {
	t.Helper()
	b, err := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
		"command": fakeacpBin(t), "cwd": t.TempDir()}})
	require.NoError(t, err)
	require.Equal(t, "completed", h.waitResult(h.queue("run.prepare", string(b)).CommandID).Status)
	require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
	turn := func(text string, n int) {
		tb, _ := json.Marshal(map[string]string{"text": text})
		require.Equal(t, "completed", h.waitResult(h.queue("turn.start", string(tb)).CommandID).Status)
		h.waitCore(func(s control.Snapshot) bool {
			return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "run.terminal")) == n
		})
	}
	turn(fmt.Sprintf(`shell for i in 1 2 3 4 5 6 7 8; do seq 1 %d | sed s/^/line-/ > f$i.txt; done`, lines), 1)
	turn("echo later", 2)
	var out []workspaceEvent
	for _, raw := range h.core.Snapshot().Events {
		var env struct {
			Payload struct {
				EventType string         `json:"eventType"`
				Payload   map[string]any `json:"payload"`
			} `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(raw, &env))
		if strings.HasPrefix(env.Payload.EventType, "workspace.") {
			out = append(out, workspaceEvent{raw: raw, eventType: env.Payload.EventType, payload: env.Payload.Payload})
		}
	}
	return out
}

// requireShed checks the turn's verified change.updated and diff.recorded:
// both arrived, with all 8 files; the first files keep their diff, the
// last lost it and kept its stats.
func requireShed(t *testing.T, evs []workspaceEvent, additions int) {
	t.Helper()
	var verified []map[string]any
	for _, e := range evs {
		if e.payload["source"] == "runner_verified" {
			verified = append(verified, e.payload)
		}
	}
	require.Len(t, verified, 2, "change.updated and diff.recorded both arrive")
	for _, p := range verified {
		fs := p["files"].([]any)
		require.Len(t, fs, 8)
		require.NotNil(t, fs[0].(map[string]any)["diff"], "the first files keep their diff")
		last := fs[7].(map[string]any)
		require.Nil(t, last["diff"], "the last files' diff is dropped")
		require.EqualValues(t, additions, last["additions"], "stats kept")
	}
}

// TestWorkspace24_MetricCoalescesNewest: sandbox.metric is P2 and an
// unsent one is replaced by the next (workspace.md §9, §10): two samples
// enqueued while nothing is sent leave one outbox event with the newer
// values, valid against the event schema.
func TestWorkspace24_MetricCoalescesNewest(t *testing.T) {
	schemas := prpschema.Load(t)
	st, err := state.Open(state.Config{Dir: filepath.Join(t.TempDir(), "state"), Identity: testIdentity})
	require.NoError(t, err)
	defer st.Close()
	sample := func(at time.Time, load float64) provider.Event {
		s := sandbox.Sample{LoadAverage1m: &load}
		return provider.Event{EventType: prp.EventSandboxMetric, Priority: provider.P2, Payload: s.Payload(at, time.Second)}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	before := len(st.Unacked())
	for i, ev := range []provider.Event{sample(t0, 1.5), sample(t0.Add(time.Second), 2.5)} {
		events, err := stateEvents([]provider.Event{ev})
		require.NoError(t, err)
		require.Equal(t, prp.EventSandboxMetric, events[0].CoalesceKey, "sample %d", i)
		require.NoError(t, st.Update(func(tx *state.Tx) error { _, err := tx.Enqueue(events[0]); return err }))
	}
	stored := st.Unacked()[before:]
	require.Len(t, stored, 1, "the newer sample replaced the unsent one")
	raw, err := stored[0].Wire(2)
	require.NoError(t, err)
	var whole struct {
		Payload json.RawMessage `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(raw, &whole))
	require.NoError(t, prpschema.Validate(schemas.EventV1, whole.Payload))
	require.Contains(t, string(whole.Payload), `"loadAverage1m":2.5`)
	require.Contains(t, string(whole.Payload), `"sampledAt":"2026-01-01T00:00:01.000Z"`)
	require.Contains(t, string(whole.Payload), `"cpuUsageSeconds":null`)
}

// TestWorkspace24_MetricAtBound: at the outbox's soft limit (prp.md §9.3)
// a P1 phase event is rejected and dropped (backpressure), never retried,
// while a sandbox.metric whose unsent predecessor is a metric still
// replaces it: backpressure holds the newest sample, not a backlog
// (workspace.md §10).
func TestWorkspace24_MetricAtBound(t *testing.T) {
	metric := func(sec int, load float64) state.Event {
		s := sandbox.Sample{LoadAverage1m: &load}
		evs, err := stateEvents([]provider.Event{{EventType: prp.EventSandboxMetric, Priority: provider.P2,
			Payload: s.Payload(time.Date(2026, 1, 1, 0, 0, sec, 0, time.UTC), time.Second)}})
		require.NoError(t, err)
		return evs[0]
	}
	phase, err := stateEvents([]provider.Event{provider.PhaseChanged(provider.PhaseExecuting)})
	require.NoError(t, err)
	enqueue := func(st *state.Store, e state.Event) error {
		return st.Update(func(tx *state.Tx) error { _, err := tx.Enqueue(e); return err })
	}
	// Measure one metric's stored size on a scratch store.
	scratch, err := state.Open(state.Config{Dir: filepath.Join(t.TempDir(), "state"), Identity: testIdentity})
	require.NoError(t, err)
	base := scratch.Summary().OutboxBytes
	require.NoError(t, enqueue(scratch, metric(0, 1.5)))
	size := scratch.Summary().OutboxBytes - base
	require.NoError(t, scratch.Close())

	const reserve = 64 << 10
	st, err := state.Open(state.Config{Dir: filepath.Join(t.TempDir(), "state"), Identity: testIdentity,
		MaxOutboxBytes: base + size + 16 + reserve, P0ReserveBytes: reserve})
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, enqueue(st, metric(0, 1.5)))
	require.NoError(t, enqueue(st, metric(1, 2.5)), "the newer sample replaces the unsent one at the bound")
	require.Len(t, st.Unacked(), 1)
	require.ErrorIs(t, enqueue(st, phase[0]), state.ErrBackpressure, "a P1 event past the soft limit is dropped")
	require.Len(t, st.Unacked(), 1)
	raw, err := st.Unacked()[0].Wire(2)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"loadAverage1m":2.5`)
}
