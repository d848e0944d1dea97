package state

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// A write keeps the file it renamed into place open (so the next rename
// does not free it inline) and releases each replaced file: many writes
// hold at most the directory and one file, and Close returns every one.
func TestWritesHoldOneFileAndCloseReleasesAll(t *testing.T) {
	before := openFDs(t)
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	s, err := Open(cfg)
	require.NoError(t, err)
	for i := range 50 {
		require.NoError(t, s.Update(func(tx *Tx) error { return tx.SetRecord("n", i) }))
	}
	s.dir.releases.Wait()
	require.LessOrEqual(t, openFDs(t), before+2, "directory and current file only")
	require.NoError(t, s.Close())
	require.Equal(t, before, openFDs(t))

	var n int
	require.NoError(t, json.Unmarshal(recordOf(t, cfg, "n"), &n))
	require.Equal(t, 49, n)
	entries, err := os.ReadDir(cfg.Dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temp file is left")
}

func recordOf(t *testing.T, cfg Config, key string) json.RawMessage {
	t.Helper()
	s := openStore(t, cfg)
	var v json.RawMessage
	ok, err := s.Snapshot().Record(key, &v)
	require.NoError(t, err)
	require.True(t, ok)
	return v
}
