package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// peerProvider is the T1 peer (the ACP TypeScript SDK example agent, acp.md
// §9) as an acpx descriptor; the test skips cleanly without node or the
// install (`npm ci --prefix test/peers`).
func peerProvider(t *testing.T, mode string) map[string]any {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not on PATH; the T1 real-peer test needs Node 20+")
	}
	script := filepath.Join(testbin.RepoRoot(t), "test", "peers", "node_modules", "@agentclientprotocol", "sdk", "dist", "examples", "agent.js")
	if _, err := os.Stat(script); err != nil {
		t.Skip("T1 peer missing; install it with `npm ci --prefix test/peers`")
	}
	return map[string]any{"kind": "acpx", "agent": "example", "command": node, "args": []string{script},
		"cwd": t.TempDir(), "permissionMode": mode}
}

// TestACP25_RealPeer drives the real T1 agent end to end through
// runnerd and pcwrap: a full turn whose permission request is answered by
// approve-all (no PRP event) ends end_turn with one result and one terminal; a
// turn.interrupt while a (manual) permission request is pending settles
// the turn interrupted and the request cancelled (acp.md §11 scenario 25).
func TestACP25_RealPeer(t *testing.T) {
	t.Run("full-turn", func(t *testing.T) {
		t.Parallel()
		r := newAgentRig(t)
		r.start(t)
		r.prepareDescriptor(t, peerProvider(t, "approve-all"))
		r.open(t)
		r.run(t, "turn.start", map[string]any{"text": "hello"})
		evs := r.waitEvents(t, "run.terminal", 1)
		requireContiguous(t, evs)
		// approve-all answers at once, with no PRP event (tools.md §6).
		require.Zero(t, countType(evs, "runtime_request.created"))
		require.Zero(t, countType(evs, "runtime_request.resolved"))
		done, _ := find(evs, "turn.completed")
		require.Equal(t, "end_turn", field(t, done, "stopReason"))
		require.Equal(t, 0, countType(evs, "run.result.proposed"), "no synthetic result without a completion contract (tools.md §4)")
	})
	t.Run("cancel-during-permission", func(t *testing.T) {
		t.Parallel()
		r := newAgentRig(t, "--cancel-grace-ms", "2000")
		r.start(t)
		r.prepareDescriptor(t, peerProvider(t, "manual"))
		r.open(t)
		r.run(t, "turn.start", map[string]any{"text": "hello"})
		r.waitEvents(t, "runtime_request.created", 1)
		res := r.run(t, "turn.interrupt", map[string]any{})
		require.Equal(t, "completed", res.Status)
		evs := r.waitEvents(t, "run.terminal", 1)
		require.Equal(t, 1, countType(evs, "turn.interrupted"))
		require.Equal(t, 1, countType(evs, "runtime_request.cancelled"))
		require.Zero(t, countType(evs, "turn.completed"))
	})
}
