package runner

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/agent"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// prepareDesc runs run.prepare with the fake agent and extra descriptor
// fields, and returns the result.
func (h *harness) prepareDesc(flags []string, extra map[string]any) prp.CommandResultPayload {
	h.t.Helper()
	d := map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(h.t), "args": flags, "cwd": h.t.TempDir()}
	for k, v := range extra {
		d[k] = v
	}
	b, err := json.Marshal(map[string]any{"provider": d})
	require.NoError(h.t, err)
	return h.waitResult(h.queue("run.prepare", string(b)).CommandID)
}

// runTurn starts a turn and waits until the core holds n run.terminal.
func (h *harness) runTurn(text string, n int) []prptest.Event {
	h.t.Helper()
	b, _ := json.Marshal(map[string]string{"text": text})
	res := h.waitResult(h.queue("turn.start", string(b)).CommandID)
	require.Equal(h.t, "completed", res.Status, string(res.Result))
	return h.waitTerminals(n)
}

func (h *harness) waitTerminals(n int) []prptest.Event {
	h.t.Helper()
	s := h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(h.t, s.Events), "run.terminal")) >= n
	})
	return prptest.DecodeEvents(h.t, s.Events)
}

// requireValidAll validates every event the core holds against the
// reference schemas, runtime requests also against request.schema.json.
func (h *harness) requireValidAll() {
	h.t.Helper()
	s := prpschema.Load(h.t)
	for _, raw := range h.core.Snapshot().Events {
		var env struct {
			Payload json.RawMessage `json:"payload"`
		}
		require.NoError(h.t, json.Unmarshal(raw, &env))
		require.NoError(h.t, prpschema.Validate(s.EventV1, env.Payload), "event %s", env.Payload)
		var e struct {
			EventType string `json:"eventType"`
			Payload   struct {
				Request json.RawMessage `json:"request"`
			} `json:"payload"`
		}
		require.NoError(h.t, json.Unmarshal(env.Payload, &e))
		if e.EventType == "runtime_request.created" {
			require.NoError(h.t, prpschema.Validate(s.Request, e.Payload.Request), "request %s", e.Payload.Request)
		}
	}
}

