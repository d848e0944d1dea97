package state

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// warmAttach admits and completes a run.attach to next at seq and returns
// the command, its recorded result and the receipt the core would build.
func warmAttach(t *testing.T, s *Store, seq uint64, next prp.Identity) (*prp.Command, CommandResult, prp.WarmTransition) {
	t.Helper()
	payload := string(jsonenc.MustMarshal(map[string]any{"paperclipNextAuthority": map[string]any{
		"identity": next, "connection": map[string]any{"mode": "connect", "connectUrl": "ws://127.0.0.1:1/api/runner/v1/connect/" + next.RunID},
	}}))
	cmd := command(seq, "attach_1", prp.CommandRunAttach, payload)
	var res CommandResult
	require.NoError(t, s.Update(func(tx *Tx) error {
		if _, err := tx.BeginCommand(cmd); err != nil {
			return err
		}
		var err error
		res, err = tx.FinishCommand(cmd.CommandID, StatusCompleted, json.RawMessage(`{"attached":true}`))
		return err
	}))
	return cmd, res, receiptFor(t, cmd, res, s.Cursors().AckedSourceSeq)
}

func receiptFor(t *testing.T, cmd *prp.Command, res CommandResult, acked uint64) prp.WarmTransition {
	t.Helper()
	r, err := prp.NewWarmTransition(prp.WarmTransitionInput{
		Old: testIdentity, Command: cmd, Result: jsonenc.MustMarshal(res), OldAckedSourceSeq: int64(acked),
		RunnerVersion: "0.1.0", RunnerDigest: "sha256:" + string(make64('0')),
		Lease: prp.Lease{ID: "connection_lease_1", ExpiresAtUnixMs: 4070908800000},
	})
	require.NoError(t, err)
	return r
}

func make64(c byte) []byte {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return b
}

func nextOf(id prp.Identity) prp.Identity {
	id.RunID, id.TurnID, id.ItemID = id.RunID+"_next", "turn_next", "item_next"
	return id
}

// TestWarmTransitionPhases walks the persisted phases of prp.md §9.5: the
// receipt is refused while the old outbox is unacknowledged; "prepared"
// keeps the old identity under the warm-transition schema; an inexact
// acknowledged receipt is refused; "activating" is a fresh state of the new
// identity (events restart at sourceSeq 1 under the new runId); completing
// it restores the plain schema.
func TestWarmTransitionPhases(t *testing.T) {
	s, cfg := newStore(t)
	enqueue(t, s, p1("item.started"))
	next := nextOf(testIdentity)
	cmd, res, r := warmAttach(t, s, 1, next)

	err := s.Update(func(tx *Tx) error { return tx.PrepareWarmTransition(r, cmd.Raw, res) })
	require.ErrorIs(t, err, ErrWarmTransition, "old outbox not acknowledged")
	_, err = s.ApplyAck(1, 2)
	require.NoError(t, err)
	r = receiptFor(t, cmd, res, 1) // once the outbox is acknowledged, the cursor is 1
	require.EqualValues(t, 1, r.OldAckedSourceSeq)

	require.NoError(t, s.Update(func(tx *Tx) error { return tx.PrepareWarmTransition(r, cmd.Raw, res) }))
	require.NoError(t, s.Update(func(tx *Tx) error { return tx.PrepareWarmTransition(r, cmd.Raw, res) }), "same receipt again is a no-op")
	var file struct {
		Schema         string                `json:"schema"`
		RunID          string                `json:"runId"`
		WarmTransition PendingWarmTransition `json:"warmTransition"`
	}
	require.NoError(t, json.Unmarshal(readFile(t, cfg), &file))
	require.Equal(t, WarmTransitionSchema, file.Schema)
	require.Equal(t, testIdentity.RunID, file.RunID, "prepared keeps the old identity")
	require.Equal(t, WarmPrepared, file.WarmTransition.Phase)
	require.True(t, prp.SameWarmTransition(file.WarmTransition.Receipt.Marshal(), r))

	other := r
	other.LeaseExpiresAtUnixMs++
	require.ErrorIs(t, s.Update(func(tx *Tx) error { return tx.PrepareWarmTransition(other, cmd.Raw, res) }), ErrWarmTransition)
	require.ErrorIs(t, s.Update(func(tx *Tx) error { return tx.ActivateWarmTransition(other.Marshal()) }), ErrWarmTransition,
		"an inexact receipt in command_result_ack")
	require.ErrorIs(t, s.Update(func(tx *Tx) error { return tx.CompleteWarmTransition(r.TransitionID) }), ErrWarmTransition,
		"not activating yet")

	require.NoError(t, s.Update(func(tx *Tx) error { return tx.ActivateWarmTransition(r.Marshal()) }))
	require.NoError(t, json.Unmarshal(readFile(t, cfg), &file))
	require.Equal(t, WarmTransitionSchema, file.Schema)
	require.Equal(t, next.RunID, file.RunID)
	require.Equal(t, WarmActivating, file.WarmTransition.Phase)
	snap := s.Snapshot()
	require.Equal(t, next, snap.identity())
	require.EqualValues(t, 1, snap.NextSourceSeq)
	require.Zero(t, snap.AckedSourceSeq)
	require.Zero(t, snap.LastControllerCommandSeq)
	require.Empty(t, snap.ProcessedCommands)

	seq := enqueue(t, s, p1("item.started"))
	require.EqualValues(t, 1, seq, "the new identity's events start at 1")
	var env struct {
		RunID string `json:"runId"`
	}
	require.NoError(t, json.Unmarshal(s.Unacked()[0].Envelope, &env))
	require.Equal(t, next.RunID, env.RunID)

	require.ErrorIs(t, s.Update(func(tx *Tx) error { return tx.CompleteWarmTransition("other") }), ErrWarmTransition)
	require.NoError(t, s.Update(func(tx *Tx) error { return tx.CompleteWarmTransition(r.TransitionID) }))
	require.NoError(t, json.Unmarshal(readFile(t, cfg), &file))
	require.Equal(t, schema, file.Schema)
	w, err := s.pendingWarm()
	require.NoError(t, err)
	require.Nil(t, w)
}

