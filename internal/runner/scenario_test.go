package runner

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

// fixedIssuedAt keeps a command's bytes identical between the core journal
// and a pre-seeded runner journal.
const fixedIssuedAt = "2026-01-01T00:00:00.000Z"

// rawCommand is the command object exactly as the core sends it.
func rawCommand(t *testing.T, cmd prp.Command) []byte {
	t.Helper()
	b, err := json.Marshal(cmd)
	require.NoError(t, err)
	return b
}

// sendCommand sends a raw command envelope on the core's current connection.
func (h *harness) sendRaw(kind string, payload any) {
	h.t.Helper()
	require.NoError(h.t, h.core.SendRaw(h.t.Context(), func(s *prp.Session) ([]byte, error) {
		env, err := s.NewControl(kind, payload)
		if err != nil {
			return nil, err
		}
		return prp.MarshalEnvelope(env)
	}))
}

// seed runs fn on the harness state before the runner starts.
func (h *harness) seed(fn func(tx *state.Tx) error) {
	h.t.Helper()
	st := h.openState()
	require.NoError(h.t, st.Update(fn))
	require.NoError(h.t, st.Close())
}

func drainEffects(t *testing.T, evs []prptest.Event) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, e := range prptest.OfType(evs, "runner.draining") {
		var p struct {
			CommandID string `json:"commandId"`
		}
		require.NoError(t, json.Unmarshal(e.Payload, &p))
		out[p.CommandID]++
	}
	return out
}

// TestPRP11_ReconnectReplaysWithoutSecondEffect: connections drop
// while commands run; unACKed events and results are replayed, each drain
// takes effect once, and sourceSeq stays contiguous.
func TestPRP11_ReconnectReplaysWithoutSecondEffect(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		h.start(h.config(false), options{})
		h.waitCore(func(s control.Snapshot) bool { return s.Connected })
		var ids []string
		for i := range 24 {
			typ := "runner.drain"
			if i%3 == 2 {
				typ = "session.snapshot"
			}
			cmd, _ := h.core.QueueCommand(prp.Command{Type: typ, Payload: json.RawMessage(`{}`)})
			ids = append(ids, cmd.CommandID)
			if i%4 == 1 {
				h.core.DropCurrent()
			}
		}
		s := h.waitCore(func(s control.Snapshot) bool { return len(s.Results) == len(ids) })
		require.Greater(t, s.Authentications, 1, "connections were dropped and re-established")
		evs := prptest.DecodeEvents(t, s.Events)
		for i, e := range evs {
			require.EqualValues(t, i+1, e.SourceSeq)
		}
		effects := drainEffects(t, evs)
		for i, id := range ids {
			var p prp.CommandResultPayload
			require.NoError(t, json.Unmarshal(s.Results[id], &p))
			require.Equal(t, "completed", p.Status, id)
			if i%3 != 2 {
				require.Equal(t, 1, effects[id], "drain %s took effect once", id)
			}
		}
	})
}

// TestPRP11_ReplayIsByteIdentical: an event durable before a crash is
// sent after the restart with its stored bytes, sequence and id.
func TestPRP11_ReplayIsByteIdentical(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		h.seed(func(tx *state.Tx) error {
			_, err := tx.Enqueue(state.Event{Type: "runner.diagnostic", Priority: state.P1, Payload: json.RawMessage(`{"note":"<kept & exact>"}`)})
			return err
		})
		stored := h.readState().Outbox
		require.Len(t, stored, 1)
		h.start(h.config(false), options{})
		s := h.waitCore(func(s control.Snapshot) bool { return len(s.Events) >= 3 })
		require.Equal(t, string(stored[0].Envelope), string(s.Events[0]), "replayed byte for byte")
		evs := prptest.DecodeEvents(t, s.Events)
		require.Equal(t, "runner.reconciled", evs[1].EventType, "P0 runner.reconciled after the restart")
		require.Equal(t, "runner.reconnected", evs[2].EventType)
	})
}

