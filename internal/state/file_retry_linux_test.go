package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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
					require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, 1) }))
					require.EqualValues(t, writeAttempts, calls.Load(), "one attempt per failure, then success")
					require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, 2) }), "not poisoned")
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
		require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, 1) }))
		// Reopened, the store holds no descriptor of a spare, so its next
		// write opens one by name (a steady store reuses its descriptors).
		require.NoError(t, s.Close())
		s, err = Open(cfg)
		require.NoError(t, err)
		before := readStateFile(t, cfg.Dir)
		var calls atomic.Int64
		s.dir.fault = faultN("openat", 1<<30, unix.EMFILE, &calls)
		err = s.Update(func(tx *Tx) error { return setN(tx, 2) })
		require.ErrorIs(t, err, unix.EMFILE)
		require.EqualValues(t, writeAttempts, calls.Load())
		require.ErrorIs(t, s.Update(func(tx *Tx) error { return nil }), unix.EMFILE, "poisoned")
		require.Equal(t, before, readStateFile(t, cfg.Dir))
		require.ErrorIs(t, s.Close(), unix.EMFILE, "Close reports the poison")
		requireOnlyStateFile(t, cfg.Dir)
	})
}

// opLog records every faultable step of the writes, failing the first n
// calls of op with errno.
type opLog struct {
	mu    sync.Mutex // guards ops and fails
	ops   []string
	fails int
}

func (l *opLog) fault(op string, n int, errno error) func(string) error {
	return func(got string) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.ops = append(l.ops, got)
		if got == op && l.fails < n {
			l.fails++
			return errno
		}
		return nil
	}
}

func (l *opLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops)
}

// TestDurability28_FullDiskAtEachStepRedoesWholeWrite (durability.md §11
// scenario 28, §6.2 item 1): ENOSPC or EDQUOT at the temp file's write,
// its data sync, the rename or the directory sync (of a step that changes
// the lifecycle, which syncs the directory) blocks the write instead
// of poisoning the store: the summary reports storage pressure (never the
// outbox's backpressure), nothing is published, each retry redoes the
// whole write in a new temp file (every sync follows a write of the same
// attempt: no lone fsync), and once space returns the write completes and
// leaves one parseable state file.
func TestDurability28_FullDiskAtEachStepRedoesWholeWrite(t *testing.T) {
	const failures = 3
	for _, errno := range []unix.Errno{unix.ENOSPC, unix.EDQUOT} {
		for _, op := range []string{"store commit", "write", "fdatasync", "rename", "fsync dir"} {
			t.Run(strings.ReplaceAll(op, " ", "_")+"_"+unix.ErrnoName(errno), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					cfg := testConfig(filepath.Join(t.TempDir(), "state"))
					s, err := Open(cfg)
					require.NoError(t, err)
					require.NoError(t, s.Update(func(tx *Tx) error { return setNVisibly(tx, 1, Ready) }))
					var log opLog
					s.dir.fault = log.fault(op, failures, errno)
					done := make(chan error, 1)
					go func() { done <- s.Update(func(tx *Tx) error { return setNVisibly(tx, 2, Connecting) }) }()
					synctest.Wait()
					select {
					case err := <-done:
						t.Fatalf("the write returned under pressure: %v", err)
					default:
					}
					sum := s.Summary()
					require.True(t, sum.StoragePressure)
					require.True(t, sum.DiskFull)
					require.NotEqual(t, Backpressure, sum.Lifecycle, "a full disk is not the outbox bound")
					ok, err := s.Record("n", new(int))
					require.NoError(t, err)
					require.True(t, ok)
					var n int
					_, _ = s.Record("n", &n)
					require.Equal(t, 1, n, "nothing is published before it is durable")

					require.NoError(t, <-done, "the write completes once space returns")
					require.False(t, s.Summary().StoragePressure)
					_, _ = s.Record("n", &n)
					require.Equal(t, 2, n)

					// A failed store transaction is rerun whole, once per
					// attempt. Every attempt of the projection after the
					// first starts in a new temp file and syncs only what it
					// wrote itself.
					ops := log.snapshot()
					if op == "store commit" {
						require.Equal(t, failures+1, count(ops, "store commit"), "one transaction per attempt: %v", ops)
						require.NoError(t, s.Close())
						requireOnlyStateFile(t, cfg.Dir)
						return
					}
					require.Equal(t, 1, count(ops, "store commit"), "the store committed once: %v", ops)
					ops = slices.DeleteFunc(ops, func(o string) bool { return o == "store commit" })
					require.Equal(t, failures, count(ops, "openat"), "one new temp file per retry: %v", ops)
					attempt := []string{}
					for _, o := range append(ops, "openat") {
						if o == "openat" && len(attempt) > 0 {
							require.Equal(t, "write", attempt[0], "an attempt starts with a write: %v", ops)
							attempt = attempt[:0]
						}
						if o != "openat" {
							attempt = append(attempt, o)
						}
					}
					require.NoError(t, s.Close())
					requireOnlyStateFile(t, cfg.Dir)
					require.NoError(t, json.Unmarshal(recordOf(t, cfg, "n"), &n))
					require.Equal(t, 2, n)
				})
			})
		}
	}
}

