package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// groupGone waits (bounded) until no process of group pgid is left.
func groupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for syscall.Kill(-pgid, 0) == nil {
		require.True(t, time.Now().Before(deadline), "agent group %d still alive", pgid)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestACP05_StdoutJunk: banner lines are skipped and the turn
// completes; a line over 10 MiB fails session.open with
// provider_frame_too_large and "stdout frame exceeded" on runnerd's
// stderr, and the agent is stopped (scenario 5).
func TestACP05_StdoutJunk(t *testing.T) {
	t.Run("banner", func(t *testing.T) {
		r := newAgentRig(t)
		r.start(t)
		r.prepare(t, "--stdout-banner", "3")
		r.open(t)
		r.run(t, "turn.start", map[string]any{"text": "echo ok"})
		evs := r.waitEvents(t, "run.terminal", 1)
		term, _ := find(evs, "run.terminal")
		require.Equal(t, "completed", field(t, term, "turnTerminalState"))
	})
	t.Run("huge-line", func(t *testing.T) {
		r := newAgentRig(t)
		_, stderr := r.startCapturing(t)
		r.prepare(t, "--huge-line-bytes", "11000000")
		res := r.run(t, "session.open", map[string]any{})
		require.Equal(t, "failed", res.Status)
		require.Contains(t, string(res.Result), `"code":"provider_frame_too_large"`)
		require.Contains(t, stderr.String(), "stdout frame exceeded\n")
		require.Empty(t, processSessions(r.dir))
	})
}

// TestACP09_CancelIgnored: an agent that ignores session/cancel
// is stopped after the cancel grace; turn.stop confirms the exit and the
// turn ends interrupted; its group is gone (scenario 9).
func TestACP09_CancelIgnored(t *testing.T) {
	r := newAgentRig(t, "--cancel-grace-ms", "500")
	r.start(t)
	r.prepare(t, "--cancel-mode", "ignore")
	r.open(t)
	pgid := childPgid(t, r.sessionDir(t))
	r.run(t, "turn.start", map[string]any{"text": "sleep 30000"})
	res := r.run(t, "turn.stop", map[string]any{})
	require.Equal(t, "completed", res.Status)
	require.Contains(t, string(res.Result), `"providerExitConfirmed":true`)
	evs := r.waitEvents(t, "run.terminal", 1)
	require.Equal(t, 1, countType(evs, "turn.interrupted"))
	groupGone(t, pgid)
}

// TestACP17_StubbornGrandchild: session.close with a grandchild
// that ignores SIGTERM leaves no member of the agent's group (scenario 17).
func TestACP17_StubbornGrandchild(t *testing.T) {
	r := newAgentRig(t)
	r.start(t)
	r.prepare(t, "--stubborn-grandchild")
	r.open(t)
	pgid := childPgid(t, r.sessionDir(t))
	res := r.run(t, "session.close", map[string]any{})
	require.Equal(t, "completed", res.Status)
	groupGone(t, pgid)
	require.Empty(t, processSessions(r.dir))
}

// TestACP27_SessionDirRemoved: rm -rf of the session directory
// mid-turn → transport_closed, turn.failed, one result, one terminal
// (scenario 27).
func TestACP27_SessionDirRemoved(t *testing.T) {
	r := newAgentRig(t)
	r.start(t)
	r.prepare(t)
	r.open(t)
	dir := r.sessionDir(t)
	pgid := childPgid(t, dir)
	r.run(t, "turn.start", map[string]any{"text": "sleep 30000"})
	require.NoError(t, os.RemoveAll(dir))
	evs := r.waitEvents(t, "run.terminal", 1)
	diag, _ := find(evs, "harness.diagnostic")
	require.Equal(t, "transport_closed", field(t, diag, "lossReason"))
	require.Equal(t, 1, countType(evs, "turn.failed"))
	require.Equal(t, 0, countType(evs, "run.result.proposed"), "no synthetic result without a completion contract (tools.md §4)")
	groupGone(t, pgid)
}

// TestACP28_StdinWriteFails: the stdin queue cannot be written
// (its directory is gone while pcwrap is paused) → write_error, turn.failed,
// one result, one terminal; nothing hangs (scenario 28).
func TestACP28_StdinWriteFails(t *testing.T) {
	r := newAgentRig(t)
	r.start(t)
	r.prepare(t)
	r.open(t)
	dir := r.sessionDir(t)
	pid := pcwrapPid(t, dir)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "stdin")))
	res := r.run(t, "turn.start", map[string]any{"text": "echo lost"})
	require.Equal(t, "completed", res.Status)
	require.True(t, strings.Contains(string(res.Result), `"lossReason":"write_error"`), string(res.Result))
	evs := r.waitEvents(t, "run.terminal", 1)
	diag, _ := find(evs, "harness.diagnostic")
	require.Equal(t, "write_error", field(t, diag, "lossReason"))
	require.Equal(t, 1, countType(evs, "turn.failed"))
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
}
