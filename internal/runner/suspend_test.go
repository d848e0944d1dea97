package runner

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

// turnHandlers replace turn.start with a turn that ends at once (the far
// side of the executor): turn.started, then turn.completed.
func turnHandlers() options {
	return options{Handlers: map[string]func(emit) handler{
		"turn.start": func(commit emit) handler {
			return func(ctx context.Context, _ *prp.Command) (json.RawMessage, error) {
				err := commit(ctx,
					state.Event{Type: "turn.started", Priority: state.P1, Payload: json.RawMessage(`{}`)},
					state.Event{Type: "turn.completed", Priority: state.P0, Payload: json.RawMessage(`{"stopReason":"end_turn"}`)})
				return nil, err
			}
		},
	}}
}

func suspendingReason(t *testing.T, e prptest.Event) string {
	t.Helper()
	var p struct {
		Reason    string `json:"reason"`
		Resumable bool   `json:"resumable"`
	}
	require.NoError(t, json.Unmarshal(e.Payload, &p))
	require.True(t, p.Resumable)
	return p.Reason
}

// TestPerTurnExitsAfterTurnAcked: a per-turn runner (the default) exits 0
// once its turn's terminal events are acknowledged (prp.md §7.4), after a
// P0 runner.suspending {reason: per_turn_complete}, leaving lifecycle
// suspended; the next process (the next turn) returns to ready and takes
// commands.
func TestPerTurnExitsAfterTurnAcked(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		cfg := h.config(false, "--lifecycle-mode", "per_turn")
		run := h.start(cfg, turnHandlers())
		res := h.waitResult(h.queue("turn.start", `{"text":"hi"}`).CommandID)
		require.Equal(t, "completed", res.Status)
		require.NoError(t, run.wait(t), "a clean per-turn exit is status 0")

		evs := prptest.DecodeEvents(t, h.core.Snapshot().Events)
		sus := prptest.OfType(evs, prp.EventRunnerSuspending)
		require.Len(t, sus, 1)
		require.Equal(t, suspendPerTurn, suspendingReason(t, sus[0]))
		require.Greater(t, sus[0].SourceSeq, prptest.OfType(evs, "turn.completed")[0].SourceSeq)
		st := h.readState()
		require.Equal(t, state.Suspended, st.Lifecycle)
		require.False(t, st.TurnEnded)
		require.Empty(t, st.Outbox, "every event was acknowledged before the exit")

		run = h.start(cfg, turnHandlers())
		snap := h.waitResult(h.queue("session.snapshot", `{}`).CommandID)
		require.Equal(t, "completed", snap.Status)
		h.waitCore(func(s control.Snapshot) bool {
			return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "runner.reconnected")) >= 1
		})
		require.Equal(t, state.Ready, h.readState().Lifecycle, "the next turn's runner is ready")
		run.cancel()
		require.NoError(t, run.wait(t))
	})
}

// TestPerTurnSuspendResumedAfterRestart: a process that died after the turn
// ended (lifecycle suspending recorded, its event not yet acknowledged)
// leaves the next process to finish the suspend: it replays, waits for the
// ACK and exits 0 suspended.
func TestPerTurnSuspendResumedAfterRestart(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		st := h.openState()
		require.NoError(t, st.Update(func(tx *state.Tx) error {
			if _, err := tx.Enqueue(state.Event{Type: "turn.completed", Priority: state.P0, Payload: json.RawMessage(`{}`)}); err != nil {
				return err
			}
			return nil
		}))
		require.True(t, st.Summary().TurnEnded)
		require.NoError(t, st.Close())

		run := h.start(h.config(false, "--lifecycle-mode", "per_turn"), options{})
		require.NoError(t, run.wait(t))
		evs := prptest.DecodeEvents(t, h.core.Snapshot().Events)
		require.Len(t, prptest.OfType(evs, "turn.completed"), 1)
		require.Len(t, prptest.OfType(evs, prp.EventRunnerSuspending), 1)
		require.Equal(t, state.Suspended, h.readState().Lifecycle)
	})
}

