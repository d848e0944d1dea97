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

// terminalTail returns the content of the one terminal tail file under
// the state dir, or "".
func terminalTail(dir string) string {
	ents, _ := os.ReadDir(filepath.Join(dir, "terminals"))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tail") {
			b, _ := os.ReadFile(filepath.Join(dir, "terminals", e.Name()))
			return string(b)
		}
	}
	return ""
}

// TestTools12_TerminalRunnerdSIGKILL: runnerd is SIGKILLed while fakeacp
// waits in terminal/wait_for_exit for a command that is still running;
// the restarted runnerd adopts the terminal, the pending wait is answered
// when the command exits, and terminal/output then returns what the
// command printed before and after the kill (tools.md §8).
func TestTools12_TerminalRunnerdSIGKILL(t *testing.T) {
	r := newAgentRig(t)
	proc := r.start(t)
	r.prepare(t)
	r.open(t)
	gate := filepath.Join(t.TempDir(), "go")
	res := r.run(t, "turn.start", map[string]any{"text": "shell echo before; while [ ! -e " + gate + " ]; do sleep 0.02; done; echo after"})
	require.Equal(t, "completed", res.Status, string(res.Result))
	deadline := time.Now().Add(waitBound)
	for tail := terminalTail(r.dir); !(strings.Contains(tail, `"waiters"`) && strings.HasSuffix(tail, "before\n")); tail = terminalTail(r.dir) {
		require.True(t, time.Now().Before(deadline), "no terminal with output and a pending wait")
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	waitExit(t, proc)
	proc = r.start(t)
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	evs := r.waitEvents(t, "run.terminal", 1)
	text := ""
	for _, e := range evs {
		if e.EventType == "item.delta" && field(t, e, "kind") == "assistant_message" {
			text += field(t, e, "text").(string)
		}
	}
	require.Equal(t, "shell exit 0 output \"before\\nafter\\n\"\n", text)
	// The release cleans up in the background: the terminal's session
	// goes, the agent's stays.
	for len(processSessions(r.dir)) != 1 || terminalTail(r.dir) != "" {
		require.True(t, time.Now().Before(deadline.Add(waitBound)), "the released terminal's files stay")
		time.Sleep(10 * time.Millisecond)
	}

	require.NoError(t, proc.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, waitExit(t, proc))
	require.Empty(t, processSessions(r.dir))
}