// TestPRP12_DuplicateCommand: the same command again replays the
// recorded result without a second effect; the same id with different
// bytes fails closed with the state kept.
func TestPRP12_DuplicateCommand(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		run := h.start(h.config(false), options{})
		cmd, err := h.core.QueueCommand(prp.Command{CommandID: "cmd_drain", Type: "runner.drain", IssuedAt: fixedIssuedAt, Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		h.waitResult(cmd.CommandID)
		before := h.core.Snapshot().Authentications

		h.sendRaw(prp.KindCommand, json.RawMessage(rawCommand(t, cmd)))
		// The runner handles commands in order: once the next result is in, the
		// duplicate's replayed result was admitted before it.
		h.waitResult(h.queue("session.snapshot", `{}`).CommandID)
		s := h.core.Snapshot()
		require.Equal(t, before, s.Authentications, "an identical duplicate result does not close the connection")
		require.Equal(t, 1, drainEffects(t, prptest.DecodeEvents(t, s.Events))["cmd_drain"])

		conflict := cmd
		conflict.Payload = json.RawMessage(`{"other":true}`)
		h.sendRaw(prp.KindCommand, json.RawMessage(rawCommand(t, conflict)))
		err = run.wait(t)
		require.Error(t, err)
		require.True(t, errors.Is(err, state.ErrCommandReplayConflict), "fail closed: %v", err)
		require.Equal(t, config.ExitFailure, config.ExitCode(err))
		st := h.readState()
		require.Equal(t, state.StatusCompleted, st.ProcessedCommands["cmd_drain"].Status, "state kept")
	})
}

// TestPRP13_NonContiguousSeq: a controllerSeq that skips is fatal.
func TestPRP13_NonContiguousSeq(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		run := h.start(h.config(false), options{})
		h.waitCore(func(s control.Snapshot) bool { return s.Connected })
		h.sendRaw(prp.KindCommand, prp.Command{
			Schema: prp.CommandSchemaV1, CommandID: "cmd_gap", ControllerSeq: 3, Type: "session.snapshot",
			IssuedAt: fixedIssuedAt, Payload: json.RawMessage(`{}`),
		})
		err := run.wait(t)
		require.ErrorIs(t, err, state.ErrNonContiguousCommand)
		require.Equal(t, config.ExitFailure, config.ExitCode(err))
		require.Empty(t, h.readState().ProcessedCommands, "nothing journaled")
	})
}

// TestPRP14_CrashBetweenJournalAndEffect: a command journaled as
// pending before a crash is reported failed/execution_indeterminate after
// the restart and never executed.
func TestPRP14_CrashBetweenJournalAndEffect(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		cmd, err := h.core.QueueCommand(prp.Command{CommandID: "cmd_pending", Type: "runner.drain", IssuedAt: fixedIssuedAt, Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		dec, err := prp.DecodeCommand(rawCommand(t, cmd))
		require.NoError(t, err)
		h.seed(func(tx *state.Tx) error {
			adm, err := tx.BeginCommand(dec)
			require.Equal(t, state.Execute, adm.Disposition)
			return err // crash: the effect never ran
		})
		h.start(h.config(false), options{})
		p := h.waitResult(cmd.CommandID)
		require.Equal(t, "failed", p.Status)
		require.Equal(t, state.CodeExecutionIndeterminate, resultCode(p.Result))
		next := h.queue("session.snapshot", `{}`)
		h.waitResult(next.CommandID)
		require.Zero(t, drainEffects(t, prptest.DecodeEvents(t, h.core.Snapshot().Events))[cmd.CommandID], "never re-run")
	})
}

// TestPRP15_AckOutOfRange: an ACK beyond the produced sequence or below
// the cursor is a fatal protocol error; the state is kept.
func TestPRP15_AckOutOfRange(t *testing.T) {
	for name, ack := range map[string]int64{"beyond": 999, "below": 0} {
		t.Run(name, func(t *testing.T) {
			simTest(t, nil, func(t *testing.T, h *harness) {
				run := h.start(h.config(false), options{})
				// A result handled after the core admitted event 1 proves its
				// ack(1) is queued ahead of ours (one dispatch goroutine per connection).
				h.waitCore(func(s control.Snapshot) bool { return s.AckedSourceSeq >= 1 })
				h.waitResult(h.queue("session.snapshot", `{}`).CommandID)
				h.sendRaw(prp.KindAck, prp.AckPayload{AckedSourceSeq: ack})
				err := run.wait(t)
				require.Error(t, err)
				require.True(t, errors.Is(err, state.ErrAckBeyondProduced) || errors.Is(err, state.ErrAckBehindCursor), "%v", err)
				require.Equal(t, config.ExitFailure, config.ExitCode(err))
				st := h.readState()
				require.Equal(t, state.Ready, st.Lifecycle, "state intact")
			})
		})
	}
}

