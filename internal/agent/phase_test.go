package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/cgroup"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// coldOpenTypes is a cold session.open's sequence (workspace.md §8).
var coldOpenTypes = []string{"harness.starting", "session.starting", "harness.ready", "session.started", "runtime.phase.changed"}

// TestWorkspace01_ReadyOnPrepare: run.prepare with an existing cwd →
// runtime.phase.changed {workspace_preparing}, workspace.ready
// {workingDirectory} (once per process and root); a missing cwd → one
// harness.diagnostic {workspace_unavailable} and no workspace event
// later, even once the directory exists, until a run.prepare finds it.
func TestWorkspace01_ReadyOnPrepare(t *testing.T) {
	r := newRig(t)
	r.prepare()
	_, evs := r.sink.snapshot()
	require.Equal(t, []string{"runtime.phase.changed", "workspace.ready"}, types(evs))
	require.Equal(t, map[string]any{"phase": "workspace_preparing"}, evs[0].Payload)
	require.Equal(t, map[string]any{"workingDirectory": r.cwd}, evs[1].Payload)
	for _, e := range evs {
		require.Equal(t, provider.P1, e.Priority)
	}
	prpschema.RequireValidEvents(t, evs)
	r.prepare()
	_, again := r.sink.snapshot()
	require.Len(t, again, len(evs), "the same root is readied once per process")

	m := newRig(t)
	m.cwd = filepath.Join(m.cwd, "missing")
	m.prepare()
	_, evs = m.sink.snapshot()
	require.Equal(t, []string{"harness.diagnostic"}, types(evs))
	require.Equal(t, diagWorkspaceUnavailable, code(evs[0]))
	prpschema.RequireValidEvents(t, evs)
	require.NoError(t, os.Mkdir(m.cwd, 0o755))
	m.open()
	_, turn := m.wsTurn("edit a.txt x ;; echo see [a](a.txt)")
	require.Empty(t, workspaceEvents(turn), "no workspace event for the session")
	_, all := m.sink.snapshot()
	require.Equal(t, 0, count(all, "workspace.ready"))

	// A run.prepare that finds it there readies it, and turns report again.
	m.prepare()
	_, evs = m.sink.snapshot()
	require.Equal(t, []string{"runtime.phase.changed", "workspace.ready"}, types(evs[len(all):]))
	_, turn = m.wsTurn("edit b.txt y")
	require.NotEmpty(t, workspaceEvents(turn))
}

// TestWorkspace02_ColdOpenPhases: a cold session.open → harness.starting
// (per driver: driverKind, transport, agent), session.starting,
// harness.ready, session.started, runtime.phase.changed {executing}, in
// order, all valid against event-v2.
func TestWorkspace02_ColdOpenPhases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rig     func(*testing.T) *rig
		prepare func(*rig)
		want    map[string]any
	}{
		{"acp", func(t *testing.T) *rig { return newRig(t) }, func(r *rig) { r.prepare() },
			map[string]any{"driverKind": "acpx_runtime", "transport": "stdio_jsonrpc", "agent": "claude"}},
		{"codex", func(t *testing.T) *rig { return newRig(t) }, func(r *rig) { r.prepareCodex(nil) },
			map[string]any{"driverKind": "codex_app_server", "transport": "stdio_jsonrpc", "agent": "codex"}},
		{"opencode", newOpenCodeRig, func(r *rig) { r.prepareOpenCode() },
			map[string]any{"driverKind": "opencode_server", "transport": "http_sse", "agent": "opencode"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rig(t)
			tc.prepare(r)
			_, before := r.sink.snapshot()
			r.open()
			_, evs := r.sink.snapshot()
			var phases []provider.Event
			for _, e := range evs[len(before):] {
				if e.EventType != "session.capabilities.updated" && !strings.HasPrefix(e.EventType, "session.goal.") &&
					e.EventType != "harness.diagnostic" {
					phases = append(phases, e)
				}
			}
			require.Equal(t, coldOpenTypes, types(phases))
			require.Equal(t, tc.want, phases[0].Payload)
			require.Equal(t, map[string]any{}, phases[1].Payload)
			require.Equal(t, map[string]any{"phase": "executing"}, phases[4].Payload)
			for i, p := range []int{provider.P1, provider.P1, provider.P0, provider.P0, provider.P1} {
				require.Equal(t, p, phases[i].Priority, phases[i].EventType)
			}
			prpschema.RequireValidEvents(t, evs)
		})
	}
}