// metaLines reads fakeacp's --record-meta file.
func metaLines(t *testing.T, path string) []map[string]json.RawMessage {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []map[string]json.RawMessage
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

func saidIn(t *testing.T, evs []prptest.Event) string {
	t.Helper()
	var s strings.Builder
	for _, e := range prptest.OfType(evs, "item.delta") {
		var p struct {
			Text string `json:"text"`
		}
		require.NoError(t, json.Unmarshal(e.Payload, &p))
		s.WriteString(p.Text)
	}
	return s.String()
}

func payloadMap(t *testing.T, e prptest.Event) map[string]any {
	t.Helper()
	var p map[string]any
	require.NoError(t, json.Unmarshal(e.Payload, &p))
	return p
}

// TestTools08_InstructionsAndModelInSessionMeta: run.prepare's
// instructions and model reach session/new._meta as {systemPrompt:
// {append}, claudeCode: {options: {model}}}, and the same _meta reaches
// session/load and session/resume when the session is re-opened (tools.md
// §5, which the requirements confirm over §9 scenario 8's "none on
// session/load"). The instructions
// never enter the prompt or runner-state.json; they and the runtime
// context live in side files, and no secret of runtimeContext.mcp reaches
// the disk.
func TestTools08_InstructionsAndModelInSessionMeta(t *testing.T) {
	instructions := "You are the Paperclip agent. <Keep> answers & work short."
	const model = "claude-sonnet-test-1"
	const secret = "sk-ant-api03-SECRETSECRETSECRET0123456789"
	runtimeContext := map[string]any{
		"prompt":          "do the task",
		"instructions":    map[string]any{"bundle": "sha256:" + strings.Repeat("a", 64)},
		"skills":          []any{map[string]any{"name": "review"}},
		"aggregateDigest": "sha256:" + strings.Repeat("b", 64),
		"mcp": map[string]any{"servers": []any{map[string]any{
			"name": "paperclip", "url": "http://user:pw-in-url@127.0.0.1:9/mcp?token=qs-secret",
			"headers": map[string]any{"Authorization": "Bearer " + secret},
			"env":     []any{map[string]any{"name": "API", "value": "env-secret-value"}},
			"apiKey":  "plain-key-value", "note": "key " + secret,
		}}},
	}
	for _, resume := range []string{"--supports-load-session", "--supports-resume"} {
		t.Run(resume, func(t *testing.T) {
			h := newHarness(t, nil)
			run := h.agentRun()
			metaFile := filepath.Join(t.TempDir(), "meta.ndjson")
			res := h.prepareDesc([]string{"--record-meta", metaFile, resume},
				map[string]any{"instructions": instructions, "model": model, "runtimeContext": runtimeContext})
			require.Equal(t, "completed", res.Status, string(res.Result))
			require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
			h.runTurn("echo hi", 1)
			// A close keeps the record resumable; the next open resumes it.
			require.Equal(t, "completed", h.waitResult(h.queue("session.close", `{}`).CommandID).Status)
			open := h.waitResult(h.queue("session.open", `{}`).CommandID)
			require.Equal(t, "completed", open.Status, string(open.Result))
			require.Contains(t, string(open.Result), `"status":"resumed"`)

			want := `{"systemPrompt":{"append":` + string(mustJSON(t, instructions)) + `},"claudeCode":{"options":{"model":"` + model + `"}}}`
			lines := metaLines(t, metaFile)
			require.Len(t, lines, 2)
			method := map[string]string{"--supports-load-session": "session/load", "--supports-resume": "session/resume"}[resume]
			for i, m := range []string{"session/new", method} {
				require.JSONEq(t, `"`+m+`"`, string(lines[i]["method"]))
				require.JSONEq(t, want, string(lines[i]["_meta"]), "%s carries the instructions and the model", m)
			}
			require.NotContains(t, saidIn(t, h.core.Events()), "Paperclip agent", "never in the prompt")
			h.requireValidAll()

			run.cancel()
			require.NoError(t, run.wait(t))
			raw, err := os.ReadFile(filepath.Join(h.stateDir, state.FileName))
			require.NoError(t, err)
			require.NotContains(t, string(raw), "Keep> answers", "the instructions stay out of runner-state.json")
			var st agent.Stored
			ok, err := h.readState().Record(agentRecord, &st)
			require.NoError(t, err)
			require.True(t, ok)
			b := st.Binding
			require.Equal(t, model, b.Model)
			got, err := state.ReadSide(h.stateDir, b.InstructionsSide, 1<<20)
			require.NoError(t, err)
			require.JSONEq(t, string(mustJSON(t, instructions)), string(got))
			rc, err := state.ReadSide(h.stateDir, b.RuntimeContextSide, 1<<20)
			require.NoError(t, err)
			for _, leak := range []string{secret, "pw-in-url", "qs-secret", "env-secret-value", "plain-key-value", "Bearer"} {
				require.NotContains(t, string(rc), leak, "no secret of runtimeContext.mcp on disk")
			}
			require.Contains(t, string(rc), `"url":"http://127.0.0.1:9/mcp"`)
			require.Contains(t, string(rc), `"aggregateDigest"`)
			sides, err := os.ReadDir(filepath.Join(h.stateDir, state.SideDir))
			require.NoError(t, err)
			for _, e := range sides {
				b, err := os.ReadFile(filepath.Join(h.stateDir, state.SideDir, e.Name()))
				require.NoError(t, err)
				require.NotContains(t, string(b), secret)
			}
		})
	}
}

// TestTools08_NoMetaWithoutInstructionsOrModel: without instructions and
// model session/new carries no _meta member at all (tools.md §5: omit
// empty keys, and _meta when both are empty); with only a model, only
// claudeCode.
func TestTools08_NoMetaWithoutInstructionsOrModel(t *testing.T) {
	for name, c := range map[string]struct {
		extra map[string]any
		want  string
	}{
		"neither":    {map[string]any{"model": nil}, `null`},
		"model only": {map[string]any{"model": "m-1", "instructions": ""}, `{"claudeCode":{"options":{"model":"m-1"}}}`},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.agentRun()
			metaFile := filepath.Join(t.TempDir(), "meta.ndjson")
			require.Equal(t, "completed", h.prepareDesc([]string{"--record-meta", metaFile}, c.extra).Status)
			require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
			lines := metaLines(t, metaFile)
			require.Len(t, lines, 1)
			require.JSONEq(t, c.want, string(lines[0]["_meta"]))
		})
	}
}

