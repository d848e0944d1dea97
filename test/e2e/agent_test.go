package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestACP01_02_EchoTurn: run.prepare, a cold session.open and
// "echo hi" through the real runnerd, pcwrap and fakeacp; the core sees
// the phase events (workspace.md §8), harness.ready, session.started,
// turn.submitted, turn.started, the delta "hi",
// turn.completed and one run.terminal (no run.result.proposed without an
// accepted result or a completion contract, tools.md §4), exactly
// once; SIGTERM stops the agent and removes its session dir (acp.md §11
// scenarios 1, 2; §3.6).
func TestACP01_02_EchoTurn(t *testing.T) {
	r := newAgentRig(t)
	proc := r.start(t)
	r.prepare(t)
	r.open(t)
	res := r.run(t, "turn.start", map[string]any{"text": "echo hi"})
	require.Equal(t, "completed", res.Status)
	require.Contains(t, string(res.Result), `"providerTurnId":"pturn-1"`)
	evs := r.waitEvents(t, "run.terminal", 1)
	requireContiguous(t, evs)
	got := agentTypes(evs)
	require.Equal(t, []string{"runtime.phase.changed", "workspace.ready", "harness.starting", "session.starting",
		"harness.ready", "session.started", "runtime.phase.changed", "turn.submitted", "turn.started", "item.started", "item.delta"}, got[:11])
	require.Equal(t, []string{"turn.completed", "run.terminal"}, got[len(got)-2:])
	text := ""
	for _, e := range evs {
		if e.EventType == "item.delta" {
			text += field(t, e, "text").(string)
		}
	}
	require.Equal(t, "hi", text)
	term, _ := find(evs, "run.terminal")
	require.Equal(t, "completed", field(t, term, "turnTerminalState"))
	require.Len(t, processSessions(r.dir), 1)

	require.NoError(t, proc.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, waitExit(t, proc))
	require.Empty(t, processSessions(r.dir), "an orderly stop stops the agent")
}

// TestACP04_HandshakeTimeout: --hang-on-new-session → at the
// bound the agent is stopped, no provider event (only the phase events
// from before the handshake), the command fails with
// code session_handshake_timeout (scenario 4).
func TestACP04_HandshakeTimeout(t *testing.T) {
	r := newAgentRig(t, "--session-open-cold-timeout-agent", "claude=800")
	r.start(t)
	r.prepare(t, "--hang-on-new-session")
	res := r.run(t, "session.open", map[string]any{})
	require.Equal(t, "failed", res.Status)
	require.Contains(t, string(res.Result), `"code":"session_handshake_timeout"`)
	require.Contains(t, string(res.Result), "within 800ms")
	require.Equal(t, []string{"runtime.phase.changed", "workspace.ready", "harness.starting", "session.starting"}, agentTypes(r.events(t)),
		"no provider event, and no phase event after the handshake began (workspace.md §8)")
	require.Empty(t, processSessions(r.dir))
}

// TestACP08_Interrupt: a long turn, then turn.interrupt →
// turn.interrupted, one result, one terminal, agent stopped (scenario 8).
func TestACP08_Interrupt(t *testing.T) {
	r := newAgentRig(t, "--cancel-grace-ms", "1000")
	r.start(t)
	r.prepare(t)
	r.open(t)
	r.run(t, "turn.start", map[string]any{"text": "sleep 20000"})
	res := r.run(t, "turn.interrupt", map[string]any{})
	require.Equal(t, "completed", res.Status)
	evs := r.waitEvents(t, "run.terminal", 1)
	require.Equal(t, 1, countType(evs, "turn.interrupted"))
	require.Equal(t, 0, countType(evs, "run.result.proposed"), "no synthetic result without a completion contract (tools.md §4)")
	require.Empty(t, processSessions(r.dir))
}

// TestACP13_CrashMidTurn: the agent dies mid-turn → harness.exited,
// turn.failed, session.failed agent_disconnected (scenario 13).
func TestACP13_CrashMidTurn(t *testing.T) {
	r := newAgentRig(t)
	r.start(t)
	r.prepare(t, "--crash-mid-turn", "sigkill")
	r.open(t)
	r.run(t, "turn.start", map[string]any{"text": "echo boom"})
	evs := r.waitEvents(t, "session.failed", 1)
	require.Equal(t, 1, countType(evs, "harness.exited"))
	require.Equal(t, 1, countType(evs, "turn.failed"))
	require.Equal(t, 1, countType(evs, "run.terminal"))
}

// TestACP26_PcwrapKilled: kill -9 of pcwrap mid-turn → within the
// loss deadline harness.diagnostic{transport_closed}, turn.failed, one
// result, one terminal; the agent's group is gone (scenario 26).
func TestACP26_PcwrapKilled(t *testing.T) {
	r := newAgentRig(t)
	r.start(t)
	r.prepare(t)
	r.open(t)
	r.run(t, "turn.start", map[string]any{"text": "sleep 20000"})
	sessions := processSessions(r.dir)
	require.Len(t, sessions, 1)
	pid := pcwrapPid(t, filepath.Join(r.dir, "process-sessions", sessions[0]))
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	evs := r.waitEvents(t, "run.terminal", 1)
	diag, ok := find(evs, "harness.diagnostic")
	require.True(t, ok)
	require.Equal(t, "transport_closed", field(t, diag, "lossReason"))
	require.Equal(t, 1, countType(evs, "turn.failed"))
	require.Equal(t, 0, countType(evs, "run.result.proposed"), "no synthetic result without a completion contract (tools.md §4)")
}

// TestACP29_LossBetweenTurns: the agent dies while idle; the next
// turn.start fails at once with provider_exit (scenario 29).
func TestACP29_LossBetweenTurns(t *testing.T) {
	r := newAgentRig(t)
	r.start(t)
	r.prepare(t)
	r.open(t)
	sessions := processSessions(r.dir)
	require.Len(t, sessions, 1)
	pgid := childPgid(t, filepath.Join(r.dir, "process-sessions", sessions[0]))
	require.NoError(t, syscall.Kill(-pgid, syscall.SIGKILL))
	r.waitEvents(t, "harness.exited", 1)
	res := r.run(t, "turn.start", map[string]any{"text": "echo late"})
	require.Equal(t, "completed", res.Status)
	require.Contains(t, string(res.Result), `"lossReason":"provider_exit"`)
	evs := r.waitEvents(t, "run.terminal", 1)
	require.Equal(t, 1, countType(evs, "turn.failed"))
}

// pcwrapPid finds the pcwrap whose environment names dir (scanning /proc).
func pcwrapPid(t testing.TB, dir string) int {
	t.Helper()
	return envPid(t, "PAPERCLIP_PROCESS_SESSION_DIR="+dir+"\x00")
}

// envPid finds the process whose environment has a variable starting
// with prefix (NAME=value...), scanning /proc.
func envPid(t testing.TB, prefix string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && strings.Contains("\x00"+string(env)+"\x00", "\x00"+prefix) {
			return pid
		}
	}
	t.Fatalf("no process with %s in its environment", prefix)
	return 0
}

// childPgid reads the agent's process group from .pcwrap.child.
func childPgid(t *testing.T, dir string) int {
	t.Helper()
	var rec struct {
		Pgid int `json:"pgid"`
	}
	b, err := os.ReadFile(filepath.Join(dir, ".pcwrap.child"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rec))
	require.Positive(t, rec.Pgid)
	return rec.Pgid
}
