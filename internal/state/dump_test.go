package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// dumpFixture writes a state with three events and two records, closed.
func dumpFixture(t testing.TB) (Config, *Store) {
	t.Helper()
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	s, err := Open(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Update(func(tx *Tx) error {
		for range 2 {
			if _, err := tx.Enqueue(Event{Type: "item.delta", Priority: P1, Payload: json.RawMessage(`{"delta":"hello"}`)}); err != nil {
				return err
			}
		}
		if err := tx.SetRecord("acpAgent", map[string]string{"kind": "codex"}); err != nil {
			return err
		}
		if err := tx.PutText("acpAgent/item/t-item-1", 0, []byte("hello, world")); err != nil {
			return err
		}
		return tx.SetRecord("toolTable", []int{1, 2, 3})
	}))
	return cfg, s
}

// dirSnapshot is every entry's name, mode and bytes.
func dirSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	out["."] = fi.Mode().String() + fi.ModTime().String()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		fi, err := e.Info()
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = fi.Mode().String() + fi.ModTime().String() + string(b)
	}
	return out
}

// TestDumpPrintsHeaderOutboxAndRecords: the dump shows the header fields,
// each outbox event (sequence, type, priority, size), each record and
// each text (name, size), and changes nothing in the directory, not even a mode
// runnerd itself would tighten.
func TestDumpPrintsHeaderOutboxAndRecords(t *testing.T) {
	cfg, s := dumpFixture(t)
	snap := s.Snapshot()
	require.NoError(t, s.Close())
	require.NoError(t, os.Chmod(cfg.Dir, 0o750))
	before := dirSnapshot(t, cfg.Dir)

	var out bytes.Buffer
	require.NoError(t, Dump(cfg.Dir, &out))
	got := out.String()
	for _, want := range []string{
		`(?m)^schema: +"` + regexp.QuoteMeta(schema) + `"$`,
		`(?m)^runnerInstanceId: +"runner_1"$`,
		`(?m)^lifecycle: +"connecting"$`,
		`(?m)^nextSourceSeq: +3$`,
		`(?m)^ackedSourceSeq: +0$`,
		`(?m)^pendingTerminalDelivery: +null$`,
		`(?m)^outbox: 2 events, \d+ bytes$`,
		`(?m)^records: 2$`,
		`(?m)^  "acpAgent" +16$`,
		`(?m)^  "toolTable" +7$`,
		`(?m)^texts: 1$`,
		`(?m)^  "acpAgent/item/t-item-1" +12$`,
	} {
		require.Regexp(t, want, got)
	}
	for _, e := range snap.Outbox {
		require.Regexp(t, fmt.Sprintf(`(?m)^  %d +"item.delta" +P1 +%d$`, e.SourceSeq, e.ByteSize), got)
	}
	require.Equal(t, before, dirSnapshot(t, cfg.Dir), "the dump changes nothing")
}

// TestDumpWhileRunnerdWrites: a dump beside a store that keeps writing
// (a live runnerd, which holds no lock the dump could wait for) always
// reads one whole state, never a mix of two writes.
func TestDumpWhileRunnerdWrites(t *testing.T) {
	cfg, s := dumpFixture(t)
	defer s.Close()
	require.NoError(t, s.Update(func(tx *Tx) error { return tx.SetRecord("n", -1) }))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			require.NoError(t, s.Update(func(tx *Tx) error { return tx.SetRecord("n", n) }))
		}
	})
	for range 50 {
		var out bytes.Buffer
		require.NoError(t, Dump(cfg.Dir, &out))
		require.Contains(t, out.String(), "records: 3")
	}
	close(stop)
	wg.Wait()
}

// TestDumpRefusesUnsafeOrMissing: a symlinked directory or state file is
// refused, a missing file or directory is a clear error, and nothing is
// created.
func TestDumpRefusesUnsafeOrMissing(t *testing.T) {
	cfg, s := dumpFixture(t)
	require.NoError(t, s.Close())
	root := t.TempDir()

	link := filepath.Join(root, "link")
	require.NoError(t, os.Symlink(cfg.Dir, link))
	require.ErrorIs(t, Dump(link, &bytes.Buffer{}), errUnsafePath)

	fileLink := filepath.Join(root, "filelink")
	require.NoError(t, os.Mkdir(fileLink, 0o700))
	require.NoError(t, os.Symlink(filepath.Join(cfg.Dir, FileName), filepath.Join(fileLink, FileName)))
	require.ErrorIs(t, Dump(fileLink, &bytes.Buffer{}), errUnsafePath)
	dbLink := filepath.Join(root, "dblink")
	require.NoError(t, os.Mkdir(dbLink, 0o700))
	require.NoError(t, os.Symlink(filepath.Join(cfg.Dir, DBName), filepath.Join(dbLink, DBName)))
	require.ErrorIs(t, Dump(dbLink, &bytes.Buffer{}), errUnsafePath)

	empty := filepath.Join(root, "empty")
	require.NoError(t, os.Mkdir(empty, 0o700))
	err := Dump(empty, &bytes.Buffer{})
	require.ErrorContains(t, err, "no "+DBName+" or "+FileName)
	entries, rerr := os.ReadDir(empty)
	require.NoError(t, rerr)
	require.Empty(t, entries)

	missing := filepath.Join(root, "missing")
	require.Error(t, Dump(missing, &bytes.Buffer{}))
	require.NoDirExists(t, missing)

	bad := filepath.Join(root, "bad")
	require.NoError(t, os.Mkdir(bad, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(bad, FileName), []byte(`{"schema":`), 0o600))
	require.ErrorIs(t, Dump(bad, &bytes.Buffer{}), errCorruptState)
}