// TestWorkspace03_ResumeAndAdopt: a resume after an agent loss →
// harness.starting, session.resuming {providerSessionId}, harness.ready,
// session.resumed (then the executing phase); opening again while the
// agent lives adopts it → session.resumed only.
func TestWorkspace03_ResumeAndAdopt(t *testing.T) {
	r := newRig(t)
	r.prepare("--supports-load-session")
	r.open()
	r.turn("echo before")
	r.sink.waitEvent(t, "run.terminal")
	r.killAgent()
	_, before := r.sink.snapshot()
	require.Contains(t, string(r.open()), `"status":"resumed"`)
	_, evs := r.sink.snapshot()
	got := since(evs, len(before))
	require.Equal(t, []string{"harness.starting", "session.resuming", "harness.ready", "session.resumed", "runtime.phase.changed"}, types(got))
	require.Equal(t, map[string]any{"providerSessionId": "sess-0001"}, got[1].Payload)
	prpschema.RequireValidEvents(t, got)

	_, before = r.sink.snapshot()
	require.Contains(t, string(r.open()), `"status":"resumed"`)
	_, evs = r.sink.snapshot()
	require.Equal(t, []string{"session.resumed"}, types(since(evs, len(before))), "adopting a live agent")
}

// TestWorkspace04_TurnSubmitted: turn.start → turn.submitted {} (no
// prompt text) before turn.started; no turn.accepted anywhere.
func TestWorkspace04_TurnSubmitted(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	const secret = "echo the-prompt-text-42"
	turn, evs := r.wsTurn(secret)
	require.Equal(t, []string{"turn.submitted", "turn.started"}, types(evs[:2]))
	require.Equal(t, map[string]any{}, evs[0].Payload)
	require.Equal(t, turn, evs[0].TurnID)
	require.Equal(t, provider.P1, evs[0].Priority)
	_, all := r.sink.snapshot()
	require.Equal(t, 0, count(all, "turn.accepted"))
	b, err := json.Marshal(evs[0])
	require.NoError(t, err)
	require.NotContains(t, string(b), "the-prompt-text-42")
	prpschema.RequireValidEvents(t, evs)
}

// TestWorkspace23_ItemFailed: a failed tool call →
// tool.execution.completed {failed}, item.completed, then item.failed
// {kind: tool_call, message: its error text}; a turn that fails with a
// message open → item.completed, then item.failed whose message comes
// from the failure code alone.
func TestWorkspace23_ItemFailed(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	_, evs := r.wsTurn("tool-fail exit status 2")
	var tool []string
	var failed provider.Event
	for _, e := range evs {
		switch e.EventType {
		case "tool.execution.completed", "item.completed", "item.failed":
			tool = append(tool, e.EventType)
			if e.EventType == "item.failed" {
				failed = e
			}
		}
	}
	require.Equal(t, []string{"tool.execution.completed", "item.completed", "item.failed"}, tool[:3])
	require.Equal(t, "failed", payloadOf(evs, "tool.execution.completed")["status"])
	require.Equal(t, map[string]any{"kind": "tool_call", "message": "exit status 2"}, failed.Payload)
	require.Equal(t, provider.P1, failed.Priority)
	require.NotEmpty(t, failed.ItemID)
	prpschema.RequireValidEvents(t, evs)

	_, evs = r.wsTurn("echo half a message ;; fail")
	var tail []provider.Event
	for _, e := range evs {
		if e.EventType == "item.completed" || e.EventType == "item.failed" || e.EventType == "turn.failed" {
			tail = append(tail, e)
		}
	}
	require.Equal(t, []string{"item.completed", "item.failed", "turn.failed"}, types(tail))
	require.Equal(t, tail[0].ItemID, tail[1].ItemID)
	require.Equal(t, "assistant_message", tail[1].Payload["kind"])
	require.Equal(t, tail[2].Payload["message"], tail[1].Payload["message"], "the failure code's text, not the agent's")
	require.NotContains(t, tail[1].Payload["message"], "fake failure")
	prpschema.RequireValidEvents(t, evs)
}