// TestPRP15_ValidAckTrims: valid ACKs trim the outbox; an orderly stop
// saves the cursor.
func TestPRP15_ValidAckTrims(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		run := h.start(h.config(false), options{})
		cmd := h.queue("runner.drain", `{}`)
		h.waitResult(cmd.CommandID)
		// The runner handles frames in order: once the next result is in, it
		// has applied every ack sent before it.
		h.waitResult(h.queue("session.snapshot", `{}`).CommandID)
		s := h.core.Snapshot()
		run.cancel()
		require.NoError(t, run.wait(t), "SIGTERM is an orderly stop")
		st := h.readState()
		require.Empty(t, st.Outbox)
		require.EqualValues(t, s.AckedSourceSeq, st.AckedSourceSeq)
	})
}

// TestPRP18_ShutdownWaitsForAck: runner.shutdown persists stopped and
// the fence before its result, exits 0 after command_result_ack, clears
// the fence; a restart exits at once.
func TestPRP18_ShutdownWaitsForAck(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		run := h.start(h.config(false), options{})
		cmd := h.queue("runner.shutdown", `{}`)
		require.NoError(t, run.wait(t))
		require.Equal(t, "completed", h.waitResult(cmd.CommandID).Status)
		st := h.readState()
		require.Equal(t, state.Stopped, st.Lifecycle)
		require.Nil(t, st.PendingTerminalDelivery)
		require.Empty(t, st.Outbox, "outbox flushed before exit")
		evs := prptest.DecodeEvents(t, h.core.Snapshot().Events)
		require.Equal(t, "runner.stopped", evs[len(evs)-1].EventType)

		auths := h.core.Snapshot().Authentications
		require.NoError(t, h.start(h.config(false), options{}).wait(t), "stopped state exits at once")
		require.Equal(t, auths, h.core.Snapshot().Authentications, "without connecting")
	})
}

// TestPRP18_RestartWithFenceOnlyReconciles: a process that died with
// the terminal fence set reconciles the terminal result on the next
// connection (re-sent from the journal, never re-executed) and stops.
func TestPRP18_RestartWithFenceOnlyReconciles(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		cmd, err := h.core.QueueCommand(prp.Command{CommandID: "cmd_stop", Type: "runner.shutdown", IssuedAt: fixedIssuedAt, Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		dec, err := prp.DecodeCommand(rawCommand(t, cmd))
		require.NoError(t, err)
		h.seed(func(tx *state.Tx) error {
			if _, err := tx.BeginCommand(dec); err != nil {
				return err
			}
			res, err := tx.FinishCommand(dec.CommandID, state.StatusCompleted, json.RawMessage(`{"lifecycle":"stopped"}`))
			if err != nil {
				return err
			}
			return tx.SetTerminalFence(res, state.Stopped)
		})
		run := h.start(h.config(false), options{})
		require.NoError(t, run.wait(t))
		p := h.waitResult(cmd.CommandID)
		require.Equal(t, "completed", p.Status)
		require.JSONEq(t, `{"lifecycle":"stopped"}`, string(p.Result))
		require.Nil(t, h.readState().PendingTerminalDelivery)
		require.Empty(t, prptest.OfType(prptest.DecodeEvents(t, h.core.Snapshot().Events), "runner.stopped"), "not re-executed")
	})
}

// TestPRP18_SuspendThenResume: runner.suspend leaves lifecycle
// suspended and exits 0; unlike stopped, a restart resumes.
func TestPRP18_SuspendThenResume(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		run := h.start(h.config(false), options{})
		cmd := h.queue("runner.suspend", `{}`)
		require.NoError(t, run.wait(t))
		require.Equal(t, "completed", h.waitResult(cmd.CommandID).Status)
		require.Equal(t, state.Suspended, h.readState().Lifecycle)
		run = h.start(h.config(false), options{})
		next := h.queue("session.snapshot", `{}`)
		require.Equal(t, "completed", h.waitResult(next.CommandID).Status)
		run.cancel()
		require.NoError(t, run.wait(t))
		require.Equal(t, state.Ready, h.readState().Lifecycle, "resumed")
	})
}

