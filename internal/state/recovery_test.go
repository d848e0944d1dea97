package state

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// Restart recovery (prp.md §9.4): pending → indeterminate, reconnectCount++,
// P0 runner.reconciled {outcome: same_durable_session_resumed}, same identity.
func TestRestartRecoveryEnqueuesReconciled(t *testing.T) {
	s, cfg := newStore(t)
	enqueue(t, s, p1("runner.connected"))
	require.NoError(t, s.Update(func(tx *Tx) error { return tx.SetLifecycle(Ready) }))
	require.NoError(t, s.Close())

	for restart := uint64(1); restart <= 2; restart++ {
		s = openStore(t, cfg)
		rec := s.Recovery()
		require.True(t, rec.Resumed)
		require.Equal(t, restart, rec.ReconnectCount)
		out := s.Unacked()
		last := out[len(out)-1]
		require.Equal(t, rec.ReconciledSeq, last.SourceSeq)
		require.Equal(t, prp.EventRunnerReconciled, last.EventType)
		require.Equal(t, P0, last.Priority)
		var env envelope
		require.NoError(t, json.Unmarshal(last.Envelope, &env))
		require.JSONEq(t, `{"outcome":"same_durable_session_resumed"}`, string(env.Payload.Payload))
		require.Equal(t, "runner_1", env.RunnerInstanceID)
		require.NoError(t, s.Close())
	}
	require.Equal(t, uint64(3), s.Snapshot().NextSourceSeq-1, "sequence numbers are never reused")
}

// Scenario 18 (state part): runner.shutdown persists stopped plus the
// pendingTerminalDelivery fence before its result is sent; a restart with
// the fence only reconciles; once the fence is cleared a stopped state
// exits at once.
func TestPRP18_TerminalFenceSurvivesRestart(t *testing.T) {
	s, cfg := newStore(t)
	c := command(1, "command_prp_00000001", "runner.shutdown", `{}`)
	_, err := begin(t, s, c)
	require.NoError(t, err)
	require.NoError(t, s.Update(func(tx *Tx) error {
		r, err := tx.FinishCommand(c.CommandID, StatusCompleted, nil)
		if err != nil {
			return err
		}
		return tx.SetTerminalFence(r, Stopped)
	}))
	var onDisk State
	require.NoError(t, json.Unmarshal(readFile(t, cfg), &onDisk))
	require.Equal(t, Stopped, onDisk.Lifecycle)
	require.Equal(t, &TerminalFence{CommandID: c.CommandID, ControllerSeq: 1, CommandType: "runner.shutdown", Lifecycle: Stopped}, onDisk.PendingTerminalDelivery)

	// No command_result_ack within the bound: the process stops without
	// returning to ready. A restart sees the fence and does not exit.
	require.NoError(t, s.Close())
	s = openStore(t, cfg)
	rec := s.Recovery()
	require.NotNil(t, rec.PendingTerminalDelivery)
	require.Equal(t, c.CommandID, rec.PendingTerminalDelivery.CommandID)
	require.Equal(t, Stopped, s.Summary().Lifecycle, "never back to ready")
	adm, err := begin(t, s, c)
	require.NoError(t, err)
	require.Equal(t, Replay, adm.Disposition, "the welcome's re-delivery reconciles, no second effect")
	require.Equal(t, StatusCompleted, adm.Result.Status)

	require.NoError(t, s.Update(func(tx *Tx) error { tx.ClearTerminalFence(); return nil }))
	require.NoError(t, s.Close())
	_, err = Open(cfg)
	require.ErrorIs(t, err, ErrExitNow, "stopped without a fence exits at once")
}

func TestSetTerminalFenceRefusesNonTerminalLifecycle(t *testing.T) {
	s, _ := newStore(t)
	require.Error(t, s.Update(func(tx *Tx) error { return tx.SetTerminalFence(CommandResult{CommandID: "c"}, Ready) }))
}

func TestProviderCleanupFenceBlocksExitNow(t *testing.T) {
	s, cfg := newStore(t)
	require.NoError(t, s.Update(func(tx *Tx) error {
		tx.setProviderCleanupFence(&TerminalFence{CommandID: "command_prp_00000009", ControllerSeq: 9, CommandType: "turn.stop", Lifecycle: Stopped})
		return tx.SetLifecycle(Stopped)
	}))
	require.NoError(t, s.Close())
	s = openStore(t, cfg)
	require.NotNil(t, s.Recovery().PendingProviderCleanup)
}