// TestTools08_BadInstructionsFailPrepare: instructions with a NUL, a
// model over 240 characters, and a runtimeContext that is not an object
// fail run.prepare with a clear message that never quotes them (the
// 1 MiB bound needs a frame above PRP's default 1 MiB: see the agent
// package's TestTools08_InstructionsBound).
func TestTools08_BadInstructionsFailPrepare(t *testing.T) {
	h := newHarness(t, nil)
	h.agentRun()
	for name, c := range map[string]struct {
		extra map[string]any
		msg   string
	}{
		"nul":     {map[string]any{"instructions": "before\x00after-secretword"}, "instructions contain a NUL character"},
		"model":   {map[string]any{"model": strings.Repeat("m", 241)}, "model is longer than 240 characters"},
		"context": {map[string]any{"runtimeContext": []any{"x"}}, "runtimeContext"},
	} {
		t.Run(name, func(t *testing.T) {
			res := h.prepareDesc(nil, c.extra)
			require.Equal(t, "failed", res.Status)
			require.Contains(t, string(res.Result), c.msg)
			require.NotContains(t, string(res.Result), "secretword")
		})
	}
	sides, err := os.ReadDir(filepath.Join(h.stateDir, state.SideDir))
	if err == nil {
		require.Empty(t, sides, "a failed run.prepare stores nothing")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// waitType waits until the core holds at least n events of typ.
func (h *harness) waitType(typ string, n int) []prptest.Event {
	h.t.Helper()
	s := h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(h.t, s.Events), typ)) >= n
	})
	return prptest.DecodeEvents(h.t, s.Events)
}

// startTurn queues turn.start and requires it accepted.
func (h *harness) startTurn(text string) {
	h.t.Helper()
	b, _ := json.Marshal(map[string]string{"text": text})
	res := h.waitResult(h.queue("turn.start", string(b)).CommandID)
	require.Equal(h.t, "completed", res.Status, string(res.Result))
}

// resolveLatest answers the newest runtime request with action and
// checks the tools.md §7 result; it returns the request.
func (h *harness) resolveLatest(n int, action string) (map[string]any, prp.CommandResultPayload) {
	h.t.Helper()
	evs := prptest.OfType(h.waitType("runtime_request.created", n), "runtime_request.created")
	req := payloadMap(h.t, evs[n-1])["request"].(map[string]any)
	b, _ := json.Marshal(map[string]any{"requestId": req["requestId"], "turnId": req["turnId"],
		"resolution": map[string]any{"action": action}})
	return req, h.waitResult(h.queue("request.resolve", string(b)).CommandID)
}

// TestTools09_PermissionModes: each permission mode against fakeacp's
// permission scenarios (tools.md §6): approve-all allows and deny-all
// rejects at once with no PRP event; the reserved paperclip_finish is
// allowed even under deny-all; approve-paperclip allows a bridge tool
// (mcp__paperclip__…, recognised by _meta.claudeCode.toolName) at once but
// makes a shell tool a runtime request; approve-reads allows a read at
// once and asks for a shell tool; manual asks for everything. Every event
// validates against the reference schemas.
func TestTools09_PermissionModes(t *testing.T) {
	type step struct {
		text string
		ask  bool   // a runtime request, answered accept
		said string // the agent's verdict
	}
	allow, reject := "permission outcome allow", "permission outcome reject"
	for mode, steps := range map[string][]step{
		"approve-all":       {{"permission shell", false, allow}, {"permission bridge issue_comment", false, allow}},
		"deny-all":          {{"permission shell", false, reject}, {"permission bridge issue_comment", false, reject}, {"permission bridge paperclip_finish", false, allow}},
		"approve-paperclip": {{"permission bridge issue_comment", false, allow}, {"permission shell", true, allow}, {"permission bridge paperclip_block", false, allow}},
		"approve-reads":     {{"permission read /etc/hosts", false, allow}, {"permission shell", true, allow}},
		"manual":            {{"permission read /etc/hosts", true, allow}},
	} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t, nil)
			h.agentRun()
			require.Equal(t, "completed", h.prepareDesc(nil, map[string]any{"permissionMode": mode}).Status)
			require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
			asked := 0
			for i, s := range steps {
				h.startTurn(s.text)
				if s.ask {
					asked++
					_, res := h.resolveLatest(asked, "accept")
					require.Equal(t, "completed", res.Status, string(res.Result))
				}
				evs := h.waitTerminals(i + 1)
				require.Len(t, prptest.OfType(evs, "runtime_request.created"), asked, "%s: %s", mode, s.text)
				require.Len(t, prptest.OfType(evs, "runtime_request.resolved"), asked)
				require.Equal(t, i+1, strings.Count(saidIn(t, evs), "permission outcome"))
				require.True(t, strings.HasSuffix(saidIn(t, evs), s.said), "%s: %s → %q", mode, s.text, saidIn(t, evs))
			}
			h.requireValidAll()
		})
	}
}