// TestPRP19_Revoke: a revoke with a higher epoch persists revoked and
// exits 0; a restart exits at once; a non-advancing epoch is fatal.
func TestPRP19_Revoke(t *testing.T) {
	t.Run("advancing", func(t *testing.T) {
		simTest(t, nil, func(t *testing.T, h *harness) {
			run := h.start(h.config(false), options{})
			h.waitCore(func(s control.Snapshot) bool { return s.Connected })
			require.NoError(t, h.core.Revoke(3))
			require.NoError(t, run.wait(t))
			st := h.readState()
			require.Equal(t, state.Revoked, st.Lifecycle)
			require.EqualValues(t, 3, st.RevocationEpoch, "the honoured epoch is durable")
			auths := h.core.Snapshot().Authentications
			require.NoError(t, h.start(h.config(false), options{}).wait(t))
			require.Equal(t, auths, h.core.Snapshot().Authentications)
		})
	})
	t.Run("not advancing", func(t *testing.T) {
		simTest(t, nil, func(t *testing.T, h *harness) {
			run := h.start(h.config(false), options{})
			h.waitCore(func(s control.Snapshot) bool { return s.Connected })
			h.sendRaw(prp.KindRevoke, prp.RevokePayload{RevocationEpoch: 0})
			err := run.wait(t)
			require.Error(t, err)
			require.Equal(t, config.ExitFailure, config.ExitCode(err))
			require.NotEqual(t, state.Revoked, h.readState().Lifecycle)
		})
	})
}

// TestPRP20_48_LeaseExpiry: with the server gone, runnerd keeps
// redialling until the lease expires, then shuts down with
// lease_expired_requires_bootstrap and keeps its state (scenario 48; the
// exit path of scenario 20).
func TestPRP20_48_LeaseExpiry(t *testing.T) {
	simTest(t, func(c *control.Config) { c.LeaseTTL = time.Second }, func(t *testing.T, h *harness) {
		run := h.start(h.config(false), options{})
		h.waitCore(func(s control.Snapshot) bool { return s.Connected })
		h.core.Close() // the server is gone: every redial fails
		err := run.wait(t)
		require.ErrorIs(t, err, config.ErrLeaseExpired)
		require.Contains(t, config.FormatError(err), "lease_expired_requires_bootstrap")
		st := h.readState()
		require.Equal(t, state.RecoverableFailure, st.Lifecycle)
		require.NotNil(t, st.RecoverableFailure)
		require.Equal(t, string(config.CodeLeaseExpired), *st.RecoverableFailure)
	})
}

