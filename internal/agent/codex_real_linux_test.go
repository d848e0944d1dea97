package agent

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// EnvRealCodex names the real codex binary (@openai/codex@0.169.0:
// node_modules/.bin/codex) for TestCodex07_RealCLI; unset, the test is
// skipped.
const EnvRealCodex = "PCRUNNER_CODEX_BIN"

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
	bin := os.Getenv(EnvRealCodex)
	if bin == "" {
		t.Skipf("%s is not set: install @openai/codex@0.169.0 and set it to node_modules/.bin/codex", EnvRealCodex)
	}
	llm := startFakeLLMForCodex(t)
	r := newRig(t, func(c *Config) {
		c.Environ = append(c.Environ, "OPENAI_BASE_URL="+llm+"/v1", "OPENAI_API_KEY=sk-fake-codex")
	})
	b, _ := json.Marshal(map[string]any{"provider": map[string]any{"kind": "codex", "command": bin, "args": []string{"app-server"},
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
	validateAll(t, evs)
}
