package state

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	// killChildEnv runs a re-executed test binary as a writer that
	// SIGKILLs itself at a crash point: "<dir>|<point>|<hit>".
	killChildEnv = "PCRUNNER_STATE_KILL_CHILD"
	// killHit: the writer dies on this hit of its point, so earlier steps
	// were delivered before it.
	killHit = 4
	// killChildEvents bounds the writer's steps (it dies long before).
	killChildEvents = 64
	// killChildTimeout bounds a writer's run.
	killChildTimeout = 20 * time.Second
	// migrateEvents is the old-format outbox a migration test moves.
	migrateEvents = 200
)

// killChild runs in the re-executed binary: it arms killPoint, opens the
// store in dir (which migrates an old-format directory) and appends one
// event {"n":i} per step, printing "sent i" once step i returned, the
// moment a runner may send it.
func killChild() {
	parts := strings.Split(os.Getenv(killChildEnv), "|")
	hit, _ := strconv.Atoi(parts[2])
	hits := 0
	killPoint = func(p string) {
		if p != parts[1] {
			return
		}
		if hits++; hits == hit {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	s, err := Open(crashConfig(parts[0]))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	var n int
	_, _ = s.Record("n", &n)
	for i := n + 1; i <= n+killChildEvents; i++ {
		err := s.Update(func(tx *Tx) error {
			if _, err := tx.Enqueue(Event{Type: "item.delta", Priority: P1, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
				return err
			}
			return tx.SetRecord("n", i)
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "update:", err)
			os.Exit(3)
		}
		fmt.Printf("sent %d\n", i)
	}
	os.Exit(0)
}

// runKillChild runs the writer until it kills itself and returns the last
// step it reported sent (0: none).
func runKillChild(t *testing.T, dir, point string, hit int) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d", killChildEnv, dir, point, hit))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	require.NoError(t, out.(*os.File).SetReadDeadline(time.Now().Add(killChildTimeout)))
	last := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "sent "); ok {
			last, _ = strconv.Atoi(v)
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the writer must die at %s", point)
	require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal(), "killed at %s", point)
	return last
}

// deliveredNs returns the n of every item.delta event in the outbox, in
// sourceSeq order, and checks the sequence is contiguous.
func deliveredNs(t *testing.T, st *State) []int {
	t.Helper()
	var ns []int
	for i, e := range st.Outbox {
		require.Equal(t, st.AckedSourceSeq+1+uint64(i), e.SourceSeq, "contiguous sourceSeq")
		if e.EventType != "item.delta" {
			continue
		}
		var env envelope
		require.NoError(t, json.Unmarshal(e.Envelope, &env))
		var p struct{ N int }
		require.NoError(t, json.Unmarshal(env.Payload.Payload, &p))
		ns = append(ns, p.N)
	}
	return ns
}

// requireProjected checks FileName is the store's header.
func requireProjected(t *testing.T, cfg Config) {
	t.Helper()
	st, err := Read(cfg.Dir)
	require.NoError(t, err)
	var h headerEncoder
	want, err := h.encode(st)
	require.NoError(t, err)
	require.Equal(t, string(want), string(readProjection(t, cfg)))
}

// TestKillPointsDeliverEveryEventOnce: a writer SIGKILLed after a step's
// store commit and before its projection, or after the projection and
// before the step's effect (the send), restarts with every event it
// produced exactly once, in order: all it sent, and at most the killed
// step beyond; runner-state.json is the restarted store's projection.
func TestKillPointsDeliverEveryEventOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	for _, point := range []string{KillStoreCommitted, KillProjected} {
		t.Run(point, func(t *testing.T) {
			cfg := crashConfig(filepath.Join(t.TempDir(), "state"))
			sent := runKillChild(t, cfg.Dir, point, killHit)
			// The hits before the first step's are Open's own commits.
			require.Positive(t, sent)
			s := openStore(t, cfg)
			ns := deliveredNs(t, s.Snapshot())
			require.GreaterOrEqual(t, len(ns), sent, "nothing sent is lost")
			require.LessOrEqual(t, len(ns), sent+1, "only the killed step is beyond what was sent")
			for i, n := range ns {
				require.Equal(t, i+1, n, "each event once, in order")
			}
			requireProjected(t, cfg)
			require.NoError(t, s.Close())

			// A second crash at the same point, then a clean restart.
			sent2 := runKillChild(t, cfg.Dir, point, killHit)
			s = openStore(t, cfg)
			ns = deliveredNs(t, s.Snapshot())
			require.GreaterOrEqual(t, len(ns), sent2)
			for i, n := range ns {
				require.Equal(t, i+1, n, "each event once, in order")
			}
			requireProjected(t, cfg)
		})
	}
}

