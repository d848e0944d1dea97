package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/codexapp"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
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
	require.Contains(t, string(got), `"driver":"codex_app_server"`)
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
	// Codex takes only [A-Za-z0-9_-] tool names: the dotted operation goes
	// as its flat name, which the catalog resolves back.
	require.Equal(t, []string{"issue_comment", "paperclip_finish", "paperclip_block"}, names)
	prpschema.RequireValidEvents(t, evs)
	validateTranscript(t, tr)
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
	require.Equal(t, "codex", payloadOf(evs, "turn.started")["provider"])
	require.Equal(t, "codex", payloadOf(evs, "run.terminal")["provider"])
	prpschema.RequireValidEvents(t, evs)
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
	prpschema.RequireValidEvents(t, evs)
	validateTranscript(t, tr)
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
	require.Equal(t, 1, count(evs, prp.EventSemanticToolInput))
	require.Equal(t, 1, count(evs, prp.EventSemanticToolResult))
	prpschema.RequireValidEvents(t, evs)
	validateTranscript(t, tr)
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
	prpschema.RequireValidEvents(t, evs)
	validateTranscript(t, tr)
}

// TestCodex01_Prepare: kind codex with approvalPolicy never (or absent)
// binds the codex driver; on-request fails command_execution_failed.
func TestCodex01_Prepare(t *testing.T) {
	for _, ap := range []any{"never", nil} {
		b, err := parseDescriptor(json.RawMessage(mustJSON(map[string]any{"provider": map[string]any{"kind": "codex", "approvalPolicy": ap, "cwd": "/w"}})), testDrivers)
		require.NoError(t, err)
		require.Equal(t, codexapp.Kind, b.Driver)
		require.Equal(t, "codex", b.Command)
		require.Equal(t, []string{"app-server"}, b.Args)
	}
	_, err := parseDescriptor(json.RawMessage(mustJSON(map[string]any{"provider": map[string]any{"kind": "codex", "approvalPolicy": "on-request"}})), testDrivers)
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, codeCommandExecutionFailed, ce.Code)
}

