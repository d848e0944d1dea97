package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/netns"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
	"github.com/pcrunner/pcrunner/internal/toolcall"
)

// envRealCodex names the real codex binary (@openai/codex@0.169.0:
// node_modules/.bin/codex) for TestCodex07_RealCLI; unset, the test is
// skipped.
const envRealCodex = "PCRUNNER_CODEX_BIN"

// startFakeLLMForCodex runs test/fakellm and returns its base URL; it
// exits when the test closes its stdin.
func startFakeLLMForCodex(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(testbin.Build(t, "test/fakellm"), "--exit-on-stdin-eof", "--idle", "5m")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	// fakellm writes its URL line first or exits (EOF ends the scan).
	require.True(t, sc.Scan(), "fakellm did not start")
	u, ok := strings.CutPrefix(sc.Text(), "FAKELLM_URL=")
	require.True(t, ok, sc.Text())
	go func() {
		for sc.Scan() {
		}
	}()
	return u
}

// TestCodex07_RealCLI: the real `codex app-server` from npm, its model API
// (OpenAI Responses) pointed at test/fakellm on loopback through the
// provider config runnerd writes in the isolated CODEX_HOME: one full turn
// in which the model runs one shell command and answers with its output.
// The call names exec_command with plain arguments: fakellm's "shell"
// directive asks sandbox_permissions "require_escalated", which Codex
// refuses under approvalPolicy "never" ("you cannot ask for escalated
// permissions if the approval policy is Never"), so no command would run.
func TestCodex07_RealCLI(t *testing.T) {
	bin := os.Getenv(envRealCodex)
	if bin == "" {
		netns.SkipOrFail(t, envRealCodex+" is not set: install @openai/codex@0.169.0 and set it to node_modules/.bin/codex")
	}
	// Offline, as test/realagents: the real app-server sees only loopback.
	if !netns.Isolate(t) {
		return
	}
	llm := startFakeLLMForCodex(t)
	// A wrapper records both directions of the wire (tee on each side), so
	// the real app-server's messages and runnerd's are validated against
	// the pinned schema too.
	wire := t.TempDir()
	wrapper := filepath.Join(wire, "codex-tee")
	script := fmt.Sprintf("#!/bin/sh\ntee -a %q/in.ndjson | %q \"$@\" | tee -a %q/out.ndjson\n", wire, bin, wire)
	require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o755))
	r := newRig(t, func(c *Config) {
		c.Correlation = func() toolcall.Correlation { return testCorrelation }
		c.Environ = append(c.Environ, "OPENAI_BASE_URL="+llm+"/v1", "OPENAI_API_KEY=sk-fake-codex")
	})
	// The catalog rides in thread/start's dynamicTools, so the real
	// app-server checks runnerd's tool specs too. The operation id has no
	// dot: Codex 0.169.0 refuses thread/start when a dynamic tool name does
	// not match ^[a-zA-Z0-9_-]+$ (-32600 "dynamic tool name must match
	// ^[a-zA-Z0-9_-]+$ to match Responses API: issue.comment"), while
	// tools.md §1 allows '.' and ':' in operation ids and codex.md §3 sends
	// them as the names: an open question for the lead, not settled here.
	op := opComment
	op.OperationID = "issue_comment"
	b, _ := json.Marshal(map[string]any{"authorizedTools": catalogJSON(t, op), "provider": map[string]any{"kind": "codex", "command": wrapper, "args": []string{"app-server"},
		"cwd": r.cwd, "approvalPolicy": "never", "model": "gpt-5"}})
	_, err := r.m.Prepare(b)
	require.NoError(t, err)
	r.open()
	n := len(r.sink.waitEvent(t, "session.started"))
	r.turn(`FAKELLM: tool exec_command {"cmd":"echo hi-from-codex-07"}`)
	evs := since(r.sink.waitEvent(t, "run.terminal"), n)
	t.Logf("events: %v", types(evs))
	t.Logf("said: %q notice: %v", said(evs), payloadOf(evs, "provider.notice.recorded"))
	require.Equal(t, 1, count(evs, "turn.completed"))
	require.GreaterOrEqual(t, count(evs, "tool.execution.completed"), 1)
	require.Contains(t, said(evs), "hi-from-codex-07")
	prpschema.RequireValidEvents(t, evs)
	tr := wireTranscript(t, wire)
	var out []string
	for _, e := range readTranscript(t, tr) {
		if m, _ := e["msg"].(map[string]any); e["dir"] == "out" && m["method"] != nil {
			out = append(out, m["method"].(string))
		}
	}
	t.Logf("app-server methods: %v", out)
	require.Contains(t, out, "item/started")
	require.Contains(t, out, "turn/completed")
	require.Equal(t, []string{"initialize", "initialized", "thread/start", "turn/start"}, methodsIn(readTranscript(t, tr)))
	validateTranscript(t, tr)
}

// wireTranscript joins the recorded directions into a fakecodex-style
// transcript: runnerd's lines first, then the app-server's. The order only
// matters for matching responses to requests: every request of this turn
// is runnerd's (approvalPolicy never, no dynamic tools), so its requests
// precede the answers; a server request would show up as an unmatched
// answer and fail the check, not pass it.
func wireTranscript(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	for _, side := range []struct{ file, dir string }{{"in.ndjson", "in"}, {"out.ndjson", "out"}} {
		data, err := os.ReadFile(filepath.Join(dir, side.file))
		require.NoError(t, err)
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if !json.Valid([]byte(l)) {
				b.WriteString(mustJSON(map[string]any{"dir": side.dir, "text": l}) + "\n")
				continue
			}
			b.WriteString(mustJSON(map[string]any{"dir": side.dir, "msg": json.RawMessage(l)}) + "\n")
		}
	}
	p := filepath.Join(dir, "transcript.ndjson")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o600))
	return p
}