// TestTools09_RequestResolveChoices: a runtime request offers accept,
// accept_for_session (only when the agent offers allow_always), decline
// and cancel, never reject_always; request.resolve picks the ACP option
// of that kind, answers {status:"delivered", requestId}, and emits
// runtime_request.resolved {provider, requestId, status:"delivered",
// requestKind, turnId, itemId, action} (tools.md §6, §7).
func TestTools09_RequestResolveChoices(t *testing.T) {
	t.Run("each choice", func(t *testing.T) {
		h := newHarness(t, nil)
		h.agentRun()
		require.Equal(t, "completed", h.prepareDesc(nil, map[string]any{"permissionMode": "approve-paperclip"}).Status)
		require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
		want := map[string]string{"accept": "permission outcome allow", "accept_for_session": "permission outcome allow-always",
			"decline": "permission outcome reject", "cancel": ""}
		for i, action := range []string{"accept", "accept_for_session", "decline", "cancel"} {
			h.startTurn("permission shell")
			req, res := h.resolveLatest(i+1, action)
			require.Equal(t, "completed", res.Status, string(res.Result))
			require.JSONEq(t, `{"status":"delivered","requestId":"`+req["requestId"].(string)+`"}`, string(res.Result))
			// The v1 shape of tools.md §7.
			require.Equal(t, "paperclip.runtime_request.v1", req["schema"])
			require.Equal(t, "runtime", req["requestKind"])
			require.Equal(t, "permission", req["type"])
			require.Equal(t, "pending", req["status"])
			require.Equal(t, "Bash", req["prompt"])
			require.Equal(t, []any{
				map[string]any{"key": "accept", "label": "Accept"},
				map[string]any{"key": "accept_for_session", "label": "Accept for this session"},
				map[string]any{"key": "decline", "label": "Decline"},
				map[string]any{"key": "cancel", "label": "Cancel"},
			}, req["choices"])
			require.NotEmpty(t, req["turnId"])
			require.NotEmpty(t, req["itemId"])
			require.Equal(t, map[string]any{"adapter": "acpx", "provider": "claude", "method": "session/request_permission"}, req["origin"])
			require.Equal(t, "Bash", req["details"].(map[string]any)["toolName"])
			evs := h.waitTerminals(i + 1)
			resolved := prptest.OfType(evs, "runtime_request.resolved")
			require.Len(t, resolved, i+1)
			created := payloadMap(t, prptest.OfType(evs, "runtime_request.created")[i])
			require.Len(t, created, 1, "created payload is exactly {request}")
			require.Equal(t, map[string]any{"provider": "acpx", "requestId": req["requestId"], "status": "delivered",
				"requestKind": "runtime", "turnId": req["turnId"], "itemId": req["itemId"], "action": action},
				payloadMap(t, resolved[i]), "resolved payload exactly as tools.md §7")
			if want[action] != "" {
				require.True(t, strings.HasSuffix(saidIn(t, evs), want[action]), "%s → %q", action, saidIn(t, evs))
			}
		}
		h.requireValidAll()
	})
	t.Run("no allow_always offered", func(t *testing.T) {
		h := newHarness(t, nil)
		h.agentRun()
		require.Equal(t, "completed", h.prepareDesc([]string{"--permission-no-always"}, map[string]any{"permissionMode": "manual"}).Status)
		require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
		h.startTurn("permission shell")
		req, res := h.resolveLatest(1, "accept_for_session")
		require.Equal(t, "failed", res.Status, "a choice the request does not offer")
		require.Len(t, req["choices"], 3)
		_, res = h.resolveLatest(1, "decline")
		require.Equal(t, "completed", res.Status, string(res.Result))
		require.True(t, strings.HasSuffix(saidIn(t, h.waitTerminals(1)), "permission outcome reject"))
	})
}