// TestWorkspace25_RestartAdopts: runnerd goes away and a new process
// re-adopts the live agent → session.reconciled {providerSessionId,
// activeTurnId, outcome: adopted} (runner.reconciled comes first from
// the store; internal/runner checks the pair on the wire).
func TestWorkspace25_RestartAdopts(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	r.turn("echo once")
	r.sink.waitEvent(t, "run.terminal")
	r.m.Close()
	st, before := r.sink.snapshot()
	r.m = NewManager(r.cfg, st)
	require.NoError(t, r.m.Start())
	_, evs := r.sink.snapshot()
	got := since(evs, len(before))
	require.Equal(t, []string{"session.reconciled"}, types(got))
	require.Equal(t, map[string]any{"providerSessionId": "sess-0001", "activeTurnId": nil, "outcome": "adopted"}, got[0].Payload)
	prpschema.RequireValidEvents(t, got)
}

// metricsOf are the sandbox.metric events of evs.
func metricsOf(evs []provider.Event) []provider.Event {
	var out []provider.Event
	for _, e := range evs {
		if e.EventType == "sandbox.metric" {
			out = append(out, e)
		}
	}
	return out
}

// TestWorkspace24_SandboxMetric: --sandbox-metric-interval-ms 1000 and a
// 3 s turn → 2 to 4 sandbox.metric (P2), with cpuUsageSeconds,
// diskFreeBytes, diskTotalBytes and loadAverage1m numeric where their
// source exists; none while idle; interval 0 → none.
func TestWorkspace24_SandboxMetric(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MetricInterval = time.Second })
	r.prepare()
	r.open()
	_, before := r.sink.snapshot()
	require.Empty(t, metricsOf(before), "none before a turn")
	r.turn("sleep 3000")
	evs := r.sink.waitEvent(t, "run.terminal")
	ms := metricsOf(evs)
	require.GreaterOrEqual(t, len(ms), 2)
	t.Logf("sandbox.metric in a 3 s turn at 1000 ms: %d; the first: %v", len(ms), ms[0].Payload)
	require.LessOrEqual(t, len(ms), 4)
	end := len(evs)
	for i, e := range evs {
		if e.EventType == "run.terminal" {
			end = i
		}
	}
	for _, e := range metricsOf(evs[end:]) {
		require.Fail(t, "a metric after the turn's end", "%v", e.Payload)
	}
	hasCgroup := sandboxCPUStat() != ""
	for _, e := range ms {
		require.Equal(t, provider.P2, e.Priority)
		require.EqualValues(t, 1000, e.Payload["intervalMs"])
		require.NotEmpty(t, e.Payload["sampledAt"])
		require.IsType(t, uint64(0), e.Payload["diskFreeBytes"])
		require.IsType(t, uint64(0), e.Payload["diskTotalBytes"])
		require.IsType(t, float64(0), e.Payload["loadAverage1m"])
		if hasCgroup {
			require.IsType(t, float64(0), e.Payload["cpuUsageSeconds"])
		}
	}
	prpschema.RequireValidEvents(t, ms)

	// Idle: the ticker is gone with the turn.
	n := len(evs)
	time.Sleep(1500 * time.Millisecond)
	_, evs = r.sink.snapshot()
	require.Empty(t, metricsOf(evs[n:]), "none while idle")

	off := newRig(t)
	off.prepare()
	off.open()
	off.turn("sleep 1200")
	require.Empty(t, metricsOf(off.sink.waitEvent(t, "run.terminal")), "interval 0 disables")
}

// sandboxCPUStat is this process's cgroup2 cpu.stat, "" when there is none.
func sandboxCPUStat() string {
	dir, err := cgroup.Own()
	if err != nil {
		return ""
	}
	p := filepath.Join(dir, "cpu.stat")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}
