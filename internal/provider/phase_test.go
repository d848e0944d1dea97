package provider

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// TestWorkspace23_ToolFailedMessage: a tool call whose final status is
// failed closes (tool.execution.completed, item.completed) and then gets
// item.failed, with its error text bounded, or "tool failed" without one;
// a completed one gets none.
func TestWorkspace23_ToolFailedMessage(t *testing.T) {
	mp, st := testMapper(), &MapState{}
	evs := mp.TurnStarted(st, "turn-1")
	evs = append(evs, mp.Update(st, "turn-1", upd(t, `{"sessionUpdate":"tool_call","toolCallId":"a","title":"t","status":"in_progress"}`))...)
	evs = append(evs, mp.Update(st, "turn-1", upd(t, `{"sessionUpdate":"tool_call_update","toolCallId":"a","status":"failed"}`))...)
	evs = append(evs, mp.Update(st, "turn-1", upd(t, `{"sessionUpdate":"tool_call","toolCallId":"b","title":"t","status":"completed"}`))...)
	prpschema.RequireValidEvents(t, evs)
	got := types(evs)
	require.Equal(t, []string{"tool.execution.completed", "item.completed", "item.failed"}, got[3:6])
	require.Equal(t, map[string]any{"kind": "tool_call", "message": "tool failed"}, evs[5].Payload)
	require.Equal(t, evs[4].ItemID, evs[5].ItemID)
	require.NotContains(t, got[6:], "item.failed", "a completed tool call has no item.failed")
}

// TestPhaseEvents: the payloads and priorities of workspace.md §8.
func TestPhaseEvents(t *testing.T) {
	require.Equal(t, map[string]any{"driverKind": "acpx_runtime", "transport": "stdio_jsonrpc", "agent": "claude"},
		HarnessStarting("", "", "claude").Payload)
	require.Equal(t, map[string]any{"driverKind": "opencode_server", "transport": "http_sse", "agent": "opencode"},
		HarnessStarting("opencode_server", TransportHTTP, "opencode").Payload)
	require.Equal(t, "session.starting", SessionStarting(false, "x").EventType)
	require.Equal(t, map[string]any{}, SessionStarting(false, "x").Payload)
	require.Equal(t, map[string]any{"providerSessionId": "s"}, SessionStarting(true, "s").Payload)
	require.Equal(t, map[string]any{"providerSessionId": "s", "activeTurnId": "t", "outcome": "adopted"},
		SessionReconciled("s", "t", ReconciledAdopted).Payload)
	require.Equal(t, map[string]any{}, TurnSubmitted("t").Payload)
	evs := append(WorkspaceReady("/w"), PhaseChanged(PhaseExecuting), HarnessStarting("", "", "a"), SessionStarting(false, ""),
		SessionStarting(true, "s"), SessionReconciled("s", "", ReconciledReloaded), TurnSubmitted("t"))
	for _, e := range evs {
		require.Equal(t, P1, e.Priority, e.EventType)
	}
	prpschema.RequireValidEvents(t, evs)
}
