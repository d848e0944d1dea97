package state

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNarrowAccessors: each accessor returns what Snapshot shows, as a copy
// the caller may change without touching the committed state.
func TestNarrowAccessors(t *testing.T) {
	s, _ := newStore(t)
	require.Nil(t, s.PendingTerminalDelivery())
	_, ok := s.LastConnectionProtocolVersion()
	require.False(t, ok)
	_, ok = s.Result("cmd_1")
	require.False(t, ok)
	found, err := s.Record("note", new(string))
	require.NoError(t, err)
	require.False(t, found)

	require.NoError(t, s.Update(func(tx *Tx) error {
		if err := tx.SetProtocolVersion(2); err != nil {
			return err
		}
		if err := tx.SetRecord("note", "hello"); err != nil {
			return err
		}
		if _, err := tx.BeginCommand(command(1, "cmd_1", "runner.shutdown", `{}`)); err != nil {
			return err
		}
		res, err := tx.FinishCommand("cmd_1", StatusCompleted, json.RawMessage(`{"lifecycle":"stopped"}`))
		if err != nil {
			return err
		}
		return tx.SetTerminalFence(res, Stopped)
	}))
	snap := s.Snapshot()

	f := s.PendingTerminalDelivery()
	require.Equal(t, snap.PendingTerminalDelivery, f)
	f.CommandID = "changed"
	require.Equal(t, "cmd_1", s.PendingTerminalDelivery().CommandID)

	res, ok := s.Result("cmd_1")
	require.True(t, ok)
	require.Equal(t, snap.ProcessedCommands["cmd_1"], res)
	res.Result[0] = 'X'
	again, _ := s.Result("cmd_1")
	require.JSONEq(t, `{"lifecycle":"stopped"}`, string(again.Result))

	v, ok := s.LastConnectionProtocolVersion()
	require.True(t, ok)
	require.Equal(t, *snap.LastConnectionProtocolVersion, v)

	require.Equal(t, Cursors{LastControllerCommandSeq: snap.LastControllerCommandSeq, NextSourceSeq: snap.NextSourceSeq,
		AckedSourceSeq: snap.AckedSourceSeq}, s.Cursors())

	var note string
	found, err = s.Record("note", &note)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "hello", note)
}
