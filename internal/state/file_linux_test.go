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

// Writes hold at most the directory and one file open (a write that
// renames rather than exchanges keeps the new file open, so the next rename
// does not free it inline), and Close returns every one and removes the
// spare temp file.
func TestWritesHoldOneFileAndCloseReleasesAll(t *testing.T) {
	before := openFDs(t)
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	s, err := Open(cfg)
	require.NoError(t, err)
	for i := range 50 {
		require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, i) }))
	}
	s.dir.releases.Wait()
	require.LessOrEqual(t, openFDs(t), before+4, "the directory, the store, the state file and the spare only")
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

// Steady writes allocate no file: after the first swap the state file
// alternates between two inodes (the spare is overwritten in place and
// exchanged), and each write is one data sync and one directory sync.
func TestWritesReuseTwoFiles(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	s := openStore(t, cfg)
	require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, -1) }))
	var syncs, dirSyncs atomic.Int64
	s.dir.fault = func(op string) error {
		switch op {
		case "fdatasync":
			syncs.Add(1)
		case "fsync dir":
			dirSyncs.Add(1)
		}
		return nil
	}
	seen := map[uint64]bool{}
	const writes = 20
	for i := range writes {
		require.NoError(t, s.Update(func(tx *Tx) error { return setN(tx, strings.Repeat("x", i*37)) }))
		seen[inode(t, cfg)] = true
	}
	require.Len(t, seen, 2, "two files, reused")
	require.EqualValues(t, writes, syncs.Load(), "one data sync per write")
	require.EqualValues(t, writes, dirSyncs.Load(), "one directory sync per write")
	var n string
	ok, err := s.Snapshot().Record("n", &n)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, strings.Repeat("x", (writes-1)*37), n)
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
