package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
	"github.com/pcrunner/pcrunner/internal/toolcall"
)

func fakecodexBin(t testing.TB) string {
	t.Helper()
	return testbin.Build(t, "test/fakecodex")
}

// prepareCodex binds fakecodex as kind codex with flags; extra is merged
// into the run.prepare payload.
func (r *rig) prepareCodex(extra map[string]any, flags ...string) {
	r.t.Helper()
	desc := map[string]any{"provider": map[string]any{
		"kind": "codex", "provider": "codex", "driver": "codex_app_server", "providerVersion": "codex-app-server-v1",
		"command": fakecodexBin(r.t), "args": flags, "cwd": r.cwd, "approvalPolicy": "never",
	}}
	for k, v := range extra {
		desc[k] = v
	}
	desc["provider"].(map[string]any)["instructions"] = "Be brief."
	b, _ := json.Marshal(desc)
	_, err := r.m.Prepare(b)
	require.NoError(r.t, err)
}

// transcript reads fakecodex's NDJSON transcript: (dir, method or "").
func readTranscript(t testing.TB, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var e map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &e))
		out = append(out, e)
	}
	return out
}

func methodsIn(tr []map[string]any) []string {
	var out []string
	for _, e := range tr {
		if e["dir"] != "in" {
			continue
		}
		m, _ := e["msg"].(map[string]any)
		if s, ok := m["method"].(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func validateAll(t *testing.T, evs []acpx.Event) {
	t.Helper()
	s := prpschema.Load(t)
	for i, e := range evs {
		require.NoError(t, prpschema.Validate(s.EventV1, eventEnvelope(i+1, e)), "event %d %s", i, e.EventType)
		switch e.EventType {
		case "usage.reported":
			require.NoError(t, prpschema.Validate(s.Usage, e.Payload), "usage payload %d", i)
		case "runtime_request.created":
			require.NoError(t, prpschema.Validate(s.Request, e.Payload["request"]), "request payload %d", i)
		}
	}
}

// eventEnvelope wraps an event the way runnerd's outbox does.
func eventEnvelope(seq int, ev acpx.Event) map[string]any {
	env := map[string]any{
		"schema": "paperclip.prp.event.v1", "sourceEventId": fmt.Sprintf("event_runner-1_%016d", seq),
		"sourceSeq": seq, "sourceInstanceId": "runner-1", "sourceKind": "runner", "runId": "run-1",
		"normalizedSessionId": "session-1", "eventType": ev.EventType, "schemaVersion": 1, "priority": ev.Priority,
		"emittedAt": "2026-01-02T03:04:05Z", "payload": ev.Payload,
	}
	if ev.TurnID != "" {
		env["turnId"] = ev.TurnID
	}
	if ev.ItemID != "" {
		env["itemId"] = ev.ItemID
	}
	return env
}

// TestCodex02_ColdOpen: initialize, initialized, thread/start with the
// instructions in developerInstructions; session.started with the thread id.
func TestCodex02_ColdOpen(t *testing.T) {
	r := newToolRig(t)
	tr := filepath.Join(t.TempDir(), "t.ndjson")
	r.prepareCodex(map[string]any{"authorizedTools": catalogJSON(t, opComment)}, "--transcript", tr)
	// instructions ride in the provider descriptor (tools.md §5).
	r.open()
	evs := r.sink.waitEvent(t, "session.started")
	p := payloadOf(evs, "session.started")
	require.NotNil(t, p)
	got, _ := json.Marshal(p)
	require.Contains(t, string(got), "thread-0001")
	entries := readTranscript(t, tr)
	require.Equal(t, []string{"initialize", "initialized", "thread/start"}, methodsIn(entries))
	var start map[string]any
	for _, e := range entries {
		if m, _ := e["msg"].(map[string]any); m["method"] == "thread/start" {
			start, _ = m["params"].(map[string]any)
		}
	}
	require.Equal(t, "Be brief.", start["developerInstructions"])
	require.Equal(t, "never", start["approvalPolicy"])
	require.Equal(t, "danger-full-access", start["sandbox"])
	var names []string
	for _, d := range start["dynamicTools"].([]any) {
		names = append(names, d.(map[string]any)["name"].(string))
	}
	require.Equal(t, []string{"issue.comment", "paperclip_finish", "paperclip_block"}, names)
	validateAll(t, evs)
}

// TestCodex03_Turn: plan, usage, deltas, a command execution and
// completion → the events of codex.md §5 in order, one run.terminal.
func TestCodex03_Turn(t *testing.T) {
	r := newRig(t)
	r.prepareCodex(nil, "--plan", "--usage", "--deltas", "3", "--command")
	r.open()
	n := len(r.sink.waitEvent(t, "session.started"))
	r.turn("do it")
	evs := since(r.sink.waitEvent(t, "run.terminal"), n)
	t.Logf("events: %v", types(evs))
	require.Equal(t, 1, count(evs, "run.terminal"))
	require.Equal(t, 1, count(evs, "turn.completed"))
	require.Equal(t, 1, count(evs, "plan.updated"))
	require.Equal(t, 1, count(evs, "tool.execution.started"))
	require.Equal(t, 1, count(evs, "tool.execution.completed"))
	require.GreaterOrEqual(t, count(evs, "usage.reported"), 1)
	require.Equal(t, 3, count(evs, "item.delta"))
	require.Contains(t, said(evs), "hello from fakecodex [3]")
	order := types(evs)
	idx := func(typ string) int {
		for i, e := range order {
			if e == typ {
				return i
			}
		}
		return -1
	}
	require.Less(t, idx("turn.started"), idx("plan.updated"))
	require.Less(t, idx("plan.updated"), idx("tool.execution.started"))
	require.Less(t, idx("tool.execution.completed"), idx("item.delta"))
	require.Less(t, idx("item.delta"), idx("turn.completed"))
	require.Less(t, idx("turn.completed"), idx("run.terminal"))
	validateAll(t, evs)
}

// TestCodex05_Interrupt: turn.interrupt → turn/interrupt, then
// turn.interrupted; the app-server keeps running (the next turn reuses it).
func TestCodex05_Interrupt(t *testing.T) {
	r := newRig(t)
	tr := filepath.Join(t.TempDir(), "t.ndjson")
	r.prepareCodex(nil, "--hang-turn", "--transcript", tr)
	r.open()
	r.turn("hang")
	r.sink.waitEvent(t, "turn.started")
	eventually(t, "turn/started seen", func() bool {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		tt := r.m.cl.Wire().Turn
		return tt != nil && tt.ProviderTurnID != ""
	})
	pid := agentPgid(t, r.sessionDir())
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	res, err := r.m.Cancel(ctx, Interrupt)
	require.NoError(t, err)
	require.Contains(t, string(res), "interrupt_requested")
	evs := r.sink.waitEvent(t, "turn.interrupted")
	require.Equal(t, 0, count(evs, "harness.exited"))
	require.Contains(t, methodsIn(readTranscript(t, tr)), "turn/interrupt")
	require.Equal(t, pid, agentPgid(t, r.sessionDir()), "the same app-server keeps running")
	n := len(evs)
	r.turn("again")
	eventually(t, "second turn started", func() bool { _, evs := r.sink.snapshot(); return count(since(evs, n), "turn.started") == 1 })
	validateAll(t, evs)
}

// toolAnswers are the item/tool/call answers in a fakecodex transcript.
func toolAnswers(t testing.TB, tr []map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range tr {
		m, _ := e["msg"].(map[string]any)
		if e["dir"] != "in" || m["method"] != nil {
			continue
		}
		if id, _ := m["id"].(string); strings.HasPrefix(id, "srv-") {
			res, _ := m["result"].(map[string]any)
			out = append(out, res)
		}
	}
	return out
}

func (r *rig) prepareCodexTools(cat json.RawMessage, flags ...string) {
	r.t.Helper()
	r.prepareCodex(map[string]any{"authorizedTools": cat}, flags...)
}

// TestCodex04_DynamicToolCall: item/tool/call of a catalog tool →
// semantic_tool.input → the core's result → Codex receives {success:
// true, contentItems}.
func TestCodex04_DynamicToolCall(t *testing.T) {
	r := newToolRig(t)
	tr := filepath.Join(t.TempDir(), "t.ndjson")
	r.prepareCodexTools(catalogJSON(t, opComment), "--tool-call", "issue.comment", "--tool-args", `{"body":"hi"}`, "--transcript", tr)
	r.open()
	r.turn("call the tool")
	in := r.waitInputs(1)
	require.Equal(t, "issue.comment", in[0]["operationId"])
	res, err := r.result("cmd-res-1", in[0], `{"id":"c-1"}`, false)
	require.NoError(t, err)
	require.Equal(t, "delivered", statusOf(t, res))
	evs := r.sink.waitEvent(t, "run.terminal")
	require.Contains(t, said(evs), "tool answered")
	ans := toolAnswers(t, readTranscript(t, tr))
	require.Len(t, ans, 1)
	require.Equal(t, true, ans[0]["success"])
	items := ans[0]["contentItems"].([]any)
	require.Equal(t, map[string]any{"type": "inputText", "text": `{"id":"c-1"}`}, items[0])
	require.Equal(t, 1, count(evs, toolcall.EventInput))
	require.Equal(t, 1, count(evs, toolcall.EventResult))
	validateAll(t, evs)
}

// TestCodex04_UnauthorizedTool: a tool outside the catalog →
// invalid_tool_call to Codex, no PRP event.
func TestCodex04_UnauthorizedTool(t *testing.T) {
	r := newToolRig(t)
	tr := filepath.Join(t.TempDir(), "t.ndjson")
	r.prepareCodexTools(catalogJSON(t, opComment), "--tool-call", "shell.rm", "--transcript", tr)
	r.open()
	r.turn("call a bad tool")
	evs := r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, 0, semanticCount(evs))
	ans := toolAnswers(t, readTranscript(t, tr))
	require.Len(t, ans, 1)
	require.Equal(t, false, ans[0]["success"])
	text := ans[0]["contentItems"].([]any)[0].(map[string]any)["text"].(string)
	require.True(t, strings.HasPrefix(text, "invalid_tool_call"), text)
	validateAll(t, evs)
}

// TestCodex01_Prepare: kind codex with approvalPolicy never (or absent)
// binds the codex driver; on-request fails command_execution_failed.
func TestCodex01_Prepare(t *testing.T) {
	for _, ap := range []any{"never", nil} {
		b, err := ParseDescriptor(json.RawMessage(mustJSON(map[string]any{"provider": map[string]any{"kind": "codex", "approvalPolicy": ap, "cwd": "/w"}})))
		require.NoError(t, err)
		require.Equal(t, DriverCodex, b.Driver)
		require.Equal(t, "codex", b.Command)
		require.Equal(t, []string{"app-server"}, b.Args)
	}
	_, err := ParseDescriptor(json.RawMessage(mustJSON(map[string]any{"provider": map[string]any{"kind": "codex", "approvalPolicy": "on-request"}})))
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, CodeCommandExecutionFailed, ce.Code)
}

// TestCodexUnknownKindNamesIt: a kind still unknown fails
// command_execution_failed with a message naming the kind (issue 11 item
// 4); a kind that is not a plain name is not echoed.
func TestCodexUnknownKindNamesIt(t *testing.T) {
	for kind, want := range map[string]string{
		"claude_managed": `"claude_managed"`, "aws_agentcore": `"aws_agentcore"`, "cursor_cloud": `"cursor_cloud"`,
		"": "(absent)", "bad kind\n": "(unrecognised)",
	} {
		_, err := ParseDescriptor(json.RawMessage(mustJSON(map[string]any{"provider": map[string]any{"kind": kind}})))
		var ce *CommandError
		require.ErrorAs(t, err, &ce, kind)
		require.Equal(t, CodeCommandExecutionFailed, ce.Code)
		require.Contains(t, ce.Message, want)
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