// Scenario 19 (state part): revoke with a higher epoch → revoked, durable;
// a restart exits at once; a non-advancing epoch is a protocol error that
// changes nothing.
func TestPRP19_RevokeIsFinal(t *testing.T) {
	s, cfg := newStore(t)
	before := s.Snapshot()
	err := s.Update(func(tx *Tx) error { return tx.Revoke(3, 3) })
	require.ErrorIs(t, err, ErrRevokeNotAdvancing)
	require.Equal(t, before, s.Snapshot())

	require.NoError(t, s.Update(func(tx *Tx) error { return tx.Revoke(4, 3) }))
	require.Equal(t, Revoked, s.Summary().Lifecycle)
	require.ErrorIs(t, s.Update(func(tx *Tx) error { return tx.Revoke(4, 0) }), ErrRevokeNotAdvancing)
	require.NoError(t, s.Close())

	fileBefore := readFile(t, cfg)
	_, err = Open(cfg)
	require.ErrorIs(t, err, ErrExitNow)
	require.Equal(t, fileBefore, readFile(t, cfg), "an exit-now open writes nothing")
}

// Scenario 22 (state part): the pong summary is readable while a writer
// holds the store lock across its fsync, and reports storage pressure.
func TestPRP22_SummaryDoesNotWaitForWriter(t *testing.T) {
	s, _ := newStore(t)
	enqueue(t, s, p1("runner.connected"))
	s.mu.Lock() // as an Update does across its fsync
	done := make(chan Summary, 1)
	go func() { done <- s.Summary() }()
	select {
	case sum := <-done:
		require.Equal(t, uint64(1), sum.HighestSourceSeq)
		require.Equal(t, Connecting, sum.Lifecycle)
		require.Positive(t, sum.OutboxBytes)
		require.False(t, sum.StoragePressure)
	case <-time.After(10 * time.Second):
		t.Fatal("Summary blocked on the write lock")
	}
	s.mu.Unlock()
}

func TestClosedStoreRefusesWork(t *testing.T) {
	s, _ := newStore(t)
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Update(func(*Tx) error { return nil }), errClosed)
	_, err := s.ApplyAck(0, 2)
	require.ErrorIs(t, err, errClosed)
	require.NoError(t, s.Close())
}

func TestLifecycleDiagnosticsAndRecoverableFailure(t *testing.T) {
	s, cfg := newStore(t)
	require.NoError(t, s.Update(func(tx *Tx) error {
		for i := range maxDiagnostics + 5 {
			tx.recordDiagnostic("diag " + string(rune('a'+i%26)) + " token sk-abcdefghijklmnopqrstuv")
		}
		tx.SetRecoverableFailure("transport_reconnect_grace_exceeded")
		if err := tx.SetLifecycle("bogus"); err == nil {
			t.Error("unknown lifecycle accepted")
		}
		return tx.SetLifecycle(RecoverableFailure)
	}))
	snap := s.Snapshot()
	require.Len(t, snap.Diagnostics, maxDiagnostics)
	require.NotContains(t, string(readFile(t, cfg)), "sk-abcdefghijklmnopqrstuv")
	require.Equal(t, "transport_reconnect_grace_exceeded", *snap.RecoverableFailure)
	require.Equal(t, RecoverableFailure, s.Summary().Lifecycle)
}

// Logs carry lifecycle facts, never payloads or secrets.
func TestLogsNeverCarryPayloads(t *testing.T) {
	var buf bytes.Buffer
	cfg := testConfig(t.TempDir() + "/state")
	cfg.MaxOutboxBytes, cfg.P0ReserveBytes = 4096, 1024
	cfg.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := openStore(t, cfg)
	secret := "super-secret-payload-" + strings.Repeat("s", 900)
	var err error
	for err == nil {
		err = s.Update(func(tx *Tx) error {
			_, e := tx.Enqueue(Event{Type: "item.delta", Priority: P1, Payload: obj(t, map[string]string{"text": secret})})
			return e
		})
	}
	require.ErrorIs(t, err, ErrBackpressure)
	require.NoError(t, s.Close())
	openStore(t, cfg)
	require.Contains(t, buf.String(), "outbox bound reached")
	require.Contains(t, buf.String(), "recovered runner state")
	require.NotContains(t, buf.String(), "super-secret-payload")
}