// TestCodexUnknownKindNamesIt: a kind still unknown fails
// command_execution_failed with a message naming the kind; a kind that is not a plain name is not echoed.
func TestCodexUnknownKindNamesIt(t *testing.T) {
	for kind, want := range map[string]string{
		"claude_managed": `"claude_managed"`, "aws_agentcore": `"aws_agentcore"`, "cursor_cloud": `"cursor_cloud"`,
		"": "(absent)", "bad kind\n": "(unrecognised)",
	} {
		_, err := parseDescriptor(json.RawMessage(mustJSON(map[string]any{"provider": map[string]any{"kind": kind}})), testDrivers)
		var ce *CommandError
		require.ErrorAs(t, err, &ce, kind)
		require.Equal(t, codeCommandExecutionFailed, ce.Code)
		require.Contains(t, ce.Message, want)
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestCodex05_Steer: turn.steer → turn/steer with the active turn id.
func TestCodex05_Steer(t *testing.T) {
	r := newRig(t)
	tr := filepath.Join(t.TempDir(), "t.ndjson")
	r.prepareCodex(nil, "--hang-turn", "--transcript", tr)
	r.open()
	r.turn("hang")
	eventually(t, "turn/started seen", func() bool {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		tt := r.m.cl.Wire().Turn
		return tt != nil && tt.ProviderTurnID != ""
	})
	res, err := r.m.SteerTurn(json.RawMessage(`{"text":"also this"}`))
	require.NoError(t, err)
	require.Contains(t, string(res), `"steered"`)
	var steer map[string]any
	for _, e := range readTranscript(t, tr) {
		if m, _ := e["msg"].(map[string]any); e["dir"] == "in" && m["method"] == "turn/steer" {
			steer, _ = m["params"].(map[string]any)
		}
	}
	require.Equal(t, "turn-0001", steer["expectedTurnId"])
	require.Equal(t, "thread-0001", steer["threadId"])
	_, err = r.m.SteerTurn(json.RawMessage(`{"text":" "}`))
	require.Error(t, err)
	validateTranscript(t, tr)
}

// TestCodexUserInput: item/tool/requestUserInput → runtime_request.created
// (type input, a question set); request.resolve's answers reach Codex as
// {answers: {<questionId>: {answers: [string]}}}.
func TestCodexUserInput(t *testing.T) {
	r := newRig(t)
	tr := filepath.Join(t.TempDir(), "t.ndjson")
	r.prepareCodex(nil, "--user-input", "--transcript", tr)
	r.open()
	r.turn("ask me")
	evs := r.sink.waitEvent(t, "runtime_request.created")
	req := payloadOf(evs, "runtime_request.created")["request"].(map[string]any)
	require.Equal(t, "input", req["type"])
	qs := req["details"].(map[string]any)["questionSet"].(map[string]any)["questions"].([]any)
	require.Len(t, qs, 1)
	res, err := r.m.Resolve("cmd-resolve", json.RawMessage(mustJSON(map[string]any{"requestId": req["requestId"],
		"response": map[string]any{"schema": "paperclip.question_response.v1", "answers": []any{map[string]any{"questionId": "q1", "optionId": "A"}}}})))
	require.NoError(t, err)
	require.Contains(t, string(res), "delivered")
	evs = r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, 1, count(evs, "runtime_request.resolved"))
	var answer map[string]any
	for _, e := range readTranscript(t, tr) {
		m, _ := e["msg"].(map[string]any)
		if e["dir"] == "in" && m["method"] == nil && m["result"] != nil {
			if res, _ := m["result"].(map[string]any); res["answers"] != nil {
				answer = res
			}
		}
	}
	require.Equal(t, map[string]any{"q1": map[string]any{"answers": []any{"A"}}}, answer["answers"])
	require.Contains(t, said(evs), "user answered")
	prpschema.RequireValidEvents(t, evs)
	validateTranscript(t, tr)
}

// TestCodexUserInputInterrupted: an open question is cancelled by the
// interrupt; Codex's serverRequest/resolved adds nothing.
func TestCodexUserInputInterrupted(t *testing.T) {
	r := newRig(t)
	r.prepareCodex(nil, "--user-input")
	r.open()
	r.turn("ask me")
	r.sink.waitEvent(t, "runtime_request.created")
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err := r.m.Cancel(ctx, Interrupt)
	require.NoError(t, err)
	evs := r.sink.waitEvent(t, "turn.interrupted")
	require.Equal(t, 1, count(evs, "runtime_request.cancelled"))
	prpschema.RequireValidEvents(t, evs)
}

// TestCodexResume: after session.close a reusable record resumes with
// thread/resume (no dynamicTools) then thread/read; a run whose catalog
// differs from the thread's fails tool_catalog_changed.
func TestCodexResume(t *testing.T) {
	r := newToolRig(t)
	tr := filepath.Join(t.TempDir(), "t.ndjson")
	cat := catalogJSON(t, opComment)
	r.prepareCodexTools(cat, "--transcript", tr)
	r.open()
	r.turn("one")
	r.sink.waitEvent(t, "run.terminal")
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err := r.m.CloseSession(ctx)
	require.NoError(t, err)
	r.open()
	entries := readTranscript(t, tr)
	require.Equal(t, []string{"initialize", "initialized", "thread/start", "turn/start", "initialize", "initialized", "thread/resume", "thread/read"}, methodsIn(entries))
	for _, e := range entries {
		if m, _ := e["msg"].(map[string]any); m["method"] == "thread/resume" {
			p := m["params"].(map[string]any)
			require.NotContains(t, p, "dynamicTools")
			require.Equal(t, "thread-0001", p["threadId"])
			require.Equal(t, true, p["excludeTurns"])
		}
	}
	n := len(r.sink.waitEvent(t, "session.resumed"))
	r.turn("two")
	evs := since(r.sink.waitFor(t, "second terminal", func(_ Stored, evs []provider.Event) bool { return count(evs, "run.terminal") == 2 }), n)
	prpschema.RequireValidEvents(t, evs)

	_, err = r.m.CloseSession(ctx)
	require.NoError(t, err)
	r.prepareCodexTools(catalogJSON(t, opComment, opNote), "--transcript", tr)
	ce := r.openErr()
	require.Equal(t, codexapp.CodeToolCatalogChanged, ce.Code)
	validateTranscript(t, tr)
}

// TestCodexStartupFaults: a slow start within the bound opens; a hang is
// cut at the cold bound; an early exit and a stream of junk lines fail
// with the startup classes the ACP path uses (the same supervision).
func TestCodexStartupFaults(t *testing.T) {
	t.Run("slow start", func(t *testing.T) {
		r := newRig(t)
		r.prepareCodex(nil, "--init-delay-ms", "300")
		r.open()
	})
	t.Run("hang", func(t *testing.T) {
		r := newRig(t, func(c *Config) { c.ColdBound = func(string) time.Duration { return 500 * time.Millisecond } })
		r.prepareCodex(nil, "--hang-on-initialize")
		ce := r.openErr()
		require.Equal(t, string(provider.ClassSessionHandshakeTimeout), ce.Code)
	})
	t.Run("early exit", func(t *testing.T) {
		r := newRig(t)
		r.prepareCodex(nil, "--exit-early", "3")
		ce := r.openErr()
		require.Equal(t, string(provider.ClassAgentStartupExitNonzero), ce.Code)
	})
	t.Run("some junk", func(t *testing.T) {
		r := newRig(t)
		r.prepareCodex(nil, "--junk", "3")
		r.open()
		r.turn("hi")
		r.sink.waitEvent(t, "run.terminal")
	})
	t.Run("too much junk", func(t *testing.T) {
		r := newRig(t)
		r.prepareCodex(nil, "--junk", strconv.Itoa(provider.MaxConsecutiveBadLines))
		ce := r.openErr()
		require.NotEmpty(t, ce.Code)
		_, evs := r.sink.snapshot()
		require.Equal(t, 0, count(evs, "session.started"))
	})
}

// transcriptDecisions are the decisions runnerd answered approvals with.
func transcriptDecisions(t testing.TB, path string) []string {
	var out []string
	for _, e := range readTranscript(t, path) {
		m, _ := e["msg"].(map[string]any)
		if e["dir"] == "in" && m["method"] == nil {
			if res, _ := m["result"].(map[string]any); res["decision"] != nil {
				out = append(out, res["decision"].(string))
			}
		}
	}
	return out
}

// TestCodexApproval: a command approval is decided by the permission mode
// as an ACP permission request is (tools.md §6): approve-all accepts at
// once with no PRP event, deny-all declines, manual asks through
// runtime_request.created and request.resolve's action answers Codex.
func TestCodexApproval(t *testing.T) {
	for _, tc := range []struct{ mode, want string }{{"approve-all", "accept"}, {"deny-all", "decline"}} {
		t.Run(tc.mode, func(t *testing.T) {
			r := newRig(t)
			tr := filepath.Join(t.TempDir(), "t.ndjson")
			b, _ := json.Marshal(map[string]any{"provider": map[string]any{"kind": "codex", "command": fakecodexBin(t),
				"args": []string{"--command", "--approval", "--transcript", tr}, "cwd": r.cwd, "permissionMode": tc.mode}})
			_, err := r.m.Prepare(b)
			require.NoError(t, err)
			r.open()
			r.turn("run it")
			evs := r.sink.waitEvent(t, "run.terminal")
			require.Equal(t, 0, count(evs, "runtime_request.created"))
			require.Equal(t, []string{tc.want}, transcriptDecisions(t, tr))
			prpschema.RequireValidEvents(t, evs)
			validateTranscript(t, tr)
		})
	}
	t.Run("manual", func(t *testing.T) {
		r := newRig(t)
		tr := filepath.Join(t.TempDir(), "t.ndjson")
		b, _ := json.Marshal(map[string]any{"provider": map[string]any{"kind": "codex", "command": fakecodexBin(t),
			"args": []string{"--command", "--approval", "--transcript", tr}, "cwd": r.cwd, "permissionMode": "manual"}})
		_, err := r.m.Prepare(b)
		require.NoError(t, err)
		r.open()
		r.turn("run it")
		evs := r.sink.waitEvent(t, "runtime_request.created")
		req := payloadOf(evs, "runtime_request.created")["request"].(map[string]any)
		require.Equal(t, "permission", req["type"])
		res, err := r.m.Resolve("cmd-res", json.RawMessage(mustJSON(map[string]any{"requestId": req["requestId"],
			"resolution": map[string]any{"action": "accept"}})))
		require.NoError(t, err)
		require.Contains(t, string(res), "delivered")
		evs = r.sink.waitEvent(t, "run.terminal")
		require.Equal(t, []string{"accept"}, transcriptDecisions(t, tr))
		require.Equal(t, 1, count(evs, "runtime_request.resolved"))
		prpschema.RequireValidEvents(t, evs)
		validateTranscript(t, tr)
	})
}

// TestCodexToolCallAcrossRestart: runnerd goes away while Codex waits on
// item/tool/call; the restarted runnerd re-adopts the app-server, waits
// for the call's result again (Codex never re-sends the request), and the
// core's result reaches Codex: delivered, no second semantic_tool.input.
func TestCodexToolCallAcrossRestart(t *testing.T) {
	r := newToolRig(t)
	tr := filepath.Join(t.TempDir(), "t.ndjson")
	r.prepareCodexTools(catalogJSON(t, opComment), "--tool-call", "issue.comment", "--tool-args", `{"body":"hi"}`, "--transcript", tr)
	r.open()
	r.turn("call the tool")
	in := r.waitInputs(1)
	pgid := agentPgid(t, r.sessionDir())
	r.m.Close()
	st, _ := r.sink.snapshot()
	r.m = NewManager(r.cfg, st)
	require.NoError(t, r.m.Start())
	res, err := r.result("cmd-res-1", in[0], `{"id":"c-9"}`, false)
	require.NoError(t, err)
	require.Equal(t, "delivered", statusOf(t, res))
	evs := r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, pgid, agentPgid(t, r.sessionDir()), "the same app-server")
	require.Equal(t, 1, count(evs, prp.EventSemanticToolInput))
	require.Contains(t, said(evs), "c-9")
	ans := toolAnswers(t, readTranscript(t, tr))
	require.Len(t, ans, 1)
	require.Equal(t, true, ans[0]["success"])
	validateTranscript(t, tr)
}

