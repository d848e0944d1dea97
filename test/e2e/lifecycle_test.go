package e2e

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// suspendingReasons lists the reasons of the runner.suspending events.
func suspendingReasons(t *testing.T, evs []event) []string {
	t.Helper()
	var out []string
	for _, e := range evs {
		if e.EventType != "runner.suspending" {
			continue
		}
		var p struct {
			Reason string `json:"reason"`
		}
		require.NoError(t, json.Unmarshal(e.Payload, &p))
		out = append(out, p.Reason)
	}
	return out
}

// TestPerTurnRunnerdExitsAfterEachTurn: the server's default lifecycle
// (--lifecycle-mode per_turn, prp.md §7.4, §13): runnerd exits 0 by itself
// once its turn's terminal events are acknowledged, after runner.suspending
// {reason: per_turn_complete}, with the agent stopped (no process session
// left behind, nothing orphaned). The next turn's runnerd, on the same
// state, resumes the session (session/load) and runs the next turn the
// same way.
func TestPerTurnRunnerdExitsAfterEachTurn(t *testing.T) {
	r := newAgentRig(t, "--lifecycle-mode", "per_turn")
	cmd := r.start(t)
	r.prepare(t, "--supports-load-session") // the next runnerd resumes the ACP session by session/load
	r.open(t)
	require.Equal(t, "completed", r.run(t, "turn.start", map[string]any{"text": "echo one"}).Status)
	require.Equal(t, 0, waitExit(t, cmd), "a per-turn runnerd ends by itself, status 0")
	evs := r.events(t)
	require.Equal(t, []string{"per_turn_complete"}, suspendingReasons(t, evs))
	require.Equal(t, 1, countType(evs, "run.terminal"))
	require.Empty(t, processSessions(r.dir), "the agent was stopped by the exiting runnerd")
	requireContiguous(t, evs)

	cmd = r.start(t)
	r.open(t)
	require.Equal(t, "completed", r.run(t, "turn.start", map[string]any{"text": "echo two"}).Status)
	require.Equal(t, 0, waitExit(t, cmd))
	evs = r.events(t)
	require.Equal(t, []string{"per_turn_complete", "per_turn_complete"}, suspendingReasons(t, evs))
	require.Equal(t, 2, countType(evs, "run.terminal"))
	require.Empty(t, processSessions(r.dir))
	requireContiguous(t, evs)
}

// TestWarmRunnerdIdleTimeout: a warm runnerd outlives its turn and exits 0
// after --idle-timeout-ms with no command and no turn (runner.suspending
// {reason: idle_timeout}), stopping its agent first.
func TestWarmRunnerdIdleTimeout(t *testing.T) {
	r := newAgentRig(t, "--lifecycle-mode", "warm", "--idle-timeout-ms", "2000")
	cmd := r.start(t)
	r.prepare(t)
	r.open(t)
	require.Equal(t, "completed", r.run(t, "turn.start", map[string]any{"text": "echo one"}).Status)
	require.Equal(t, 0, waitExit(t, cmd))
	evs := r.events(t)
	require.Equal(t, []string{"idle_timeout"}, suspendingReasons(t, evs))
	require.Equal(t, 1, countType(evs, "run.terminal"))
	require.Empty(t, processSessions(r.dir))
}

// TestLifetimeRotatesAfterActiveTurn: --max-lifetime-ms passing while
// connected during a turn does not cut the turn: runnerd rotates once the
// turn has ended (runner.suspending {reason: max_lifetime_rotation} after
// run.terminal), exit 0, as the reference does.
func TestLifetimeRotatesAfterActiveTurn(t *testing.T) {
	r := newAgentRig(t, "--max-lifetime-ms", "3000")
	cmd := r.start(t)
	r.prepare(t)
	r.open(t)
	require.Equal(t, "completed", r.run(t, "turn.start", map[string]any{"text": "sleep 4000"}).Status)
	require.Equal(t, 0, waitExit(t, cmd))
	evs := r.events(t)
	require.Equal(t, []string{"max_lifetime_rotation"}, suspendingReasons(t, evs))
	terminal, ok := find(evs, "run.terminal")
	require.True(t, ok, "the turn ran to its end")
	sus, _ := find(evs, "runner.suspending")
	require.Less(t, terminal.SourceSeq, sus.SourceSeq)
	require.Empty(t, processSessions(r.dir))
}
