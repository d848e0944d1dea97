package runner

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/agent"
	"github.com/pcrunner/pcrunner/internal/prp"
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
	s := h.waitCore(func(s prp.CoreSnapshot) bool {
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
// §5; §9 scenario 8 says session/load has none, but §5 and issue 10 say
// the same _meta on load and resume: issue 10 wins). The instructions
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
			require.Contains(t, string(open.Result), `"resumed"`)

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
