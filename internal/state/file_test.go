package state

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFreshStateUsesReferenceSchemaAndPermissions(t *testing.T) {
	s, cfg := newStore(t)
	require.False(t, s.Recovery().Resumed)

	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(readFile(t, cfg), &top))
	require.JSONEq(t, `"paperclip.runner.durable.state.v1"`, string(top["schema"]))
	for _, k := range []string{"runnerInstanceId", "environmentLeaseId", "runId", "normalizedSessionId", "turnId", "itemId",
		"lifecycle", "nextSourceSeq", "ackedSourceSeq", "lastControllerCommandSeq", "compactedThroughControllerSeq",
		"reconnectCount", "maxOutboxBytes", "p0ReserveBytes", "peakOutboxBytes", "outbox", "processedCommands",
		"processedCommandFingerprints", "pendingTerminalDelivery", "executorEventReceipts", "v2ReplayEvents",
		"lastConnectionProtocolVersion", "diagnostics", "backpressure", "recoverableFailure"} {
		require.Contains(t, top, k)
	}
	require.JSONEq(t, `[]`, string(top["outbox"]))
	require.JSONEq(t, `{}`, string(top["processedCommands"]))
	require.JSONEq(t, `"connecting"`, string(top["lifecycle"]))
	require.JSONEq(t, `1`, string(top["nextSourceSeq"]))

	fi, err := os.Stat(filepath.Join(cfg.Dir, FileName))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	di, err := os.Stat(cfg.Dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), di.Mode().Perm())
}

func TestExistingLooseDirectoryIsTightened(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.Mkdir(dir, 0o755))
	openStore(t, testConfig(dir))
	di, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), di.Mode().Perm())
}

func TestSymlinkedStateDirIsRefused(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real")
	require.NoError(t, os.Mkdir(real, 0o700))
	link := filepath.Join(root, "link")
	require.NoError(t, os.Symlink(real, link))
	_, err := Open(testConfig(link))
	require.ErrorIs(t, err, errUnsafePath)
	_, err = os.Stat(filepath.Join(real, FileName))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing may be written through the link")
}

func TestSymlinkedStateFileIsRefused(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "state")
	require.NoError(t, os.Mkdir(dir, 0o700))
	target := filepath.Join(root, "elsewhere.json")
	require.NoError(t, os.WriteFile(target, []byte(`{}`), 0o600))
	require.NoError(t, os.Symlink(target, filepath.Join(dir, FileName)))
	_, err := Open(testConfig(dir))
	require.ErrorIs(t, err, errUnsafePath)
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, `{}`, string(b), "the link target is untouched")
}

// A swap of the state directory for a symlink after Open cannot redirect
// writes: the store writes relative to the directory it opened.
func TestDirectorySwapAfterOpenDoesNotRedirectWrites(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "state")
	s := openStore(t, testConfig(dir))
	moved := filepath.Join(root, "moved")
	require.NoError(t, os.Rename(dir, moved))
	attacker := filepath.Join(root, "attacker")
	require.NoError(t, os.Mkdir(attacker, 0o700))
	require.NoError(t, os.Symlink(attacker, dir))

	enqueue(t, s, p1("runner.connected"))

	for _, n := range []string{FileName, DBName} {
		_, err := os.Stat(filepath.Join(attacker, n))
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	st, err := Read(moved)
	require.NoError(t, err)
	require.Len(t, st.Outbox, 1)
	require.Contains(t, string(st.Outbox[0].Envelope), "runner.connected")
}

func TestStaleTempFilesAreRemovedAndNeverRead(t *testing.T) {
	s, cfg := newStore(t)
	require.NoError(t, s.Close())
	stale := filepath.Join(cfg.Dir, tempPrefix+"deadbeef")
	require.NoError(t, os.WriteFile(stale, []byte(`garbage`), 0o600))
	require.NoError(t, openStore(t, cfg).Close())
	_, err := os.Stat(stale)
	require.ErrorIs(t, err, os.ErrNotExist)
	entries, err := os.ReadDir(cfg.Dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "only the store and runner-state.json remain")
}

// A truncated or damaged file is a clear error and is never replaced.
func TestCorruptStateIsReportedAndNotDestroyed(t *testing.T) {
	s, cfg := newStore(t)
	enqueue(t, s, p1("runner.connected"))
	require.NoError(t, s.Close())
	good := readFile(t, cfg)
	path := filepath.Join(cfg.Dir, FileName)
	// An old-format directory (no store) is what a damaged file can
	// still break: a store's directory re-projects FileName.
	writeLegacy(t, cfg, good)

	cases := map[string][]byte{
		"empty":      {},
		"truncated":  good[:len(good)/2],
		"one short":  good[:len(good)-1],
		"not object": []byte(`[1,2,3]`),
		"wrong type": []byte(strings.Replace(string(good), `"nextSourceSeq":2`, `"nextSourceSeq":"2"`, 1)),
		"bad cursor": []byte(strings.Replace(string(good), `"ackedSourceSeq":0`, `"ackedSourceSeq":7`, 1)),
		"bad size":   []byte(strings.Replace(string(good), `"byteSize":`, `"byteSize":1`, 1)),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(path, b, 0o600))
			_, err := Open(cfg)
			require.ErrorIs(t, err, errCorruptState)
			after, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			require.Equal(t, b, after, "a corrupt file is left exactly as found")
			require.NotContains(t, err.Error(), "runner.connected", "errors never quote file content")
		})
	}
	require.NoError(t, os.WriteFile(path, good, 0o600))
	openStore(t, cfg)
}

func TestStateOfAnotherRunnerIsRefused(t *testing.T) {
	s, cfg := newStore(t)
	require.NoError(t, s.Close())
	other := cfg
	other.Identity.RunID = "run_2"
	_, err := Open(other)
	require.ErrorIs(t, err, errStateBinding)
	other = cfg
	other.MaxOutboxBytes = 2 * defaultMaxOutboxBytes
	_, err = Open(other)
	require.ErrorIs(t, err, errStateBinding)
}

func TestExtensionRecordsAndUnknownFieldsRoundTrip(t *testing.T) {
	s, cfg := newStore(t)
	type acpRecord struct {
		AcpSessionID string `json:"acpSessionId"`
		ConsumedSeq  int    `json:"consumedEventSeq"`
	}
	require.NoError(t, s.Update(func(tx *Tx) error {
		if _, err := tx.Enqueue(p1("item.started")); err != nil {
			return err
		}
		return tx.SetRecord("acpSessions", map[string]acpRecord{"session_1": {"acp_1", 7}})
	}))
	require.NoError(t, s.Close())

	// A newer writer's field survives our rewrite byte-for-byte.
	b := readFile(t, cfg)
	b = append(b[:len(b)-1], []byte(`,"zFutureField":{"b":[1,2.50,"<&>"],"a":null}}`)...)
	writeLegacy(t, cfg, b)

	s2 := openStore(t, cfg)
	snap := s2.Snapshot()
	var got map[string]acpRecord
	ok, err := snap.Record("acpSessions", &got)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, acpRecord{"acp_1", 7}, got["session_1"])
	require.Contains(t, string(readFile(t, cfg)), `"zFutureField":{"b":[1,2.50,"<&>"],"a":null}`)

	require.Error(t, s2.Update(func(tx *Tx) error { return tx.SetRecord("outbox", 1) }), "state fields are reserved")
}
