package agent

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
)

// TestOOMErrorFrameNamesTheCause: pcwrap's error frame for a child the OOM
// killer took becomes a harness.diagnostic that says so; any other error
// frame stays pcwrap_error.
func TestOOMErrorFrameNamesTheCause(t *testing.T) {
	m := NewManager(Config{StateDir: t.TempDir(), Sink: newMemSink()}, Stored{})
	defer m.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	p := &process{ended: make(chan struct{})}
	evs := m.pcwrapErrorLocked(p, frame.OOMKilledPrefix+" (memory.events oom_kill 1)")
	require.Equal(t, reasonAgentOOMKilled, evs[0].Payload["reasonCode"])
	evs = m.pcwrapErrorLocked(p, "pcwrap: descendants survived terminate")
	require.Equal(t, "pcwrap_error", evs[0].Payload["reasonCode"])
}