// TestCodex05_RunCancel: run.cancel interrupts the Codex turn
// (turn/interrupt) and the turn ends turn.cancelled; the app-server keeps
// running.
func TestCodex05_RunCancel(t *testing.T) {
	r := newRig(t)
	r.prepareCodex(nil, "--hang-turn")
	r.open()
	r.turn("hang")
	eventually(t, "turn/started seen", func() bool {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		tt := r.m.cl.Wire().Turn
		return tt != nil && tt.ProviderTurnID != ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err := r.m.Cancel(ctx, RunCancel)
	require.NoError(t, err)
	evs := r.sink.waitEvent(t, "turn.cancelled")
	require.Equal(t, 0, count(evs, "harness.exited"))
	require.Equal(t, 1, count(evs, "run.terminal"))
	prpschema.RequireValidEvents(t, evs)
}

// TestCodexStopTurn: turn.stop interrupts, then stops the app-server's
// group (acp.md §4.4).
func TestCodexStopTurn(t *testing.T) {
	r := newRig(t)
	r.prepareCodex(nil, "--hang-turn")
	r.open()
	r.turn("hang")
	r.sink.waitEvent(t, "turn.started")
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	res, err := r.m.Cancel(ctx, StopTurn)
	require.NoError(t, err)
	require.Contains(t, string(res), `"stopped"`)
	evs := r.sink.waitEvent(t, "harness.exited")
	require.Equal(t, 1, count(evs, "run.terminal"))
	prpschema.RequireValidEvents(t, evs)
}

// TestCodexCatalogBound: a catalog whose dynamicTools (catalog plus the
// two reserved tools) exceed 256 fails run.prepare for kind codex.
func TestCodexCatalogBound(t *testing.T) {
	var ops []catalog.Operation
	for i := 0; i < 255; i++ {
		ops = append(ops, catalog.Operation{OperationID: fmt.Sprintf("op.n%03d", i), Version: 1, Description: "x",
			InputSchema: json.RawMessage(`{"type":"object"}`), ResponseSchema: json.RawMessage(`{"type":"object"}`)})
	}
	r := newToolRig(t)
	b, _ := json.Marshal(map[string]any{"provider": map[string]any{"kind": "codex", "command": fakecodexBin(t), "cwd": r.cwd},
		"authorizedTools": catalogJSON(t, ops...)})
	_, err := r.m.Prepare(b)
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, codeCommandExecutionFailed, ce.Code)
	require.Contains(t, ce.Message, "257 dynamic tools")
	b, _ = json.Marshal(map[string]any{"provider": map[string]any{"kind": "codex", "command": fakecodexBin(t), "cwd": r.cwd},
		"authorizedTools": catalogJSON(t, ops[:254]...)})
	_, err = r.m.Prepare(b)
	require.NoError(t, err)
}

// TestCodexInterruptAnswersToolCall: an interrupt answers the pending
// item/tool/call with the failure "Paperclip stopped the active provider
// turn" (codex.md §4); a late result is then recorded, not delivered.
func TestCodexInterruptAnswersToolCall(t *testing.T) {
	r := newToolRig(t)
	tr := filepath.Join(t.TempDir(), "t.ndjson")
	r.prepareCodexTools(catalogJSON(t, opComment), "--tool-call", "issue.comment", "--tool-args", `{"body":"hi"}`, "--transcript", tr)
	r.open()
	r.turn("call the tool")
	in := r.waitInputs(1)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err := r.m.Cancel(ctx, Interrupt)
	require.NoError(t, err)
	r.sink.waitEvent(t, "turn.interrupted")
	eventually(t, "the stop answer", func() bool { return len(toolAnswers(t, readTranscript(t, tr))) == 1 })
	ans := toolAnswers(t, readTranscript(t, tr))[0]
	require.Equal(t, false, ans["success"])
	require.Equal(t, textStopped, ans["contentItems"].([]any)[0].(map[string]any)["text"])
	res, err := r.result("cmd-late", in[0], `{"id":"late"}`, false)
	require.NoError(t, err)
	require.NotEqual(t, "delivered", statusOf(t, res))
	validateTranscript(t, tr)
}
