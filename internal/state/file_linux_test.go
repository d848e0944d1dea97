package state

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// Writes hold at most the directory, the store, the state file and the
// spares open (a write that renames rather than exchanges keeps the new
// file open, so the next rename does not free it inline), and Close
// returns every one and removes the spare temp files.
func TestWritesHoldOneFileAndCloseReleasesAll(t *testing.T) {
	before := openFDs(t)
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	s, err := Open(cfg)
	require.NoError(t, err)
	for i := range 50 {
		require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, i) }))
	}
	s.dir.releases.Wait()
	require.LessOrEqual(t, openFDs(t), before+3+maxSpares, "the directory, the store, the state file and the spares only")
	require.NoError(t, s.Close())
	require.Equal(t, before, openFDs(t))
	// Checked before recordOf reopens the store (an open store keeps its
	// spare temp file).
	entries, err := os.ReadDir(cfg.Dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temp file is left: the store and the projection")

	var n int
	require.NoError(t, json.Unmarshal(recordOf(t, cfg, "n"), &n))
	require.Equal(t, 49, n)
}

// inode returns the inode number of the state file.
func inode(t *testing.T, cfg Config) uint64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(cfg.Dir, FileName), &st))
	return st.Ino
}

// Steady writes allocate no file and sync the directory only as often as
// the spares run out: the state file cycles through at most maxSpares+1
// inodes (a spare is overwritten in place and exchanged), each write is
// one data sync, and at most one write in maxSpares syncs the directory.
// Above all, a write never reuses a file that may still be the state file
// on disk: after every write, no spare has been FileName since the last
// directory sync.
func TestRoutineWritesReuseSparesAndSyncTheDirectoryRarely(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	s := openStore(t, cfg)
	require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, -1) }))
	var syncs, dirSyncs atomic.Int64
	// mayBeOnDisk holds the inodes that were FileName since the last
	// directory sync (no fault here: every sync succeeds).
	mayBeOnDisk := map[uint64]bool{inode(t, cfg): true}
	s.dir.fault = func(op string) error {
		switch op {
		case "fdatasync":
			syncs.Add(1)
		case "fsync dir":
			dirSyncs.Add(1)
			clear(mayBeOnDisk)
		}
		return nil
	}
	seen := map[uint64]bool{}
	const writes = 30
	for i := range writes {
		require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, strings.Repeat("x", i*37)) }))
		ino := inode(t, cfg)
		seen[ino], mayBeOnDisk[ino] = true, true
		for _, sp := range s.dir.spares {
			var st unix.Stat_t
			require.NoError(t, unix.Stat(filepath.Join(cfg.Dir, sp.name), &st))
			require.False(t, mayBeOnDisk[st.Ino], "write %d: spare %s may still be the state file on disk", i, sp.name)
		}
		require.LessOrEqual(t, len(s.dir.spares)+len(s.dir.unsynced), maxSpares, "write %d", i)
	}
	require.LessOrEqual(t, len(seen), maxSpares+1, "at most maxSpares+1 files, reused")
	require.EqualValues(t, writes, syncs.Load(), "one data sync per write")
	require.LessOrEqual(t, dirSyncs.Load(), int64(writes/maxSpares+1), "a directory sync when the spares run out")
	require.Positive(t, dirSyncs.Load(), "the spares ran out and came back")
	var n string
	ok, err := s.Snapshot().Record("n", &n)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, strings.Repeat("x", (writes-1)*37), n)
}

// A large state keeps fewer older files: as many as fit in spareBytes.
func TestLargeStateKeepsFewerSpares(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	s := openStore(t, cfg)
	for i := range 4 * maxSpares {
		require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, strings.Repeat("x", 8)) }))
		require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, strings.Repeat("y", 300<<10+i)) }))
		require.LessOrEqual(t, len(s.dir.spares)+len(s.dir.unsynced), spareBytes/(300<<10), "write %d", i)
	}
	entries, err := os.ReadDir(cfg.Dir)
	require.NoError(t, err)
	require.LessOrEqual(t, len(entries), 2+spareBytes/(300<<10), "the store, FileName and the older files")
}

// A write that changes what the server acts on (the lifecycle here; every
// such field in TestCrashVisibleChange) syncs the directory itself, so it
// is durable under FileName before the step's effects; the older files
// then all become spares.
func TestCrashVisibleWriteSyncsTheDirectory(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	s := openStore(t, cfg)
	for i := range 2 {
		require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, i) }))
	}
	require.NotEmpty(t, s.dir.unsynced, "routine writes left their older files unsynced")
	var dirSyncs atomic.Int64
	s.dir.fault = func(op string) error {
		if op == "fsync dir" {
			dirSyncs.Add(1)
		}
		return nil
	}
	require.NoError(t, s.Update(func(tx *Tx) error { return setNVisibly(tx, 2, Ready) }))
	require.EqualValues(t, 1, dirSyncs.Load())
	require.Empty(t, s.dir.unsynced, "after the directory sync no older file may be the state file on disk")
	require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, 3) }))
	require.EqualValues(t, 1, dirSyncs.Load(), "a routine write after it reuses a spare without a sync")
}

// Close makes the last routine write durable under FileName (a directory
// sync) before it removes the older files.
func TestCloseSyncsTheDirectoryAfterRoutineWrites(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	s, err := Open(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, 1) }))
	require.NotEmpty(t, s.dir.unsynced)
	var dirSyncs atomic.Int64
	s.dir.fault = func(op string) error {
		if op == "fsync dir" {
			dirSyncs.Add(1)
		}
		return nil
	}
	require.NoError(t, s.Close())
	require.EqualValues(t, 1, dirSyncs.Load())
	requireOnlyStateFile(t, cfg.Dir)
}

func recordOf(t *testing.T, cfg Config, key string) json.RawMessage {
	t.Helper()
	st, err := Read(cfg.Dir)
	require.NoError(t, err)
	var v json.RawMessage
	ok, err := st.Record(key, &v)
	require.NoError(t, err)
	require.True(t, ok)
	return v
}

// A write pads the state to whole blocks, so writes whose JSON grows or
// shrinks by a few bytes keep the file's size: the data sync then has no
// size to flush (padBlock). The padding is JSON whitespace; a later state
// that needs more blocks grows the file, and one that needs fewer cuts it.
func TestWritesPadToWholeBlocks(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	s := openStore(t, cfg)
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(cfg.Dir, FileName))
		require.NoError(t, err)
		return fi.Size()
	}
	var sizes []int64
	for i := range 20 {
		require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, strings.Repeat("x", i%7)) }))
		sizes = append(sizes, size())
	}
	require.Equal(t, slices.Repeat([]int64{padBlock}, 20), sizes)
	require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, strings.Repeat("x", 3*padBlock)) }))
	require.EqualValues(t, 4*padBlock, size())
	require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, "") }))
	require.EqualValues(t, padBlock, size())
	var n string
	require.NoError(t, json.Unmarshal(recordOf(t, cfg, "n"), &n))
}
