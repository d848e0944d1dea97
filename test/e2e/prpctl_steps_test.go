package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// TestPrpctlResolveAndWaitEvent: a script with no sleeps
// drives a manual-permission turn: resolve answers the runtime request the
// agent raised (allow → the agent's allow_once option), waitEvent holds
// session.close until the turn's run.terminal.
func TestPrpctlResolveAndWaitEvent(t *testing.T) {
	runnerd, agent := runnerdBin(t), fakeacpBin(t)
	prepare, err := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
		"command": agent, "cwd": t.TempDir(), "permissionMode": "manual"}})
	require.NoError(t, err)
	script := filepath.Join(t.TempDir(), "script.jsonl")
	require.NoError(t, os.WriteFile(script, []byte(strings.Join([]string{
		`{"command":"run.prepare","payload":` + string(prepare) + `}`,
		`{"command":"session.open","payload":{"reuse":"same_session"}}`,
		`{"command":"turn.start","payload":{"text":"permission edit"}}`,
		`{"resolve":"allow"}`,
		`{"waitEvent":"run.terminal"}`,
		`{"command":"session.close","payload":{}}`,
	}, "\n")+"\n"), 0o600))
	code, lines := runPrpctl(t, "--mode", "dial", "--runnerd", runnerd, "--state-dir", stateDir(t),
		"--runnerd-arg=--pcwrap-path="+testbin.Path(t, "pcwrap"), "--script", script, "--timeout", "15s")
	require.Equal(t, 0, code)
	var types []string
	for _, r := range linesOf(lines, "command_result") {
		require.Equal(t, "completed", r.Status, "%s: %s", r.CommandType, r.Result)
		types = append(types, r.CommandType)
	}
	require.Equal(t, []string{"run.prepare", "session.open", "turn.start", "request.resolve", "session.close"}, types)
	var evTypes []string
	for _, e := range linesOf(lines, "event") {
		evTypes = append(evTypes, e.EventType)
	}
	created := indexOf(evTypes, "runtime_request.created")
	resolved := indexOf(evTypes, "runtime_request.resolved")
	terminal := indexOf(evTypes, "run.terminal")
	require.True(t, created >= 0 && resolved > created && terminal > resolved, "%v", evTypes)
	require.NotContains(t, evTypes, "runtime_request.cancelled")
	require.Greater(t, indexOf(evTypes, "turn.completed"), resolved, "the turn ran to its end before session.close: %v", evTypes)
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}