// TestTools09_OpenRequestCancelledByInterrupt: a runtime request still
// open when the turn is interrupted ends as runtime_request.cancelled with
// replayAllowed false; a later request.resolve finds nothing (tools.md §7).
func TestTools09_OpenRequestCancelledByInterrupt(t *testing.T) {
	h := newHarness(t, nil)
	h.agentRun()
	require.Equal(t, "completed", h.prepareDesc(nil, map[string]any{"permissionMode": "manual"}).Status)
	require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
	h.startTurn("permission shell")
	evs := prptest.OfType(h.waitType("runtime_request.created", 1), "runtime_request.created")
	req := payloadMap(t, evs[0])["request"].(map[string]any)
	res := h.waitResult(h.queue("turn.interrupt", `{}`).CommandID)
	require.Equal(t, "completed", res.Status)
	all := h.waitTerminals(1)
	cancelled := prptest.OfType(all, "runtime_request.cancelled")
	require.Len(t, cancelled, 1)
	p := payloadMap(t, cancelled[0])
	require.Equal(t, false, p["replayAllowed"])
	require.Equal(t, "cancelled", p["status"])
	require.Equal(t, req["requestId"], p["requestId"])
	_, res = h.resolveLatest(1, "accept")
	require.Equal(t, "failed", res.Status)
	h.requireValidAll()
}

func resultMap(t *testing.T, res prp.CommandResultPayload) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(res.Result, &m))
	return m
}

// TestToolsS7_CommandResults: the result shapes of tools.md §7 —
// session.open {status, provider, driver, providerVersion,
// providerSessionId, sessionId, processId}; turn.start {status:"accepted",
// providerTurnId} with a server-chosen turnId (pattern checked, never
// repeated) and turn.started {provider, providerTurnId, status, turn};
// turn.interrupt and run.cancel without a turn {status:"already_settled",
// reason}, with one {status:"interrupt_requested", providerTurnId,
// reason}; turn.stop {status:"stopped", providerTurnId, reason,
// providerExitConfirmed:true}.
func TestToolsS7_CommandResults(t *testing.T) {
	h := newHarness(t, nil)
	run := h.agentRun()
	require.Equal(t, "completed", h.prepareDesc(nil, map[string]any{"providerVersion": "acp-test-1"}).Status)
	open := h.waitResult(h.queue("session.open", `{}`).CommandID)
	require.Equal(t, "completed", open.Status)
	o := resultMap(t, open)
	require.Greater(t, o["processId"], float64(1))
	delete(o, "processId")
	require.Equal(t, map[string]any{"status": "started", "provider": "acpx", "driver": "acpx_runtime",
		"providerVersion": "acp-test-1", "providerSessionId": "sess-0001", "sessionId": "sess-0001"}, o)

	res := h.waitResult(h.queue("turn.start", `{"text":"echo one","turnId":"srv-turn.1"}`).CommandID)
	require.Equal(t, "completed", res.Status, string(res.Result))
	require.JSONEq(t, `{"status":"accepted","providerTurnId":"srv-turn.1"}`, string(res.Result))
	evs := h.waitTerminals(1)
	started := payloadMap(t, prptest.OfType(evs, "turn.started")[0])
	require.Equal(t, map[string]any{"provider": "acpx", "providerTurnId": "srv-turn.1", "status": "inProgress",
		"turn": map[string]any{"id": "srv-turn.1", "status": "inProgress"}}, started)

	for _, bad := range []string{`"srv-turn.1"`, `"-lead"`, `"` + strings.Repeat("a", 65) + `"`, `"a b"`} {
		res = h.waitResult(h.queue("turn.start", `{"text":"echo again","turnId":`+bad+`}`).CommandID)
		require.Equal(t, "rejected", res.Status, bad)
		require.Equal(t, agent.CodeInvalidTurnID, resultCodeOf(t, res))
	}
	res = h.waitResult(h.queue("turn.start", `{"text":"echo two"}`).CommandID)
	require.JSONEq(t, `{"status":"accepted","providerTurnId":"pturn-1"}`, string(res.Result))
	h.waitTerminals(2)

	for _, typ := range []string{"turn.interrupt", "run.cancel"} {
		res = h.waitResult(h.queue(typ, `{}`).CommandID)
		require.Equal(t, "completed", res.Status)
		require.JSONEq(t, `{"status":"already_settled","reason":"`+typ+`"}`, string(res.Result))
	}
	res = h.waitResult(h.queue("turn.start", `{"text":"sleep 10000"}`).CommandID)
	require.Equal(t, "completed", res.Status)
	res = h.waitResult(h.queue("turn.interrupt", `{}`).CommandID)
	require.JSONEq(t, `{"status":"interrupt_requested","providerTurnId":"pturn-2","reason":"turn.interrupt"}`, string(res.Result))
	h.waitTerminals(3)

	require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
	res = h.waitResult(h.queue("turn.start", `{"text":"sleep 10000"}`).CommandID)
	require.Equal(t, "completed", res.Status)
	res = h.waitResult(h.queue("turn.stop", `{}`).CommandID)
	require.JSONEq(t, `{"status":"stopped","providerTurnId":"pturn-3","reason":"turn.stop","providerExitConfirmed":true}`, string(res.Result))
	h.waitTerminals(4)
	h.requireValidAll()
	run.cancel()
	require.NoError(t, run.wait(t))

	// The used ids are durable: after a restart srv-turn.1 is still refused.
	h.agentRun()
	require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
	res = h.waitResult(h.queue("turn.start", `{"text":"echo x","turnId":"srv-turn.1"}`).CommandID)
	require.Equal(t, "rejected", res.Status)
}

