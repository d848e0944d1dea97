package e2e

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWorkspace25_RestartReconciles: kill -9 runnerd while its agent idles
// and relaunch it on the same state dir → runner.reconciled, then
// session.reconciled {providerSessionId, activeTurnId: null, outcome:
// adopted} (workspace.md §8, scenario 25).
func TestWorkspace25_RestartReconciles(t *testing.T) {
	r := newAgentRig(t)
	proc := r.start(t)
	r.prepare(t)
	r.open(t)
	res := r.run(t, "turn.start", map[string]any{"text": "echo hi"})
	require.Equal(t, "completed", res.Status, string(res.Result))
	r.waitEvents(t, "run.terminal", 1)
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	waitExit(t, proc)
	r.start(t)
	evs := r.waitEvents(t, "session.reconciled", 1)
	reconciled, session := -1, -1
	for i, e := range evs {
		switch e.EventType {
		case "runner.reconciled":
			reconciled = i
		case "session.reconciled":
			session = i
		}
	}
	require.GreaterOrEqual(t, reconciled, 0)
	require.Greater(t, session, reconciled, "runner.reconciled first")
	e := evs[session]
	require.Equal(t, "adopted", field(t, e, "outcome"))
	require.Equal(t, "sess-0001", field(t, e, "providerSessionId"))
	require.Nil(t, field(t, e, "activeTurnId"))
	requireContiguous(t, evs)
}
