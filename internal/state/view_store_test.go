package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServerViewAtEveryStep: the server's reader of runner-state.json,
// read after every step of a scripted run (events, ACKs, commands and
// their results, a terminal fence, records), finds every §9.2 field equal
// to the store's, the records absent, and the outbox view `[]` exactly
// when nextSourceSeq == ackedSourceSeq + 1, else
// `[{"indexedPending":true}]`.
func TestServerViewAtEveryStep(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	s := openStore(t, cfg)
	check := func(step string) {
		t.Helper()
		b := readProjection(t, cfg)
		var top map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &top), step)
		st, err := Read(cfg.Dir)
		require.NoError(t, err, step)
		want := `[{"indexedPending":true}]`
		if st.NextSourceSeq == st.AckedSourceSeq+1 {
			want = `[]`
		}
		require.Equal(t, want, string(top["outbox"]), step)
		require.Equal(t, st.NextSourceSeq != st.AckedSourceSeq+1, len(st.Outbox) > 0, step)
		for k := range st.Extensions {
			require.NotContains(t, top, k, "%s: records stay in the store", step)
		}
		// Every other field is the store's: the store's state with the
		// view and without records encodes to the same fields.
		st.Outbox, st.Extensions = nil, nil
		full, err := st.MarshalJSON()
		require.NoError(t, err)
		var store map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(full, &store))
		store["outbox"] = json.RawMessage(want)
		require.Len(t, top, len(store), step)
		for k, v := range store {
			var a, b bytes.Buffer
			require.NoError(t, json.Compact(&a, v))
			require.NoError(t, json.Compact(&b, top[k]))
			require.Equal(t, a.String(), b.String(), "%s: field %s", step, k)
		}
	}
	check("open")
	for i := range 3 {
		enqueue(t, s, p1("runner.connected"))
		check(fmt.Sprintf("event %d", i))
	}
	_, err := s.ApplyAck(2, 2)
	require.NoError(t, err)
	require.NoError(t, s.flush())
	check("partial ack")
	for seq := uint64(1); seq <= 2; seq++ {
		id := fmt.Sprintf("command_%d", seq)
		require.NoError(t, s.Update(func(tx *Tx) error {
			_, err := tx.BeginCommand(command(seq, id, "session.snapshot", `{}`))
			return err
		}))
		check("command " + id + " pending")
		require.NoError(t, s.Update(func(tx *Tx) error {
			if _, err := tx.FinishCommand(id, StatusCompleted, json.RawMessage(`{"ok":true}`)); err != nil {
				return err
			}
			return tx.SetRecord("acpAgent", map[string]int{"n": int(seq)})
		}))
		check("command " + id + " completed")
	}
	_, err = s.ApplyAck(s.Summary().HighestSourceSeq, 2)
	require.NoError(t, err)
	require.NoError(t, s.flush())
	check("all acknowledged")
	require.NoError(t, s.Update(func(tx *Tx) error {
		r, ok := tx.RecordedResult("command_2")
		require.True(t, ok)
		return tx.SetTerminalFence(r, Suspended)
	}))
	check("terminal fence")
}
