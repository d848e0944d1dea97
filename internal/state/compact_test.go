package state

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// fillOutbox appends events until the outbox holds 2*compactMinBytes.
func fillOutbox(t *testing.T, s *Store) {
	t.Helper()
	for s.Summary().OutboxBytes < 2*compactMinBytes {
		require.NoError(t, s.Update(func(tx *Tx) error {
			for range fillBatch {
				if _, err := tx.Enqueue(fillEvent); err != nil {
					return err
				}
			}
			return nil
		}))
	}
}

// TestSparseStoreIsCompacted: bbolt never shrinks its file, so a store
// that held a large outbox that was then acknowledged is rewritten
// compact when it is closed, and when it is opened after a crash, with
// nothing lost; a store whose data is live is left as it is.
func TestSparseStoreIsCompacted(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	cfg.MaxOutboxBytes = 16 << 20
	s, err := Open(cfg)
	require.NoError(t, err)
	fillOutbox(t, s)
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(cfg.Dir, DBName))
		require.NoError(t, err)
		return fi.Size()
	}
	require.NoError(t, s.Close())
	full := size()
	require.Greater(t, full, int64(2*compactMinBytes), "live data is not compacted away")

	s, err = Open(cfg)
	require.NoError(t, err)
	require.Equal(t, full, size(), "a store of live data is kept as it is")
	high := s.Summary().HighestSourceSeq
	_, err = s.ApplyAck(high, 2)
	require.NoError(t, err)
	require.NoError(t, s.Update(func(tx *Tx) error { _, err := tx.Enqueue(p1("runner.connected")); return err }))
	require.NoError(t, s.Close())
	require.Less(t, size()*compactRatio, full, "an acknowledged outbox's space is given back")
	requireOnlyStateFile(t, cfg.Dir)

	s = openStore(t, cfg)
	st := s.Snapshot()
	require.Equal(t, high, st.AckedSourceSeq)
	require.Len(t, st.Outbox, 2, "the event after the ACK and the restart's recovery event")
	requireProjected(t, cfg)

	// The same after a crash (no Close): the open compacts.
	fillOutbox(t, s)
	high = s.Summary().HighestSourceSeq
	_, err = s.ApplyAck(high, 2)
	require.NoError(t, err)
	require.NoError(t, s.Update(func(tx *Tx) error { _, err := tx.Enqueue(p1("runner.connected")); return err }))
	s.mu.Lock()
	_ = s.db.Close()
	s.dir.close()
	s.closed = true
	s.mu.Unlock()
	sparse := size()
	s = openStore(t, cfg)
	require.Less(t, size()*compactRatio, sparse, "compacted on open")
	require.Equal(t, high, s.Snapshot().AckedSourceSeq)
	requireProjected(t, cfg)
}