// TestWarmTransitionIdentityRules: runnerInstanceId, environmentLeaseId and
// normalizedSessionId are immutable and runId must change; a receipt that
// breaks a rule is refused by the state even when its digest is consistent.
func TestWarmTransitionIdentityRules(t *testing.T) {
	s, _ := newStore(t)
	next := nextOf(testIdentity)
	cmd, res, r := warmAttach(t, s, 1, next)
	for name, mod := range map[string]func(*prp.Identity){
		"runnerInstanceId":    func(id *prp.Identity) { id.RunnerInstanceID += "x" },
		"environmentLeaseId":  func(id *prp.Identity) { id.EnvironmentLeaseID += "x" },
		"normalizedSessionId": func(id *prp.Identity) { id.NormalizedSessionID += "x" },
		"same runId":          func(id *prp.Identity) { id.RunID = testIdentity.RunID },
	} {
		t.Run(name, func(t *testing.T) {
			bad := r
			mod(&bad.NewIdentity)
			require.ErrorIs(t, prp.CheckWarmIdentity(testIdentity, bad.NewIdentity), prp.ErrWarmTransition)
			err := s.Update(func(tx *Tx) error { return tx.PrepareWarmTransition(bad, cmd.Raw, res) })
			require.ErrorIs(t, err, ErrWarmTransition)
		})
	}
	tampered := r
	tampered.ControllerSeq++ // consistent fields, stale transitionId
	err := s.Update(func(tx *Tx) error { return tx.PrepareWarmTransition(tampered, cmd.Raw, res) })
	require.ErrorIs(t, err, ErrWarmTransition)
	require.NoError(t, s.Update(func(tx *Tx) error { return tx.PrepareWarmTransition(r, cmd.Raw, res) }))
}

// TestWarmTransitionRecovery is the state half of the warm crash table:
// a process killed inside a rotation is relaunched under the identity the
// core knows, and the state settles to exactly that one. "prepared" as the
// old identity: the attach is execution_indeterminate and the old cursors
// stay; "prepared" as the new identity (the core acknowledged the
// receipt): the state rolls forward to a fresh new identity; "activating"
// as the new identity: the transition is cleared; "activating" as the old
// identity is refused (identity differs) and the file is kept.
func TestWarmTransitionRecovery(t *testing.T) {
	next := nextOf(testIdentity)
	prepared := func(t *testing.T) (Config, prp.WarmTransition, *Store) {
		s, cfg := newStore(t)
		enqueue(t, s, p1("item.started"))
		_, err := s.ApplyAck(1, 2)
		require.NoError(t, err)
		cmd, res, _ := warmAttach(t, s, 1, next)
		r := receiptFor(t, cmd, res, 1)
		require.NoError(t, s.Update(func(tx *Tx) error { return tx.PrepareWarmTransition(r, cmd.Raw, res) }))
		return cfg, r, s
	}
	reopen := func(t *testing.T, s *Store, cfg Config, as prp.Identity) (*Store, error) {
		require.NoError(t, s.Close())
		cfg.Identity = as
		return Open(cfg)
	}
	t.Run("prepared as old", func(t *testing.T) {
		cfg, r, s := prepared(t)
		s2, err := reopen(t, s, cfg, testIdentity)
		require.NoError(t, err)
		defer s2.Close()
		snap := s2.Snapshot()
		require.Equal(t, schema, snap.Schema)
		require.Equal(t, testIdentity, snap.identity())
		res, ok := snap.ProcessedCommands[r.CommandID]
		require.True(t, ok)
		require.Equal(t, StatusIndeterminate, res.Status)
		require.Contains(t, string(res.Result), CodeExecutionIndeterminate)
		require.EqualValues(t, 2, snap.HighestSourceSeq(), "the old sequence goes on (runner.reconciled is 2)")
		w, err := s2.pendingWarm()
		require.NoError(t, err)
		require.Nil(t, w)
	})
	t.Run("prepared as new", func(t *testing.T) {
		cfg, _, s := prepared(t)
		s2, err := reopen(t, s, cfg, next)
		require.NoError(t, err)
		defer s2.Close()
		snap := s2.Snapshot()
		require.Equal(t, schema, snap.Schema)
		require.Equal(t, next, snap.identity())
		require.Empty(t, snap.ProcessedCommands)
		require.EqualValues(t, 1, snap.HighestSourceSeq(), "the new identity's first event is runner.reconciled")
	})
	t.Run("activating as new", func(t *testing.T) {
		cfg, r, s := prepared(t)
		require.NoError(t, s.Update(func(tx *Tx) error { return tx.ActivateWarmTransition(r.Marshal()) }))
		s2, err := reopen(t, s, cfg, next)
		require.NoError(t, err)
		defer s2.Close()
		snap := s2.Snapshot()
		require.Equal(t, schema, snap.Schema)
		require.Equal(t, next, snap.identity())
		require.EqualValues(t, 1, snap.HighestSourceSeq())
	})
	t.Run("activating as old", func(t *testing.T) {
		cfg, r, s := prepared(t)
		require.NoError(t, s.Update(func(tx *Tx) error { return tx.ActivateWarmTransition(r.Marshal()) }))
		before := readFile(t, cfg)
		_, err := reopen(t, s, cfg, testIdentity)
		require.ErrorIs(t, err, errStateBinding)
		require.Equal(t, before, readFile(t, cfg), "the file is kept")
	})
}
