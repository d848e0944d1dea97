package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// idleListenArgs is serverLaunchArgv on a loopback kernel port with a 200 ms
// idle timeout, so a runnerd that no server dials exits 0 at once.
func idleListenArgs(stateDir string) []string {
	return replace(replace(replace(serverLaunchArgv(stateDir), "0.0.0.0", "127.0.0.1"), "43127", "0"), "600000", "200")
}

// TestDurability20_IndexedStateKeepsJSONState: durability.md §11 scenario
// 20: "`--indexed-state` → starts; `runner-state.json` has the legacy
// schema, no `runner-state.sqlite`; an existing `runner-state.sqlite` →
// refused at start."
func TestDurability20_IndexedStateKeepsJSONState(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	env := []string{config.BootstrapTicketEnv + "=" + secretTicket}

	dir := t.TempDir()
	// The server passes --indexed-state as the first argument (§7.1).
	r := runBin(t, bin, env, append([]string{"--indexed-state"}, idleListenArgs(dir)...)...)
	require.Equal(t, config.ExitOK, r.code, "stderr: %s", r.stderr)
	raw, err := os.ReadFile(filepath.Join(dir, "runner-state.json"))
	require.NoError(t, err)
	var doc struct {
		Schema string `json:"schema"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, "paperclip.runner.durable.state.v1", doc.Schema)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.NotContains(t, e.Name(), ".sqlite", "no indexed store file")
	}

	for _, indexed := range []bool{true, false} {
		dir := t.TempDir()
		sqlite := filepath.Join(dir, config.StorageStateFile)
		require.NoError(t, os.WriteFile(sqlite, []byte("SQLite format 3\x00"), 0o600))
		args := idleListenArgs(dir)
		if indexed {
			args = append([]string{"--indexed-state"}, args...)
		}
		r := runBin(t, bin, env, args...)
		require.Equal(t, config.ExitFailure, r.code, "indexed=%v stderr: %s", indexed, r.stderr)
		require.Contains(t, r.stderr, "paperclip-runnerd: indexed_state_unsupported: the state directory holds runner-state.sqlite")
		require.NoFileExists(t, filepath.Join(dir, "runner-state.json"), "refused before the state is opened")
		got, err := os.ReadFile(sqlite)
		require.NoError(t, err)
		require.Equal(t, "SQLite format 3\x00", string(got))
	}
}

// TestDurability21_StorageOperationsUnsupported: durability.md §11 scenario
// 21: "`paperclip-runnerd storage inspect-state --path X` (unimplemented) →
// exit 1, one stderr line `paperclip-runnerd: storage_unsupported:
// inspect-state`; no file created or changed." Every operation of §8.2
// fails the same way, with an empty environment as NSC runs it.
func TestDurability21_StorageOperationsUnsupported(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	dir := t.TempDir()
	state := filepath.Join(dir, "runner-state.json")
	require.NoError(t, os.WriteFile(state, []byte(`{"schema":"x"}`), 0o600))
	cases := [][]string{
		{"inspect-state", "--path", state},
		{"inspect-state", "--path", filepath.Join(dir, "missing", "runner-state.json")},
		{"snapshot-session", "--directory", dir, "--destination", filepath.Join(dir, "snap"), "--runner-generation", "1"},
		{"seal", "--directory", dir, "--generation", "3"},
		{"archive-prepare", "--directory", dir, "--destination", filepath.Join(dir, "a"), "--generation", "1", "--digest", "x"},
		{"archive-finish", "--directory", dir, "--destination", filepath.Join(dir, "a")},
		{"archive-controller", "--directory", dir, "--destination", filepath.Join(dir, "a"), "--digest", "x"},
		{"rpc", "--path", state, "--binding", "b", "--create", "true"},
		{"maintain"},
		{"no-such-operation"},
	}
	for _, args := range cases {
		r := runBin(t, bin, nil, append([]string{"storage"}, args...)...)
		require.Equal(t, config.ExitFailure, r.code, "%q", args)
		require.Equal(t, "paperclip-runnerd: storage_unsupported: "+args[0]+"\n", r.stderr, "%q", args)
		require.Empty(t, r.stdout)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no file created")
	got, err := os.ReadFile(state)
	require.NoError(t, err)
	require.Equal(t, `{"schema":"x"}`, string(got))

	// Without an operation, or with one that is not a plain name, it is a
	// usage error that names the problem.
	for _, args := range [][]string{{"storage"}, {"storage", "--path"}, {"storage", "Inspect\nstate"}} {
		r := runBin(t, bin, nil, args...)
		require.Equal(t, config.ExitUsage, r.code, "%q", args)
		require.Regexp(t, `^paperclip-runnerd: usage: storage [^\n]+\n$`, r.stderr)
	}
}

// TestStateDump: `paperclip-runnerd state dump --state-dir DIR` prints the
// state a stopped runnerd left (header, outbox, records) with no ticket,
// exit 0, and changes nothing in the directory; a directory without a
// state is one clear stderr line, exit 1, and is not created.
func TestStateDump(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	dir := t.TempDir()
	r := runBin(t, bin, []string{config.BootstrapTicketEnv + "=" + secretTicket}, idleListenArgs(dir)...)
	require.Equal(t, config.ExitOK, r.code, "stderr: %s", r.stderr)
	before := map[string]string{}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		fi, err := e.Info()
		require.NoError(t, err)
		before[e.Name()] = fi.ModTime().String() + string(b)
	}

	r = runBin(t, bin, nil, "state", "dump", "--state-dir", dir)
	require.Equal(t, config.ExitOK, r.code, "stderr: %s", r.stderr)
	require.Empty(t, r.stderr)
	require.Regexp(t, `(?m)^runId: +"`+regexp.QuoteMeta(runID)+`"$`, r.stdout)
	require.Regexp(t, `(?m)^lifecycle: +"[a-z_]+"$`, r.stdout)
	require.Regexp(t, `(?m)^outbox: \d+ events, \d+ bytes$`, r.stdout)
	require.Regexp(t, `(?m)^records: \d+$`, r.stdout)

	after := map[string]string{}
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		fi, err := e.Info()
		require.NoError(t, err)
		after[e.Name()] = fi.ModTime().String() + string(b)
	}
	require.Equal(t, before, after, "the dump changes nothing")

	missing := filepath.Join(t.TempDir(), "missing")
	r = runBin(t, bin, nil, "state", "dump", "--state-dir", missing)
	require.Equal(t, config.ExitFailure, r.code)
	require.Regexp(t, `^paperclip-runnerd: runner_failed: state dump: [^\n]+\n$`, r.stderr)
	require.Empty(t, r.stdout)
	require.NoDirExists(t, missing)

	r = runBin(t, bin, nil, "state", "dump")
	require.Equal(t, config.ExitUsage, r.code)
	require.Regexp(t, `^paperclip-runnerd: usage: --state-dir: [^\n]+\n$`, r.stderr)
}

// TestDamagedStoreRefusedClearly: a store file cut short (as by a full
// disk or a bad copy) gives `state dump` and runnerd's start one clear
// stderr line and exit 1, never a crash, and neither rewrites it.
func TestDamagedStoreRefusedClearly(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	dir := t.TempDir()
	r := runBin(t, bin, []string{config.BootstrapTicketEnv + "=" + secretTicket}, idleListenArgs(dir)...)
	require.Equal(t, config.ExitOK, r.code, "stderr: %s", r.stderr)
	db := filepath.Join(dir, "runner-state.db")
	b, err := os.ReadFile(db)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(db, b[:len(b)/2], 0o600))

	r = runBin(t, bin, nil, "state", "dump", "--state-dir", dir)
	require.Equal(t, config.ExitFailure, r.code)
	require.Regexp(t, `^paperclip-runnerd: runner_failed: state dump: runner state store is damaged: [^\n]+\n$`, r.stderr)
	require.Empty(t, r.stdout)

	r = runBin(t, bin, []string{config.BootstrapTicketEnv + "=" + secretTicket}, idleListenArgs(dir)...)
	require.Equal(t, config.ExitFailure, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stderr, "runner state store is damaged")
	require.NotContains(t, r.stderr, "panic")
	after, err := os.ReadFile(db)
	require.NoError(t, err)
	require.Equal(t, b[:len(b)/2], after, "the damaged store is left as it was")
}
