package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/state"
)

// toolsBound bounds each wait of the tool scenarios over the binaries.
const toolsBound = 30 * time.Second

// agentToolState is the executor's bridge and call table, read from the
// state store's acpAgent record (state.Read: a consistent copy, without
// the live runnerd's lock).
type agentToolState struct {
	Bridge *struct {
		Port int `json:"port"`
	} `json:"bridge"`
	Tools *struct {
		Calls []struct {
			CallID string `json:"callId"`
			State  string `json:"state"`
		} `json:"calls"`
	} `json:"tools"`
}

func readToolState(t *testing.T, dir string) agentToolState {
	t.Helper()
	st, err := state.Read(dir)
	require.NoError(t, err)
	var a agentToolState
	_, err = st.Record("acpAgent", &a)
	require.NoError(t, err)
	return a
}

// TestTools05_RunnerdSIGKILL: runnerd is SIGKILLed while a tool call is
// pending; the relaunched runnerd re-adopts the agent and listens again on
// the bridge's port with the persisted secret and session; the same agent
// process (fakeacp's Go SDK client, repeating the call once after its
// connection error) re-takes the pending call without a second
// semantic_tool.input, and the core's result is delivered exactly once
// (tools.md §9 scenario 5, over the real binaries).
func TestTools05_RunnerdSIGKILL(t *testing.T) {
	r := newAgentRig(t)
	proc := r.start(t)
	res := r.run(t, "run.prepare", map[string]any{
		"provider":        map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(t), "args": []string{"--mcp-http"}, "cwd": t.TempDir()},
		"authorizedTools": commentCatalog(),
	})
	require.Equal(t, "completed", res.Status, string(res.Result))
	r.open(t)
	sessions := processSessions(r.dir)
	require.Len(t, sessions, 1)
	pgid := childPgid(t, filepath.Join(r.dir, "process-sessions", sessions[0]))
	res = r.run(t, "turn.start", map[string]any{"text": `mcp-call-retry issue.comment {"body":"survive"}`})
	require.Equal(t, "completed", res.Status, string(res.Result))
	evs := r.waitEvents(t, "semantic_tool.input", 1)
	in, _ := find(evs, "semantic_tool.input")
	st := field(t, in, "semantic_tool").(map[string]any)
	before := readToolState(t, r.dir)
	require.NotNil(t, before.Bridge)

	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	waitExit(t, proc)
	proc = r.start(t)
	r.waitEvents(t, "runner.reconciled", 1)
	deadline := time.Now().Add(toolsBound)
	for {
		s := readToolState(t, r.dir)
		if s.Tools != nil && len(s.Tools.Calls) == 1 && s.Tools.Calls[0].State == "pending" {
			require.Equal(t, before.Bridge.Port, s.Bridge.Port, "the same port")
			break
		}
		require.True(t, time.Now().Before(deadline), "the agent's repeated call never re-attached: %+v", s)
		time.Sleep(20 * time.Millisecond)
	}
	res = r.run(t, "semantic_tool.result", map[string]any{"callId": st["callId"], "operationId": st["operationId"],
		"inputDigest": st["content"].(map[string]any)["digest"], "result": map[string]any{"id": "c-kill"}, "isError": false})
	require.Equal(t, "completed", res.Status, string(res.Result))
	require.Contains(t, string(res.Result), `"delivered"`)
	evs = r.waitEvents(t, "run.terminal", 1)
	require.Equal(t, 1, countType(evs, "semantic_tool.input"))
	require.Equal(t, 1, countType(evs, "semantic_tool.result"))
	text := ""
	for _, e := range evs {
		if e.EventType == "item.delta" {
			text += field(t, e, "text").(string)
		}
	}
	require.Equal(t, 1, strings.Count(text, `tool issue.comment isError=false: {"id":"c-kill"}`), text)
	require.Equal(t, pgid, childPgid(t, filepath.Join(r.dir, "process-sessions", sessions[0])), "the same agent process")
	require.NoError(t, syscall.Kill(-pgid, 0), "the agent still runs")
}

// commentCatalog is run.prepare's authorizedTools with the one operation
// the tool-call tests have the agent call: issue.comment with a body.
func commentCatalog() map[string]any {
	op := catalog.Operation{OperationID: "issue.comment", Version: 1, Description: "Comment on the task.",
		InputSchema:    json.RawMessage(`{"type":"object","required":["body"],"properties":{"body":{"type":"string"}}}`),
		ResponseSchema: json.RawMessage(`{"type":"object"}`)}
	return map[string]any{"schema": catalog.Schema, "schemaVersion": 1,
		"catalogDigest": catalog.Digest([]catalog.Operation{op}), "operations": []catalog.Operation{op}}
}
