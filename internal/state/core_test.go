package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// fakeCore admits events as the reference core does (prp.md §8.4): a new
// event must be acked+1; a duplicate must canonically equal the committed
// one (else source_event_replay_conflict).
type fakeCore struct {
	acked     uint64
	committed map[uint64][]byte
}

func (c *fakeCore) admit(t *testing.T, wire []byte) {
	t.Helper()
	var env struct {
		Payload struct {
			SourceSeq        uint64 `json:"sourceSeq"`
			SourceInstanceID string `json:"sourceInstanceId"`
		} `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(wire, &env))
	require.Equal(t, "runner_1", env.Payload.SourceInstanceID)
	canon, err := prp.Canonical(json.RawMessage(wire))
	require.NoError(t, err)
	seq := env.Payload.SourceSeq
	if prev, ok := c.committed[seq]; ok {
		require.True(t, bytes.Equal(prev, canon), "source_event_replay_conflict at seq %d", seq)
		return
	}
	require.Equal(t, c.acked+1, seq, "core closes on sourceSeq != acked+1")
	c.committed[seq] = canon
	c.acked = seq
}

// Scenario 26 (runner side): across sends, reconnects, crashes, ACKs and P2
// coalescing, everything runnerd sends passes the core's admission: new
// events are contiguous, and every replay equals the committed event.
func TestPRP26_OutboxAlwaysPassesCoreAdmission(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 26))
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	cfg.MaxOutboxBytes = 1 << 20
	cfg.P0ReserveBytes = 64 << 10
	s, err := Open(cfg)
	require.NoError(t, err)
	core := &fakeCore{committed: map[uint64][]byte{}}
	var sent uint64 // this connection's send cursor

	for step := range 400 {
		switch r := rng.IntN(100); {
		case r < 45: // provider output, mostly coalescable deltas
			ev := Event{Type: "item.delta", Priority: P2, CoalesceKey: fmt.Sprint(rng.IntN(2)),
				Payload: json.RawMessage(fmt.Sprintf(`{"delta":"%d"}`, step))}
			if rng.IntN(4) == 0 {
				ev = Event{Type: "item.completed", Priority: P1, Payload: json.RawMessage(`{}`)}
			}
			require.NoError(t, s.Update(func(tx *Tx) error { _, err := tx.Enqueue(ev); return err }))
		case r < 75: // send what is unsent on this connection
			for _, e := range s.Unsent(sent) {
				w, err := e.Wire(2)
				require.NoError(t, err)
				core.admit(t, w)
				sent = e.SourceSeq
			}
		case r < 88: // the core ACKs what it committed
			if core.acked > s.Summary().AckedSourceSeq {
				_, err := s.ApplyAck(core.acked, 2)
				require.NoError(t, err)
			}
		case r < 95: // socket drop: replay from the cursor
			sent = s.Summary().AckedSourceSeq
		default: // crash without flushing, then restart
			s.mu.Lock()
			_ = s.db.Close()
			s.dir.close()
			s.closed = true
			s.mu.Unlock()
			s, err = Open(cfg)
			require.NoError(t, err)
			sent = s.Summary().AckedSourceSeq
			if rng.IntN(2) == 0 { // the welcome's cursor; else replay first
				_, err = s.ApplyAck(core.acked, 2)
				require.NoError(t, err)
			}
		}
	}
	require.NoError(t, s.Close())
	require.Positive(t, len(core.committed))
}

// One Update is one durable write, however much it groups (§8.5: events,
// cursor and consumed-sequence marker together).
func TestUpdateIsOneDurableWrite(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	cfg.MaxOutboxBytes = 1 << 20
	s := openStore(t, cfg)
	before := s.writes.Load()
	require.NoError(t, s.Update(func(tx *Tx) error {
		for i := range 128 {
			if _, _, err := tx.enqueueExecutor(fmt.Sprint("acp:", i), p1("item.delta")); err != nil {
				return err
			}
		}
		if err := tx.ApplyAck(10, 2); err != nil {
			return err
		}
		return tx.SetRecord("acpSessions", map[string]int{"consumedEventSeq": 41})
	}))
	require.Equal(t, before+1, s.writes.Load())

	// A failed step writes nothing and keeps nothing.
	err := s.Update(func(tx *Tx) error {
		if _, err := tx.Enqueue(p1("item.delta")); err != nil {
			return err
		}
		return fmt.Errorf("consume event file: parse failed")
	})
	require.Error(t, err)
	require.Equal(t, before+1, s.writes.Load())
	require.Equal(t, uint64(128), s.Summary().HighestSourceSeq)
}

// Scenario 17 (state part): 131 retained failure events, more than one
// 128-event batch, are all durable before the failed command result is
// recorded; the result carries command_execution_failed.
func TestPRP17_FailureEvidenceIsDurableBeforeFailedResult(t *testing.T) {
	const retained, batch = 131, 128 // scenario figure; executor batch bound (prp.md §8.5)
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	cfg.MaxOutboxBytes = 1 << 20
	s := openStore(t, cfg)
	c := command(1, "command_prp_00000001", "session.open", `{}`)
	_, err := begin(t, s, c)
	require.NoError(t, err)
	for start := 0; start < retained; start += batch {
		require.NoError(t, s.Update(func(tx *Tx) error {
			for i := start; i < min(start+batch, retained); i++ {
				if _, _, err := tx.enqueueExecutor(fmt.Sprint("startup-failure:", i),
					Event{Type: "harness.diagnostic", Priority: P0, Payload: json.RawMessage(fmt.Sprintf(`{"line":%d}`, i))}); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	require.NoError(t, s.Update(func(tx *Tx) error {
		require.Equal(t, uint64(retained), tx.HighestSourceSeq(), "all evidence committed first")
		_, err := tx.failCommand(c.CommandID, "agent startup failed")
		return err
	}))
	require.NoError(t, s.Close())
	s = openStore(t, cfg)
	snap := s.Snapshot()
	require.Equal(t, StatusFailed, snap.ProcessedCommands[c.CommandID].Status)
	require.Len(t, snap.Outbox, retained+1) // + runner.reconciled
}
