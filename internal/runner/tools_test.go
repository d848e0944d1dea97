package runner

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// TestTools03_ThroughTheLoop: the whole path with the loop and the fake
// core: fakeacp's MCP client calls a catalog tool through the bridge it got
// in session/new, semantic_tool.input reaches the core with the run
// identity as correlation, the core's semantic_tool.result command is
// delivered (not command_not_implemented), the agent quotes the result,
// and every event validates against the reference event schema; a repeat
// of the result is a duplicate; an unknown call is
// semantic_tool_not_pending; the bridge's secret is nowhere in the events
// (tools.md §9 scenario 3, §3 items 3–5).
func TestTools03_ThroughTheLoop(t *testing.T) {
	schemas := prpschema.Load(t)
	h := newHarness(t, nil)
	h.agentRun()
	op := catalog.Operation{OperationID: "issue.comment", Version: 1, Description: "Comment on the task.",
		InputSchema:    json.RawMessage(`{"type":"object","required":["body"],"properties":{"body":{"type":"string"}}}`),
		ResponseSchema: json.RawMessage(`{"type":"object","required":["id"],"properties":{"id":{"type":"string"}}}`)}
	cat, err := json.Marshal(map[string]any{"schema": catalog.Schema, "schemaVersion": 1,
		"catalogDigest": catalog.Digest([]catalog.Operation{op}), "operations": []catalog.Operation{op}})
	require.NoError(t, err)
	b, err := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
		"command": fakeacpBin(t), "args": []string{"--mcp-http"}, "cwd": t.TempDir()}, "authorizedTools": json.RawMessage(cat)})
	require.NoError(t, err)
	require.Equal(t, "completed", h.waitResult(h.queue("run.prepare", string(b)).CommandID).Status)
	require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
	require.Equal(t, "completed", h.waitResult(h.queue("turn.start", `{"text":"mcp-call paperclip.issue.comment {\"body\":\"hi\"}"}`).CommandID).Status)

	s := h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "semantic_tool.input")) == 1
	})
	var in struct {
		SemanticTool struct {
			CallID      string          `json:"callId"`
			OperationID string          `json:"operationId"`
			Correlation json.RawMessage `json:"correlation"`
			Input       json.RawMessage `json:"input"`
		} `json:"semantic_tool"`
	}
	require.NoError(t, json.Unmarshal(prptest.OfType(prptest.DecodeEvents(t, s.Events), "semantic_tool.input")[0].Payload, &in))
	// Both semantic events are executor events under the call's id, so the
	// receipt journal deduplicates them (tools.md §3 item 3, prp.md §9.4).
	require.Equal(t, state.ExecutorSourceEventID(testIdentity.RunnerInstanceID, "semantic_tool.input:"+in.SemanticTool.CallID),
		prptest.OfType(prptest.DecodeEvents(t, s.Events), "semantic_tool.input")[0].SourceEventID)
	require.JSONEq(t, `{"runId":"`+testIdentity.RunID+`","normalizedSessionId":"`+testIdentity.NormalizedSessionID+
		`","turnId":"`+testIdentity.TurnID+`","itemId":"`+testIdentity.ItemID+`"}`, string(in.SemanticTool.Correlation))
	result := func(res string) prp.CommandResultPayload {
		p, err := json.Marshal(map[string]any{"callId": in.SemanticTool.CallID, "operationId": in.SemanticTool.OperationID,
			"input": in.SemanticTool.Input, "sourceEventType": "semantic_tool.input", "correlation": in.SemanticTool.Correlation,
			"result": json.RawMessage(res), "isError": false})
		require.NoError(t, err)
		return h.waitResult(h.queue("semantic_tool.result", string(p)).CommandID)
	}
	res := result(`{"id":"c-1"}`)
	require.Equal(t, "completed", res.Status, string(res.Result))
	require.JSONEq(t, `{"status":"delivered","callId":"`+in.SemanticTool.CallID+`"}`, string(res.Result))
	s = h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "run.terminal")) == 1
	})
	res = result(`{"id":"c-1"}`)
	require.Equal(t, "completed", res.Status)
	require.Contains(t, string(res.Result), `"duplicate"`)
	p, _ := json.Marshal(map[string]any{"callId": "call_nope", "operationId": "issue.comment", "result": map[string]any{}})
	res = h.waitResult(h.queue("semantic_tool.result", string(p)).CommandID)
	require.Equal(t, "failed", res.Status)
	require.Equal(t, "semantic_tool_not_pending", resultCodeOf(t, res))

	evs := prptest.DecodeEvents(t, h.core.Snapshot().Events)
	require.Len(t, prptest.OfType(evs, "semantic_tool.result"), 1)
	require.Equal(t, state.ExecutorSourceEventID(testIdentity.RunnerInstanceID, "semantic_tool.result:"+in.SemanticTool.CallID),
		prptest.OfType(evs, "semantic_tool.result")[0].SourceEventID)
	text := ""
	for _, e := range prptest.OfType(evs, "item.delta") {
		var d struct {
			Text string `json:"text"`
		}
		require.NoError(t, json.Unmarshal(e.Payload, &d))
		text += d.Text
	}
	require.Contains(t, text, `tool paperclip.issue.comment isError=false: {"id":"c-1"}`)
	var rec struct {
		Bridge struct {
			Secret string `json:"secret"`
		} `json:"bridge"`
	}
	_, err = h.readState().Record(agentRecord, &rec)
	require.NoError(t, err)
	require.NotEmpty(t, rec.Bridge.Secret, "the record keeps the bridge for a hot restart")
	for _, raw := range h.core.Snapshot().Events {
		var env struct {
			Payload json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(raw, &env))
		require.NoError(t, prpschema.Validate(schemas.EventV1, env.Payload), "event %s", env.Payload)
		require.False(t, strings.Contains(string(raw), rec.Bridge.Secret), "the bridge secret never reaches an event")
	}
}
