package state

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// faultN makes the first n calls of op fail with errno; it counts every call of op.
func faultN(op string, n int64, errno error, calls *atomic.Int64) func(string) error {
	return func(got string) error {
		if got != op {
			return nil
		}
		if calls.Add(1) <= n {
			return errno
		}
		return nil
	}
}

// TestStateWriteRetriesTransientErrors: a state write that meets a
// transient error (EMFILE, ENFILE, EINTR, EAGAIN: "openat state temp file: too many
// open files" must not kill runnerd) is retried
// within writeAttempts and succeeds: the store stays usable, the state is
// durable, no temp file is left.
func TestStateWriteRetriesTransientErrors(t *testing.T) {
	for _, errno := range []unix.Errno{unix.EMFILE, unix.ENFILE, unix.EINTR, unix.EAGAIN} {
		for _, op := range []string{"openat", "write", "fdatasync"} {
			t.Run(op+"_"+unix.ErrnoName(errno), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					cfg := testConfig(filepath.Join(t.TempDir(), "state"))
					s, err := Open(cfg)
					require.NoError(t, err)
					var calls atomic.Int64
					s.dir.fault = faultN(op, writeAttempts-1, errno, &calls)
					require.NoError(t, s.Update(func(tx *Tx) error { return tx.SetRecord("n", 1) }))
					require.EqualValues(t, writeAttempts, calls.Load(), "one attempt per failure, then success")
					require.NoError(t, s.Update(func(tx *Tx) error { return tx.SetRecord("n", 2) }), "not poisoned")
					require.NoError(t, s.Close())
					requireOnlyStateFile(t, cfg.Dir)
					var n int
					require.NoError(t, json.Unmarshal(recordOf(t, cfg, "n"), &n))
					require.Equal(t, 2, n)
				})
			})
		}
	}
}

// TestStateWriteGivesUpAfterBoundedRetries: a transient error that does not
// clear poisons the store after exactly writeAttempts attempts, and the
// state file keeps its previous contents.
func TestStateWriteGivesUpAfterBoundedRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(filepath.Join(t.TempDir(), "state"))
		s, err := Open(cfg)
		require.NoError(t, err)
		require.NoError(t, s.Update(func(tx *Tx) error { return tx.SetRecord("n", 1) }))
		// Reopened, the store holds no descriptor of a spare, so its next
		// write opens one by name (a steady store reuses its descriptors).
		require.NoError(t, s.Close())
		s, err = Open(cfg)
		require.NoError(t, err)
		before := readStateFile(t, cfg.Dir)
		var calls atomic.Int64
		s.dir.fault = faultN("openat", 1<<30, unix.EMFILE, &calls)
		err = s.Update(func(tx *Tx) error { return tx.SetRecord("n", 2) })
		require.ErrorIs(t, err, unix.EMFILE)
		require.EqualValues(t, writeAttempts, calls.Load())
		require.ErrorIs(t, s.Update(func(tx *Tx) error { return nil }), unix.EMFILE, "poisoned")
		require.Equal(t, before, readStateFile(t, cfg.Dir))
		require.ErrorIs(t, s.Close(), unix.EMFILE, "Close reports the poison")
		requireOnlyStateFile(t, cfg.Dir)
	})
}

// TestStateWriteENOSPCIsFatalAndKeepsFile: ENOSPC is not retried: one
// attempt, the store poisons itself, the previous state file is intact and
// the temp file is gone.
func TestStateWriteENOSPCIsFatalAndKeepsFile(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	s, err := Open(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Update(func(tx *Tx) error { return tx.SetRecord("n", 1) }))
	before := readStateFile(t, cfg.Dir)
	var calls atomic.Int64
	s.dir.fault = faultN("write", 1<<30, unix.ENOSPC, &calls)
	err = s.Update(func(tx *Tx) error { return tx.SetRecord("n", 2) })
	require.ErrorIs(t, err, unix.ENOSPC)
	require.EqualValues(t, 1, calls.Load(), "not retried")
	require.ErrorIs(t, s.Update(func(tx *Tx) error { return nil }), unix.ENOSPC, "poisoned")
	require.Equal(t, before, readStateFile(t, cfg.Dir))
	require.ErrorIs(t, s.Close(), unix.ENOSPC, "Close reports the poison")
	requireOnlyStateFile(t, cfg.Dir)
}

func readStateFile(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	require.NoError(t, err)
	return b
}

func requireOnlyStateFile(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temp file is left")
	require.Equal(t, FileName, entries[0].Name())
}
