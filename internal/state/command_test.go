package state

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

func begin(t *testing.T, s *Store, c *prp.Command) (Admission, error) {
	t.Helper()
	var adm Admission
	err := s.Update(func(tx *Tx) error {
		var err error
		adm, err = tx.BeginCommand(c)
		return err
	})
	return adm, err
}

func finish(t *testing.T, s *Store, id string, result string) CommandResult {
	t.Helper()
	var r CommandResult
	require.NoError(t, s.Update(func(tx *Tx) error {
		var err error
		r, err = tx.FinishCommand(id, StatusCompleted, json.RawMessage(result))
		return err
	}))
	return r
}

// Scenario 12: duplicate command id with the same fingerprint → the
// recorded result, no effect; same id with different bytes → fail closed.
func TestPRP12_DuplicateCommandReplaysOrFailsClosed(t *testing.T) {
	s, _ := newStore(t)
	c := command(1, "command_prp_00000001", "session.open", `{"reuse":"same_session"}`)
	adm, err := begin(t, s, c)
	require.NoError(t, err)
	require.Equal(t, Execute, adm.Disposition)
	effects := 1
	want := finish(t, s, c.CommandID, `{"threadId":"thread_1"}`)

	// The identical command again (even with other key order/whitespace).
	same, err := prp.DecodeCommand([]byte(`{ "payload":{"reuse":"same_session"},"type":"session.open","controllerSeq":1,
		"commandId":"command_prp_00000001","issuedAt":"2026-11-30T12:00:00.000Z","schema":"paperclip.prp.command.v1"}`))
	require.NoError(t, err)
	adm, err = begin(t, s, same)
	require.NoError(t, err)
	require.Equal(t, Replay, adm.Disposition)
	require.Equal(t, want, adm.Result)
	require.Equal(t, 1, effects, "a replay runs no effect")

	before := s.Snapshot()
	conflict := command(1, "command_prp_00000001", "session.open", `{"reuse":"other"}`)
	_, err = begin(t, s, conflict)
	require.ErrorIs(t, err, ErrCommandReplayConflict)
	require.Equal(t, before, s.Snapshot(), "a conflicting duplicate changes nothing")
}

// Scenario 13: a non-contiguous controllerSeq is fatal; a seq at or below
// the compacted cursor is rejected with command_history_compacted.
func TestPRP13_NonContiguousIsFatalAndCompactedIsRejected(t *testing.T) {
	s, cfg := newStore(t)
	_, err := begin(t, s, command(2, "command_prp_00000002", "run.prepare", `{}`))
	require.ErrorIs(t, err, ErrNonContiguousCommand)
	require.Equal(t, uint64(0), s.Snapshot().LastControllerCommandSeq, "state kept")

	// Fill the journal past its exact bound so the oldest entries compact.
	total := maxRecentCommands + 3
	require.NoError(t, s.Update(func(tx *Tx) error {
		for i := 1; i <= total; i++ {
			c := command(uint64(i), fmt.Sprintf("command_prp_%08d", i), "session.snapshot", `{}`)
			if _, err := tx.BeginCommand(c); err != nil {
				return err
			}
			if _, err := tx.FinishCommand(c.CommandID, StatusCompleted, nil); err != nil {
				return err
			}
		}
		return nil
	}))
	snap := s.Snapshot()
	require.Len(t, snap.ProcessedCommands, maxRecentCommands)
	require.Equal(t, uint64(3), snap.CompactedThroughControllerSeq)

	adm, err := begin(t, s, command(2, "command_prp_00000002", "session.snapshot", `{}`))
	require.NoError(t, err)
	require.Equal(t, Reject, adm.Disposition)
	require.Equal(t, StatusRejected, adm.Result.Status)
	require.JSONEq(t, `"command_history_compacted"`, string(field(t, adm.Result.Result, "code")))

	_, err = begin(t, s, command(uint64(total+2), "command_prp_x", "session.snapshot", `{}`))
	require.ErrorIs(t, err, ErrNonContiguousCommand)

	// An evicted id reused with a fresh seq is caught by the Bloom filter:
	// rejected without effect (never executed twice), journaled, and the
	// next seq continues.
	adm, err = begin(t, s, command(uint64(total+1), "command_prp_00000001", "session.snapshot", `{}`))
	require.NoError(t, err)
	require.Equal(t, Reject, adm.Disposition)
	adm, err = begin(t, s, command(uint64(total+2), "command_prp_fresh", "session.snapshot", `{}`))
	require.NoError(t, err)
	require.Equal(t, Execute, adm.Disposition)

	// The filter and cursors survive a restart.
	require.NoError(t, s.Close())
	s2 := openStore(t, cfg)
	adm, err = begin(t, s2, command(uint64(total+3), "command_prp_00000002", "session.snapshot", `{}`))
	require.NoError(t, err)
	require.Equal(t, Reject, adm.Disposition)
}