func count(ops []string, op string) int {
	n := 0
	for _, o := range ops {
		if o == op {
			n++
		}
	}
	return n
}

// TestFullDiskWaitIsAborted: Abort ends a write's wait for space: the write
// fails with ErrWriteAborted and the cause, the state file keeps the
// previous contents, and later writes fail at once.
func TestFullDiskWaitIsAborted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(filepath.Join(t.TempDir(), "state"))
		s, err := Open(cfg)
		require.NoError(t, err)
		require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, 1) }))
		before := readStateFile(t, cfg.Dir)
		var calls atomic.Int64
		s.dir.fault = faultN("write", 1<<30, unix.ENOSPC, &calls)
		done := make(chan error, 1)
		go func() { done <- s.Update(func(tx *Tx) error { return setN(tx, 2) }) }()
		synctest.Wait()
		require.True(t, s.Summary().StoragePressure)
		cause := errors.New("revoked")
		s.Abort(cause)
		err = <-done
		require.ErrorIs(t, err, ErrWriteAborted)
		require.ErrorIs(t, err, cause)
		require.ErrorIs(t, err, unix.ENOSPC)
		require.False(t, s.Summary().StoragePressure)
		require.ErrorIs(t, s.Update(func(tx *Tx) error { return nil }), ErrWriteAborted, "poisoned")
		require.Equal(t, before, readStateFile(t, cfg.Dir))
		require.ErrorIs(t, s.Close(), ErrWriteAborted)
	})
}

// TestFullDiskWaitIsBounded: a disk that stays full poisons the store after
// pressureMaxWait, with the full-disk error; the retries are spaced at
// least pressureRetryFirst apart and at most pressureRetryMax.
func TestFullDiskWaitIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(filepath.Join(t.TempDir(), "state"))
		s, err := Open(cfg)
		require.NoError(t, err)
		before := readStateFile(t, cfg.Dir)
		var calls atomic.Int64
		s.dir.fault = faultN("fdatasync", 1<<30, unix.ENOSPC, &calls)
		start := time.Now()
		err = s.Update(func(tx *Tx) error { return setN(tx, 2) })
		require.ErrorIs(t, err, unix.ENOSPC)
		require.Equal(t, pressureMaxWait, time.Since(start))
		require.Less(t, calls.Load(), int64(pressureMaxWait/pressureRetryFirst))
		require.Greater(t, calls.Load(), int64(pressureMaxWait/pressureRetryMax))
		require.ErrorIs(t, s.Update(func(tx *Tx) error { return nil }), unix.ENOSPC, "poisoned")
		require.Equal(t, before, readStateFile(t, cfg.Dir))
		_ = s.Close()
	})
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
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{DBName, FileName}, names, "no temp file is left")
}

// setN is a step that changes the record "n" and, by as many bytes, the
// header, so it writes both the store and the projection.
func setN[T any](tx *Tx, v T) error {
	tx.st.Diagnostics = []string{fmt.Sprint(v)}
	return tx.SetRecord("n", v)
}

// setNVisibly is setN that also sets the lifecycle to l: a change the
// server acts on, so its projection syncs the directory.
func setNVisibly[T any](tx *Tx, v T, l Lifecycle) error {
	if err := tx.SetLifecycle(l); err != nil {
		return err
	}
	return setN(tx, v)
}
