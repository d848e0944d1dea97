package runner

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/agent"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/state"
)

func readFile(path string) ([]byte, error) { return os.ReadFile(path) }

// TestLoopDialCommandsAndEvents: a dial-mode runner admits lifecycle and
// unimplemented commands and ships runner events that the core commits.
func TestLoopDialCommandsAndEvents(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		h.start(h.config(false), options{})

		snap := h.queue("session.snapshot", `{}`)
		p := h.waitResult(snap.CommandID)
		require.Equal(t, "completed", p.Status)
		require.JSONEq(t, `{"activeProviderTurnId":null,"warmAttachReady":false}`, string(p.Result))

		// The ACP provider answers it as the reference does.
		turn := h.queue("session.budget.increase", `{}`)
		p = h.waitResult(turn.CommandID)
		require.Equal(t, "rejected", p.Status)
		require.Equal(t, agent.CodeProviderCommandUnavailable, resultCodeOf(t, p))

		// codex binds; a kind runnerd does not know fails.
		prep := h.queue("run.prepare", `{"provider":{"kind":"claude_managed"}}`)
		p = h.waitResult(prep.CommandID)
		require.Equal(t, "failed", p.Status, "scenario 51")
		require.Equal(t, state.CodeCommandExecutionFailed, resultCodeOf(t, p))

		drain := h.queue("runner.drain", `{}`)
		p = h.waitResult(drain.CommandID)
		require.Equal(t, "completed", p.Status)
		turn2 := h.queue("turn.start", `{"text":"again"}`)
		p = h.waitResult(turn2.CommandID)
		require.Equal(t, "rejected", p.Status)
		require.Equal(t, codeRunnerDraining, resultCodeOf(t, p))

		// The journal records the status the core saw, not a failure mapped
		// back on send.
		st := h.readState()
		require.Equal(t, state.StatusRejected, st.ProcessedCommands[turn.CommandID].Status)
		require.Equal(t, state.StatusRejected, st.ProcessedCommands[turn2.CommandID].Status)
		require.Equal(t, state.StatusFailed, st.ProcessedCommands[prep.CommandID].Status)

		s := h.waitCore(func(s control.Snapshot) bool {
			return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "runner.draining")) == 1
		})
		evs := prptest.DecodeEvents(t, s.Events)
		require.Equal(t, "runner.connected", evs[0].EventType)
		for i, e := range evs {
			require.EqualValues(t, i+1, e.SourceSeq)
		}
	})
}

// TestLoopListenMode: the core dials the runner's listener.
func TestLoopListenMode(t *testing.T) {
	h := newHarness(t, nil)
	addr := make(chan string, 1)
	h.start(h.config(true), options{OnListening: func(a string) { addr <- a }})
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	var a string
	select {
	case a = <-addr:
	case <-ctx.Done():
		t.Fatal("runner did not listen")
	}
	require.NoError(t, h.core.Connect(ctx, "ws://"+a+prp.ConnectPath(testIdentity.RunID)))
	snap := h.queue("session.snapshot", `{}`)
	require.Equal(t, "completed", h.waitResult(snap.CommandID).Status)
}

// TestWarmAttachReadyNeedsDrainedOutbox: session.snapshot reports
// warmAttachReady only for an idle provider and a fully acknowledged
// outbox (prp.md §9.5).
func TestWarmAttachReadyNeedsDrainedOutbox(t *testing.T) {
	require.True(t, warmAttachReady(true, state.Summary{AckedSourceSeq: 4, HighestSourceSeq: 4}))
	require.False(t, warmAttachReady(true, state.Summary{AckedSourceSeq: 3, HighestSourceSeq: 4}), "an unacknowledged event")
	require.False(t, warmAttachReady(false, state.Summary{AckedSourceSeq: 4, HighestSourceSeq: 4}), "an active turn or no live agent")
}