// Scenario 14: a crash between journal and effect → after restart the
// command reports failed with execution_indeterminate and is never re-run.
func TestPRP14_CrashBetweenJournalAndEffectIsIndeterminate(t *testing.T) {
	s, cfg := newStore(t)
	c := command(1, "command_prp_00000001", "turn.start", `{"text":"hi"}`)
	adm, err := begin(t, s, c)
	require.NoError(t, err)
	require.Equal(t, Execute, adm.Disposition)

	// The pending marker is on disk before the effect may start.
	var onDisk State
	require.NoError(t, json.Unmarshal(readFile(t, cfg), &onDisk))
	require.Equal(t, StatusPending, onDisk.ProcessedCommands[c.CommandID].Status)
	require.JSONEq(t, `"execution_indeterminate"`, string(field(t, onDisk.ProcessedCommands[c.CommandID].Result, "code")))

	// Crash: the store is dropped without finishing the command.
	require.NoError(t, s.Close())
	s2 := openStore(t, cfg)
	rec := s2.Recovery()
	require.True(t, rec.Resumed)
	require.Len(t, rec.Indeterminate, 1)
	require.Equal(t, StatusIndeterminate, rec.Indeterminate[0].Status)

	adm, err = begin(t, s2, c)
	require.NoError(t, err)
	require.Equal(t, Replay, adm.Disposition, "never re-run")
	wire := adm.Result.Wire()
	require.Equal(t, StatusFailed, wire.Status)
	require.JSONEq(t, `"execution_indeterminate"`, string(field(t, wire.Result, "code")))

	require.NoError(t, s2.Update(func(tx *Tx) error {
		_, err := tx.FinishCommand(c.CommandID, StatusCompleted, nil)
		require.ErrorIs(t, err, errCommandNotPending, "an indeterminate command cannot complete later")
		return nil
	}))
}

func TestCommandResultIsSanitisedAndBounded(t *testing.T) {
	s, _ := newStore(t)
	c := command(1, "command_prp_00000001", "session.open", `{}`)
	_, err := begin(t, s, c)
	require.NoError(t, err)
	require.NoError(t, s.Update(func(tx *Tx) error {
		_, err := tx.FinishCommand(c.CommandID, StatusCompleted, obj(t, map[string]string{"blob": strings.Repeat("y", maxCommandResultBytes)}))
		require.ErrorIs(t, err, errCommandResultTooLarge)
		_, err = tx.FinishCommand(c.CommandID, StatusCompleted, json.RawMessage(`"not an object"`))
		require.Error(t, err)
		r, err := tx.FinishCommand(c.CommandID, StatusCompleted, json.RawMessage(`{"apiKey":"abc123","note":"Bearer abcdefghijklmnop"}`))
		require.NoError(t, err)
		require.JSONEq(t, `{"apiKey":"[REDACTED]","note":"[REDACTED]"}`, string(r.Result))
		return nil
	}))
	require.NotContains(t, string(must(os.ReadFile(filepath.Join(s.cfg.Dir, FileName)))), "abc123")
}

func TestFailCommandRecordsExecutionFailed(t *testing.T) {
	s, _ := newStore(t)
	c := command(1, "command_prp_00000001", "session.open", `{}`)
	_, err := begin(t, s, c)
	require.NoError(t, err)
	require.NoError(t, s.Update(func(tx *Tx) error {
		r, err := tx.failCommand(c.CommandID, "agent failed with token ghp_abcdefghijklmnopqrstuvwxyz0123")
		require.NoError(t, err)
		require.Equal(t, StatusFailed, r.Status)
		require.JSONEq(t, `"command_execution_failed"`, string(field(t, r.Result, "code")))
		require.NotContains(t, string(r.Result), "ghp_")
		return nil
	}))
}

func field(t *testing.T, raw json.RawMessage, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m))
	return m[name]
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A command refused without effect is journaled as rejected: the status the
// core saw, replayed unchanged after a restart; only a pending entry can be
// rejected.
func TestRejectCommandRecordsRejected(t *testing.T) {
	s, cfg := newStore(t)
	c := command(1, "command_prp_00000001", "turn.start", `{}`)
	var res CommandResult
	require.NoError(t, s.Update(func(tx *Tx) error {
		if _, err := tx.BeginCommand(c); err != nil {
			return err
		}
		var err error
		res, err = tx.RejectCommand(c.CommandID, "runner_draining", "runner is draining; new turns are refused")
		return err
	}))
	require.Equal(t, StatusRejected, res.Status)
	require.Equal(t, StatusRejected, res.Wire().Status)
	require.JSONEq(t, `{"code":"runner_draining","message":"runner is draining; new turns are refused"}`, string(res.Result))

	require.NoError(t, s.Close())
	s = openStore(t, cfg)
	adm, err := begin(t, s, c)
	require.NoError(t, err)
	require.Equal(t, Replay, adm.Disposition)
	require.Equal(t, res, adm.Result, "the replay is the recorded rejection, byte for byte")

	err = s.Update(func(tx *Tx) error {
		_, err := tx.RejectCommand(c.CommandID, "runner_draining", "again")
		return err
	})
	require.ErrorIs(t, err, errCommandNotPending)
}
