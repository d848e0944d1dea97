package runner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// Sizes of the full-send-queue test: the link's send queue, lowered so
// that one batch of the agent's events overfills it (the flow control of
// prp.md §8.5 lets one batch out before the core's ACK), and the fake
// agent's burst of tool calls, each its own item.
const (
	floodSendQueue = 8
	floodCalls     = 1000
)

// TestInterruptWhileSendQueueFull: the core stops reading, so the link's
// send queue is really full behind a burst of agent events and the send
// routine is blocked in a send; a turn.interrupt still runs as usual: its
// result is committed and session/cancel reaches the agent within the
// cancel grace. Nothing the command needs (the agent's lock, the
// dispatch routine) waits for the socket.
func TestInterruptWhileSendQueueFull(t *testing.T) {
	// The core reads nothing for the whole test: its silence timeout must
	// not end the connection first.
	h := newPipeHarness(t, func(c *control.Config) { c.SilenceTimeout = time.Hour })
	cfg := h.config(false, "--pcwrap-path", testbin.Path(t, "pcwrap"))
	h.start(cfg, options{SendQueue: floodSendQueue})
	cwd := t.TempDir()
	b, err := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
		"command": fakeacpBin(t), "cwd": cwd}})
	require.NoError(t, err)
	res := h.waitResult(h.queue("run.prepare", string(b)).CommandID)
	require.Equal(t, "completed", res.Status, string(res.Result))
	res = h.waitResult(h.queue("session.open", `{"reuse":"same_session"}`).CommandID)
	require.Equal(t, "completed", res.Status, string(res.Result))
	res = h.waitResult(h.queue("turn.start", `{"text":"flood `+itoa(floodCalls)+`"}`).CommandID)
	require.Equal(t, "completed", res.Status, string(res.Result))

	release := h.core.HoldReads()
	defer release()
	before := h.readState().NextSourceSeq
	require.NoError(t, os.WriteFile(filepath.Join(cwd, "flood-go"), nil, 0o600))
	// Committed and unacknowledged beyond what the pipe, the link's queue
	// and its writer can hold: the send routine is blocked in a send.
	full := uint64(floodSendQueue + 2)
	waitUntil(t, waitBound, "the burst is committed", func() bool {
		return h.readState().NextSourceSeq-before > full
	})

	interrupt := h.queue("turn.interrupt", `{}`)
	waitUntil(t, cfg.CancelGrace, "session/cancel reaches the agent", func() bool {
		_, err := os.Stat(filepath.Join(cwd, "cancel-seen"))
		return err == nil
	})
	// The agent's answer cannot be consumed (flow control waits for an ACK
	// the core never sends), so the interrupt settles the turn itself after
	// the grace and stops the agent: its result is committed within that.
	waitUntil(t, cfg.CancelGrace+agentShutdownWait+waitBound, "the interrupt's result is committed", func() bool {
		r, ok := h.readState().ProcessedCommands[interrupt.CommandID]
		return ok && r.Status == "completed"
	})
}

// waitUntil polls cond until it holds, failing the test after bound.
func waitUntil(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
