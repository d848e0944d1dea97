package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

const (
	// preStoreCommit is the last commit whose runnerd kept the whole
	// state, outbox included, in runner-state.json.
	preStoreCommit = "d883e73"
	// oldBuildTimeout bounds extracting and building that runnerd.
	oldBuildTimeout = 5 * time.Minute
)

// buildPreStoreRunnerd builds runnerd as of preStoreCommit from this
// repository's history, offline (the module cache), or skips saying why.
func buildPreStoreRunnerd(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds runnerd from git history")
	}
	ctx, cancel := context.WithTimeout(context.Background(), oldBuildTimeout)
	defer cancel()
	top, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("no git repository to build runnerd %s from: %v", preStoreCommit, err)
	}
	root := strings.TrimSpace(string(top))
	if err := exec.CommandContext(ctx, "git", "-C", root, "cat-file", "-e", preStoreCommit+"^{commit}").Run(); err != nil {
		t.Skipf("git history lacks %s (a shallow clone?): %v", preStoreCommit, err)
	}
	src := t.TempDir()
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, preStoreCommit, src)
	out, err := archive.CombinedOutput()
	require.NoError(t, err, "extract %s: %s", preStoreCommit, out)
	bin := filepath.Join(t.TempDir(), "runnerd-"+preStoreCommit)
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/runnerd")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOPROXY=off", "GOFLAGS=-mod=readonly")
	out, err = build.CombinedOutput()
	require.NoError(t, err, "build runnerd %s offline: %s", preStoreCommit, out)
	return bin
}

// TestMigratedStateRefusedByPreStoreRunnerd: a state directory written by
// the runnerd before the store (the outbox inside runner-state.json) is
// migrated by this runnerd on start: every event keeps its sourceSeq, the
// store is beside a projected runner-state.json; the old runnerd then
// refuses the directory with its corrupt-state error (the projection's
// outbox view has no envelopes) and changes nothing.
func TestMigratedStateRefusedByPreStoreRunnerd(t *testing.T) {
	old := buildPreStoreRunnerd(t)
	bin := testbin.Path(t, "runnerd")
	env := []string{config.BootstrapTicketEnv + "=" + secretTicket}
	dir := t.TempDir()

	// Two starts of the old runnerd: the second's recovery leaves a
	// pending runner.reconciled event in its outbox.
	for range 2 {
		r := runBin(t, old, env, idleListenArgs(dir)...)
		require.Equal(t, config.ExitOK, r.code, "stderr: %s", r.stderr)
	}
	require.NoFileExists(t, filepath.Join(dir, state.DBName))
	before, err := state.Read(dir)
	require.NoError(t, err)
	require.NotEmpty(t, before.Outbox)

	r := runBin(t, bin, env, idleListenArgs(dir)...)
	require.Equal(t, config.ExitOK, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stderr, "migrated runner state into the store")
	require.FileExists(t, filepath.Join(dir, state.DBName))
	after, err := state.Read(dir)
	require.NoError(t, err)
	require.Greater(t, len(after.Outbox), len(before.Outbox), "this start's recovery event follows")
	for i, e := range before.Outbox {
		require.Equal(t, e.SourceSeq, after.Outbox[i].SourceSeq)
		require.Equal(t, string(e.Envelope), string(after.Outbox[i].Envelope))
	}

	projection, err := os.ReadFile(filepath.Join(dir, state.FileName))
	require.NoError(t, err)
	require.Contains(t, string(projection), `"outbox":[{"indexedPending":true}]`)
	r = runBin(t, old, env, idleListenArgs(dir)...)
	require.Equal(t, config.ExitFailure, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stderr, "paperclip-runnerd: runner_failed: open runner state: decode state: runner state is corrupt")
	unchanged, err := os.ReadFile(filepath.Join(dir, state.FileName))
	require.NoError(t, err)
	require.Equal(t, string(projection), string(unchanged), "the refusal changes nothing")
}