// TestWarmIdleTimeoutSuspends: a warm runner with no command and no turn
// for --idle-timeout-ms suspends itself (runner.suspending
// {reason: idle_timeout}) and exits 0; a turn's end does not end it.
func TestWarmIdleTimeoutSuspends(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		run := h.start(h.config(false, "--lifecycle-mode", "warm", "--idle-timeout-ms", "2000"), turnHandlers())
		require.Equal(t, "completed", h.waitResult(h.queue("turn.start", `{"text":"hi"}`).CommandID).Status)
		require.NoError(t, run.wait(t))

		evs := prptest.DecodeEvents(t, h.core.Snapshot().Events)
		sus := prptest.OfType(evs, prp.EventRunnerSuspending)
		require.Len(t, sus, 1)
		require.Equal(t, suspendIdle, suspendingReason(t, sus[0]), "warm: the turn's end is not an exit")
		require.Equal(t, state.Suspended, h.readState().Lifecycle)
	})
}

// TestLifetimeWhileConnectedRotates: --max-lifetime-ms ending while
// connected is an orderly rotation, as in the reference
// (runner.suspending {reason: max_lifetime_rotation}, exit 0, suspended);
// transport_reconnect_deadline_exceeded stays the code of a lifetime that
// ends while reconnecting (TestLifetimeWhileReconnectingFails).
func TestLifetimeWhileConnectedRotates(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		run := h.start(h.config(false, "--max-lifetime-ms", "1500"), options{})
		require.NoError(t, run.wait(t))
		evs := prptest.DecodeEvents(t, h.core.Snapshot().Events)
		sus := prptest.OfType(evs, prp.EventRunnerSuspending)
		require.Len(t, sus, 1)
		require.Equal(t, suspendLifetime, suspendingReason(t, sus[0]))
		st := h.readState()
		require.Equal(t, state.Suspended, st.Lifecycle)
		require.Nil(t, st.RecoverableFailure)
	})
}

// TestLifetimeWhileReconnectingFails: a lifetime that ends while the runner
// is reconnecting records and exits with
// transport_reconnect_deadline_exceeded (prp.md §6.1), state kept.
func TestLifetimeWhileReconnectingFails(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		run := h.start(h.config(false, "--max-lifetime-ms", "2500"), options{})
		h.waitCore(func(s control.Snapshot) bool { return s.Connected })
		h.core.Close() // the server is gone: every redial fails until the deadline
		err := run.wait(t)
		require.ErrorIs(t, err, config.ErrReconnectDeadlineExceeded)
		st := h.readState()
		require.Equal(t, state.RecoverableFailure, st.Lifecycle)
		require.NotNil(t, st.RecoverableFailure)
		require.Equal(t, string(config.CodeReconnectDeadlineExceeded), *st.RecoverableFailure)
	})
}

// TestSuspendingStateFinishedAfterRestart: a process that recorded
// lifecycle suspending and died before its exit leaves the next process,
// whatever its mode, to finish that suspend: replay, ACK, exit 0 suspended,
// without a second runner.suspending.
func TestSuspendingStateFinishedAfterRestart(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		st := h.openState()
		require.NoError(t, st.Update(func(tx *state.Tx) error {
			if err := tx.SetLifecycle(state.Suspending); err != nil {
				return err
			}
			_, err := tx.Enqueue(state.Event{Type: prp.EventRunnerSuspending, Priority: state.P0,
				Payload: json.RawMessage(`{"reason":"idle_timeout","resumable":true}`)})
			return err
		}))
		require.NoError(t, st.Close())

		require.NoError(t, h.start(h.config(false), options{}).wait(t))
		require.Len(t, prptest.OfType(prptest.DecodeEvents(t, h.core.Snapshot().Events), prp.EventRunnerSuspending), 1)
		require.Equal(t, state.Suspended, h.readState().Lifecycle)
	})
}
