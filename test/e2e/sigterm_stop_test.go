package e2e

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSigtermStopConsumesExitFrame: SIGTERM to runnerd with a live agent,
// idle or mid-turn, is an orderly stop (acp.md §3.6): stdinEnd, shutdown,
// and the agent's exit frame is consumed although the link that would ACK
// the outbox is already gone, so harness.exited (with the agent's own
// exit) is committed and reaches the core once the next runnerd connects.
// A stop that ran out its wait instead would cancel the reader before the
// exit frame and commit no harness.exited: mid-turn the agent's last
// output during the stop is committed unacknowledged, so the gate is shut
// for the exit frame behind it; idle, the gate is shut only if an ACK was
// still on its way. The agent leaves nothing behind, and the next runnerd
// resumes the session and runs a turn.
func TestSigtermStopConsumesExitFrame(t *testing.T) {
	for _, tc := range []struct{ name, prompt string }{
		{"idle", "echo one"},
		{"midTurn", "sleep 20000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newAgentRig(t)
			cmd := r.start(t)
			r.prepare(t, "--supports-load-session")
			r.open(t)
			require.Equal(t, "completed", r.run(t, "turn.start", map[string]any{"text": tc.prompt}).Status)
			if tc.name == "idle" {
				r.waitEvents(t, "run.terminal", 1)
			} else {
				r.waitEvents(t, "turn.started", 1)
			}
			pcwrap := pcwrapPid(t, r.sessionDir(t))
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			require.Equal(t, 0, waitExit(t, cmd))
			require.Empty(t, processSessions(r.dir), "an orderly stop stops the agent")
			require.ErrorIs(t, syscall.Kill(pcwrap, 0), syscall.ESRCH, "pcwrap is gone")

			r.start(t)
			evs := r.waitEvents(t, "harness.exited", 1)
			ex, _ := find(evs, "harness.exited")
			// The exit frame carries the agent's code, or the signal when
			// pcwrap's shutdown ended it before it left on stdin's end; a
			// harness.exited without either was made without the frame.
			require.True(t, field(t, ex, "exitCode") != nil || field(t, ex, "signal") != nil,
				"the agent's own exit, from its exit frame: %s", ex.Payload)
			r.open(t)
			require.Equal(t, "completed", r.run(t, "turn.start", map[string]any{"text": "echo two"}).Status)
			evs = r.waitEvents(t, "run.terminal", 2)
			require.Equal(t, 1, countType(evs, "harness.exited"))
			requireContiguous(t, evs)
		})
	}
}
