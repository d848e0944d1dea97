package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// TestOpenCode01_TurnEndToEnd: runnerd (--opencode-executable naming
// test/fakeopencode) + pcwrap, driven by the fake core: run.prepare kind
// opencode (its command/args, the reference's Node facade, ignored),
// session.open, a turn with text and a tool call, and a second turn on the
// same server → the shared mapper's events, one run.terminal each,
// contiguous, every event schema-valid (codex.md §6).
func TestOpenCode01_TurnEndToEnd(t *testing.T) {
	r := newAgentRig(t, "--opencode-executable", testbin.Build(t, "test/fakeopencode"))
	r.start(t)
	r.prepareDescriptor(t, map[string]any{"kind": "opencode", "provider": "opencode", "driver": "opencode_server",
		"providerVersion": "opencode-server-v1", "command": "node", "args": []string{"opencode-app-server-proxy.js"},
		"cwd": t.TempDir(), "approvalPolicy": "never", "model": "fake/fake-model", "instructions": "Be brief."})
	r.open(t)
	res := r.run(t, "turn.start", map[string]any{"text": "FAKEOC: tool make check"})
	require.Equal(t, "completed", res.Status, string(res.Result))
	evs := r.waitEvents(t, "run.terminal", 1)
	for _, typ := range []string{"session.started", "turn.started", "item.delta", "tool.execution.started",
		"tool.execution.completed", "usage.reported", "turn.completed"} {
		require.GreaterOrEqual(t, countType(evs, typ), 1, typ)
	}
	res = r.run(t, "turn.start", map[string]any{"text": "FAKEOC: text second turn"})
	require.Equal(t, "completed", res.Status, string(res.Result))
	evs = r.waitEvents(t, "run.terminal", 2)
	require.Equal(t, 2, countType(evs, "turn.completed"))
	requireContiguous(t, evs)
	r.requireSchemaValid(t)
	for _, raw := range r.c.core.Snapshot().Events {
		require.False(t, strings.Contains(string(raw), "OPENCODE_SERVER_PASSWORD"))
	}
}
