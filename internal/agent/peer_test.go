package agent

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// peerAgent returns node and the T1 example agent (acp.md §9), skipping
// cleanly when either is absent (`npm ci --prefix test/peers`).
func peerAgent(t testing.TB) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not on PATH; the T1 real-peer test needs Node 20+")
	}
	script = filepath.Join(testbin.RepoRoot(t), "test", "peers", "node_modules", "@agentclientprotocol", "sdk", "dist", "examples", "agent.js")
	if _, err := os.Stat(script); err != nil {
		t.Skip("T1 peer missing; install it with `npm ci --prefix test/peers`")
	}
	return node, script
}

func (r *rig) preparePeer(mode string) {
	r.t.Helper()
	node, script := peerAgent(r.t)
	b, _ := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "example",
		"command": node, "args": []string{script}, "cwd": r.t.TempDir(), "permissionMode": mode}})
	_, err := r.m.Prepare(b)
	require.NoError(r.t, err)
}

// TestACP25_RealPeer drives T1 through pcwrap: a full turn whose
// permission request is answered by approve-all ends end_turn; a cancel
// while its permission request is pending (manual mode) settles as
// interrupted (acp.md §11 scenario 25).
func TestACP25_RealPeer(t *testing.T) {
	t.Run("full-turn", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		r.preparePeer("approve-all")
		r.open()
		r.turn("hello")
		evs := r.sink.waitEvent(t, "run.terminal")
		require.Zero(t, count(evs, "runtime_request.created"), "approve-all answers at once (tools.md §6)")
		require.Equal(t, 2, count(evs, "tool.execution.started"))
		require.Equal(t, "end_turn", payloadOf(evs, "turn.completed")["stopReason"])
		require.Equal(t, 0, count(evs, "run.result.proposed"), "no synthetic result without a completion contract (tools.md §4)")
	})
	t.Run("cancel-during-permission", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		r.preparePeer("manual")
		r.open()
		r.turn("hello")
		r.sink.waitEvent(t, "runtime_request.created")
		r.cancel(Interrupt)
		_, evs := r.sink.snapshot()
		require.Equal(t, 1, count(evs, "turn.interrupted"))
		require.Equal(t, 1, count(evs, "run.terminal"))
		require.Zero(t, count(evs, "turn.completed"))
		require.Equal(t, 1, count(evs, "runtime_request.cancelled"))
	})
}