// TestPRP22_PongUnderStoragePressure: the pong is built from the
// store's lock-free summary and reports storage pressure; a PRP ping is
// answered while connected.
func TestPRP22_PongUnderStoragePressure(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		dir := t.TempDir() + "/state"
		st, err := state.Open(state.Config{Dir: dir, Identity: testIdentity, MaxOutboxBytes: 4096, P0ReserveBytes: 2048})
		require.NoError(t, err)
		defer st.Close()
		for {
			err := st.Update(func(tx *state.Tx) error {
				_, err := tx.Enqueue(state.Event{Type: "item.delta", Priority: state.P1, Payload: json.RawMessage(`{"delta":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)})
				return err
			})
			if errors.Is(err, state.ErrBackpressure) {
				break
			}
			require.NoError(t, err)
		}
		r := newLoop(config.Config{Identity: testIdentity}, st, nil, options{})
		p := r.pong()
		require.NotNil(t, p.StoragePressure)
		require.True(t, *p.StoragePressure)
		require.Equal(t, string(state.Backpressure), p.Lifecycle)

		h.start(h.config(false), options{})
		h.waitCore(func(s control.Snapshot) bool { return s.Connected })
		require.NoError(t, h.core.Ping(t.Context()))
		h.waitCore(func(s control.Snapshot) bool { return s.Pongs >= 1 })
	})
}

// TestPRP18_NoAckStopsWithFence: without a command_result_ack within
// 2 s the runner stops without returning to ready, fence kept; the next
// process only reconciles (the core no longer lists the command: treated
// as delivered) and exits 0. The core here never acks because the shutdown
// reached the runner outside its journal, so it drops the result.
func TestPRP18_NoAckStopsWithFence(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		run := h.start(h.config(false), options{})
		h.waitCore(func(s control.Snapshot) bool { return s.Connected })
		h.sendRaw(prp.KindCommand, prp.Command{
			Schema: prp.CommandSchemaV1, CommandID: "cmd_unjournaled_stop", ControllerSeq: 1, Type: "runner.shutdown",
			IssuedAt: fixedIssuedAt, Payload: json.RawMessage(`{}`),
		})
		err := run.wait(t)
		require.Error(t, err, "an unacknowledged terminal result is a failed delivery")
		require.Contains(t, err.Error(), "not acknowledged")
		st := h.readState()
		require.Equal(t, state.Stopped, st.Lifecycle, "never back to ready")
		require.NotNil(t, st.PendingTerminalDelivery)

		auths := h.core.Snapshot().Authentications
		require.NoError(t, h.start(h.config(false), options{}).wait(t))
		require.Greater(t, h.core.Snapshot().Authentications, auths, "the fenced restart connects to reconcile")
		st = h.readState()
		require.Nil(t, st.PendingTerminalDelivery)
		require.Empty(t, st.Outbox, "outbox flushed before the exit")
		require.NoError(t, h.start(h.config(false), options{}).wait(t), "then stopped for good")
	})
}

// TestPRP16_HandlerHitsOutboxBound: an executor effect that would
// push non-P0 events into the P0 reserve is refused whole (nothing of it is
// stored), the command fails with command_execution_failed, and one P0
// runner.diagnostic tells the core (scenario 16 as it applies to the loop;
// the bounds themselves are internal/state's). It also exercises the
// handler seam the ACP executor plugs into.
func TestPRP16_HandlerHitsOutboxBound(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		big := json.RawMessage(`{"delta":"` + strings.Repeat("x", 900) + `"}`)
		flood := func(commit emit) handler {
			return func(ctx context.Context, cmd *prp.Command) (json.RawMessage, error) {
				evs := make([]state.Event, 8)
				for i := range evs {
					evs[i] = state.Event{Type: "item.delta", Priority: state.P1, Payload: big}
				}
				if err := commit(ctx, evs...); err != nil {
					return nil, errors.New("provider output exceeded the outbox")
				}
				return nil, nil
			}
		}
		h.start(h.config(false, "--max-outbox-bytes", "8192", "--p0-reserve-bytes", "4096"),
			options{Handlers: map[string]func(emit) handler{"turn.start": flood, "runner.drain": flood}})
		cmd := h.queue("turn.start", `{"text":"go"}`)
		p := h.waitResult(cmd.CommandID)
		require.Equal(t, "failed", p.Status)
		require.Equal(t, state.CodeCommandExecutionFailed, resultCode(p.Result))
		s := h.waitCore(func(s control.Snapshot) bool {
			return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "runner.diagnostic")) == 1
		})
		evs := prptest.DecodeEvents(t, s.Events)
		require.Empty(t, prptest.OfType(evs, "item.delta"), "the refused effect stored nothing")
		require.JSONEq(t, `{"reasonCode":"outbox_backpressure"}`, string(prptest.OfType(evs, "runner.diagnostic")[0].Payload))

		drain := h.queue("runner.drain", `{}`)
		require.Equal(t, "completed", h.waitResult(drain.CommandID).Status, "lifecycle commands cannot be replaced")
	})
}

// TestPingAnsweredWhileCommandRuns: a PRP ping is answered while a command
// effect holds the dispatch goroutine (ARCHITECTURE.md invariant 5; the
// "ping still answered" half of scenario 22).
func TestPingAnsweredWhileCommandRuns(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		entered, release := make(chan struct{}), make(chan struct{})
		slow := func(emit) handler {
			return func(ctx context.Context, cmd *prp.Command) (json.RawMessage, error) {
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil, nil
			}
		}
		h.start(h.config(false), options{Handlers: map[string]func(emit) handler{"turn.start": slow}})
		cmd := h.queue("turn.start", `{"text":"long"}`)
		select {
		case <-entered:
		case <-time.After(waitBound):
			t.Fatal("handler not entered")
		}
		require.NoError(t, h.core.Ping(t.Context()))
		h.waitCore(func(s control.Snapshot) bool { return s.Pongs >= 1 })
		require.Nil(t, h.core.Snapshot().Results[cmd.CommandID], "answered while the command still runs")
		close(release)
		require.Equal(t, "completed", h.waitResult(cmd.CommandID).Status)
	})
}

// TestPingAnsweredWhileCommitSyncs: a PRP ping is answered while an
// agent's commit waits in the state write's data sync, the store's lock
// held: the pong touches neither the disk nor that lock, and the event
// being committed reaches the core only after the sync.
func TestPingAnsweredWhileCommitSyncs(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		var armed atomic.Bool
		entered, release := make(chan struct{}), make(chan struct{})
		syncFault := func(op string) error {
			if op == "fdatasync" && armed.CompareAndSwap(true, false) {
				close(entered)
				<-release
			}
			return nil
		}
		streaming := func(commit emit) handler {
			return func(ctx context.Context, cmd *prp.Command) (json.RawMessage, error) {
				armed.Store(true)
				return nil, commit(ctx, state.Event{Type: "item.delta", Priority: state.P2,
					Payload: json.RawMessage(`{"kind":"assistant_message","text":"chunk"}`)})
			}
		}
		h.start(h.config(false), options{StoreFault: syncFault, Handlers: map[string]func(emit) handler{"turn.start": streaming}})
		h.waitCore(func(s control.Snapshot) bool { return s.Connected })
		cmd := h.queue("turn.start", `{"text":"stream"}`)
		select {
		case <-entered:
		case <-time.After(waitBound):
			t.Fatal("the commit never reached its data sync")
		}
		pongs := h.core.Snapshot().Pongs
		require.NoError(t, h.core.Ping(t.Context()))
		s := h.waitCore(func(s control.Snapshot) bool { return s.Pongs > pongs })
		require.Empty(t, prptest.OfType(prptest.DecodeEvents(t, s.Events), "item.delta"), "answered while the commit syncs")
		require.Nil(t, s.Results[cmd.CommandID])
		close(release)
		require.Equal(t, "completed", h.waitResult(cmd.CommandID).Status)
		h.waitCore(func(s control.Snapshot) bool {
			return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "item.delta")) == 1
		})
	})
}

// TestPRP14_IndeterminateSuspendEndsProcess: a runner.suspend killed
// between its journal entry and its effect is replayed as failed
// (execution_indeterminate, never re-run); the core acknowledges it and
// sends nothing more on that connection (prp.md §13.1), so the process
// stops by itself, state unchanged, and the next one takes the next
// command. (The crash test's rare hang: such a life waited forever.)
func TestPRP14_IndeterminateSuspendEndsProcess(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		cmd, err := h.core.QueueCommand(prp.Command{Type: "runner.suspend", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		raw, err := json.Marshal(cmd)
		require.NoError(t, err)
		dc, err := prp.DecodeCommand(raw)
		require.NoError(t, err)
		st := h.openState()
		require.NoError(t, st.Update(func(tx *state.Tx) error { _, err := tx.BeginCommand(dc); return err }))
		require.NoError(t, st.Close())

		require.NoError(t, h.start(h.config(false), options{}).wait(t), "the process ends by itself, status 0")
		res := h.waitResult(cmd.CommandID)
		require.Equal(t, "failed", res.Status)
		require.Equal(t, state.CodeExecutionIndeterminate, resultCode(res.Result))
		require.NotEqual(t, state.Suspended, h.readState().Lifecycle, "the suspend had no effect")
		require.Empty(t, prptest.OfType(prptest.DecodeEvents(t, h.core.Snapshot().Events), "runner.suspended"))

		run := h.start(h.config(false), options{})
		require.Equal(t, "completed", h.waitResult(h.queue("session.snapshot", `{}`).CommandID).Status)
		run.cancel()
		require.NoError(t, run.wait(t))
	})
}