// TestToolsS7_TurnStartAfterDeliberateStop: a turn.start after an
// interrupt of a running turn, a turn.stop or a session.close, without a
// new session.open, is rejected {code:"session_not_open"} and emits no
// event: no loss sequence (tools.md §7; in
// particular not a channel loss with turn.failed). An interrupt between turns
// (already_settled) leaves the session open. After session.open turns work
// again.
func TestToolsS7_TurnStartAfterDeliberateStop(t *testing.T) {
	for _, stop := range []string{"turn.interrupt", "turn.stop", "session.close"} {
		t.Run(stop, func(t *testing.T) {
			h := newHarness(t, nil)
			h.agentRun()
			// A closed session resumes by session/load.
			require.Equal(t, "completed", h.prepareDesc([]string{"--supports-load-session"}, nil).Status)
			require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
			h.runTurn("echo one", 1)
			// Between turns an interrupt has nothing to stop.
			require.Equal(t, "completed", h.waitResult(h.queue("turn.interrupt", `{}`).CommandID).Status)
			h.runTurn("echo two", 2)
			terminals := 2
			if stop != "session.close" {
				h.startTurn("sleep 10000") // accepted: the turn is active
				terminals = 3
			}
			require.Equal(t, "completed", h.waitResult(h.queue(stop, `{}`).CommandID).Status)
			before := len(h.waitTerminals(terminals))
			res := h.waitResult(h.queue("turn.start", `{"text":"echo three"}`).CommandID)
			require.Equal(t, "rejected", res.Status, string(res.Result))
			require.Equal(t, agent.CodeSessionNotOpen, resultCodeOf(t, res))
			// A later command's result proves the core saw everything the
			// refusal could have emitted before it.
			require.Equal(t, "completed", h.waitResult(h.queue("session.snapshot", `{}`).CommandID).Status)
			evs := prptest.DecodeEvents(t, h.core.Snapshot().Events)
			require.Len(t, evs, before, "no event for a refused turn.start")
			require.Empty(t, prptest.OfType(evs, "turn.failed"))
			require.Empty(t, prptest.OfType(evs, "harness.diagnostic"))

			require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
			h.runTurn("echo four", terminals+1)
			h.requireValidAll()
		})
	}
}

// TestTools09_OpenRequestExpiresWhenAgentLost: a runtime request still
// open when the agent dies ends as runtime_request.expired
// {replayAllowed:false} before the failed turn's terminal; request.resolve
// then finds nothing (tools.md §7).
func TestTools09_OpenRequestExpiresWhenAgentLost(t *testing.T) {
	h := newHarness(t, nil)
	h.agentRun()
	require.Equal(t, "completed", h.prepareDesc(nil, map[string]any{"permissionMode": "manual"}).Status)
	open := h.waitResult(h.queue("session.open", `{}`).CommandID)
	pid := int(resultMap(t, open)["processId"].(float64))
	h.startTurn("permission shell")
	h.waitType("runtime_request.created", 1)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	evs := h.waitTerminals(1)
	expired := prptest.OfType(evs, "runtime_request.expired")
	require.Len(t, expired, 1)
	p := payloadMap(t, expired[0])
	require.Equal(t, false, p["replayAllowed"])
	require.Equal(t, "expired", p["status"])
	require.Equal(t, "agent_lost", p["reason"])
	require.Len(t, prptest.OfType(evs, "turn.failed"), 1)
	_, res := h.resolveLatest(1, "accept")
	require.Equal(t, "failed", res.Status)
	h.requireValidAll()
}
