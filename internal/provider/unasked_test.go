package provider

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// TestUnaskedTerminalContentMapsAsReference: Gemini CLI and Pi send tool
// call content of type "terminal" although runnerd advertised terminal
// false. It maps to the tool's output as a reference,
// "[terminal]", never the terminal's bytes, and every event stays valid.
func TestUnaskedTerminalContentMapsAsReference(t *testing.T) {
	mp := testMapper()
	st := &MapState{}
	evs := mp.TurnStarted(st, "t1")
	for _, raw := range []string{
		`{"sessionUpdate":"tool_call","toolCallId":"run_shell_command-1","title":"printf pcrunner","kind":"execute","status":"pending"}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"run_shell_command-1","status":"in_progress","content":[{"type":"terminal","terminalId":"term-1"}]}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"run_shell_command-1","status":"completed","content":[{"type":"terminal","terminalId":"term-1"},{"type":"content","content":{"type":"text","text":"pcrunner-42"}}]}`,
	} {
		evs = append(evs, mp.Update(st, "t1", upd(t, raw))...)
	}
	evs = append(evs, mp.Settle(st, Settlement{TurnID: "t1", StopReason: "end_turn"})...)
	prpschema.RequireValidEvents(t, evs)
	var done map[string]any
	for _, e := range evs {
		if e.EventType == "tool.execution.completed" {
			done = e.Payload
		}
	}
	require.NotNil(t, done, "types %v", types(evs))
	require.Equal(t, "[terminal]pcrunner-42", done["output"])
	require.False(t, strings.Contains(jsonString(done["output"].(string)), "term-1"), "the terminal id is no output")
}

// TestPermissionWithoutToolCallMaps: Gemini CLI asks permission for a tool
// call it never announced with tool_call. The request
// names an item of its own, derived from the tool call id, and is valid.
func TestPermissionWithoutToolCallMaps(t *testing.T) {
	mp := testMapper()
	st := &MapState{}
	evs := mp.TurnStarted(st, "t1")
	rr, pe := mp.PermissionRequest(st, "t1", json.RawMessage(`3`), PermissionRequest{
		ToolCall: PermissionToolCall{ToolCallID: "run_shell_command-9", Title: "printf pcrunner", Kind: "execute"},
		Options: []PermissionOption{{OptionID: "proceed_once", Name: "Allow", Kind: OptionAllowOnce},
			{OptionID: "cancel", Name: "Reject", Kind: OptionRejectOnce}},
	})
	require.NotEmpty(t, rr.ItemID)
	require.Equal(t, "t1-toolcall-run-shell-command-9", rr.ItemID)
	evs = append(evs, pe...)
	evs = append(evs, mp.RequestResolved(rr, ActionAccept)...)
	evs = append(evs, mp.Settle(st, Settlement{TurnID: "t1", StopReason: "end_turn"})...)
	prpschema.RequireValidEvents(t, evs)
}