// legacyDir makes an old-format state directory (the whole outbox and
// the records inside runner-state.json, no store) of migrateEvents events
// and returns its file and its state.
func legacyDir(t *testing.T, cfg Config) ([]byte, *State) {
	t.Helper()
	s, err := Open(cfg)
	require.NoError(t, err)
	for i := 1; i <= migrateEvents; i++ {
		require.NoError(t, s.Update(func(tx *Tx) error {
			if _, err := tx.Enqueue(Event{Type: "item.delta", Priority: P1, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
				return err
			}
			return tx.SetRecord("n", i)
		}))
	}
	require.NoError(t, s.Close())
	old := readFile(t, cfg)
	writeLegacy(t, cfg, old)
	st, err := decodeState(old)
	require.NoError(t, err)
	return old, st
}

// requireMigrated checks that the store holds every old event with its
// sourceSeq and bytes, in order, and the old records.
func requireMigrated(t *testing.T, cfg Config, old *State) {
	t.Helper()
	st, err := Read(cfg.Dir)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(st.Outbox), len(old.Outbox))
	for i, e := range old.Outbox {
		require.Equal(t, e.SourceSeq, st.Outbox[i].SourceSeq)
		require.Equal(t, string(e.Envelope), string(st.Outbox[i].Envelope), "event %d keeps its bytes", e.SourceSeq)
	}
	for k, v := range old.Extensions {
		require.Equal(t, string(v), string(st.Extensions[k]))
	}
	requireProjected(t, cfg)
}

// TestMigrationKeepsEveryEvent: an old-format directory is migrated on
// open: every event keeps its sourceSeq, bytes and order, the records
// come along, runner-state.json becomes the projection; the old file is
// untouched when the open refuses it.
func TestMigrationKeepsEveryEvent(t *testing.T) {
	cfg := crashConfig(filepath.Join(t.TempDir(), "state"))
	oldFile, old := legacyDir(t, cfg)
	require.Len(t, old.Outbox, migrateEvents)

	other := cfg
	other.Identity.RunID = "run_2"
	_, err := Open(other)
	require.ErrorIs(t, err, errStateBinding)
	b, err := os.ReadFile(filepath.Join(cfg.Dir, FileName))
	require.NoError(t, err)
	require.Equal(t, string(oldFile), string(b), "a refused directory is left as it was")
	require.NoFileExists(t, filepath.Join(cfg.Dir, DBName))

	s := openStore(t, cfg)
	require.True(t, s.Recovery().Resumed)
	require.NoError(t, s.Close())
	requireMigrated(t, cfg, old)
	requireOnlyStateFile(t, cfg.Dir)
}

// TestMigrationKillPoints: a migration SIGKILLed after its temporary
// store is committed, or after the rename into place, completes on the
// next open with every event once, in order, with its sourceSeq.
func TestMigrationKillPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	for _, point := range []string{KillMigrateBuilt, KillMigrateRenamed} {
		t.Run(point, func(t *testing.T) {
			cfg := crashConfig(filepath.Join(t.TempDir(), "state"))
			oldFile, old := legacyDir(t, cfg)
			require.Zero(t, runKillChild(t, cfg.Dir, point, 1), "killed inside Open")
			b, err := os.ReadFile(filepath.Join(cfg.Dir, FileName))
			require.NoError(t, err)
			require.Equal(t, string(oldFile), string(b), "the old file is untouched until the store is durable")
			if point == KillMigrateBuilt {
				require.FileExists(t, filepath.Join(cfg.Dir, dbTempName), "a leftover temporary store")
			}
			s := openStore(t, cfg)
			ns := deliveredNs(t, s.Snapshot())
			for i, n := range ns {
				require.Equal(t, i+1, n, "each event once, in order")
			}
			require.Len(t, ns, migrateEvents)
			require.NoError(t, s.Close())
			requireMigrated(t, cfg, old)
			requireOnlyStateFile(t, cfg.Dir)
		})
	}
}
