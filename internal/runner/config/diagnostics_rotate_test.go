package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// openWriteClose is one runnerd life writing line to both files.
func openWriteClose(t *testing.T, dir, line string) {
	t.Helper()
	d, err := OpenDiagnostics(dir, nil)
	require.NoError(t, err)
	fmt.Fprintln(d.Stderr(), "stderr "+line)
	fmt.Fprintln(d.Stdout(), "stdout "+line)
	require.NoError(t, d.Close())
}

func requireMode0600(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	require.True(t, fi.Mode().IsRegular(), path)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), path)
}

// TestDiagnosticsKeepPreviousLife: a restart keeps the previous process's
// files as runnerd.stderr.log.1 and runnerd.stdout.log.1 (one generation,
// 0600), so a crashed life's log survives the next start.
func TestDiagnosticsKeepPreviousLife(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "diag")
	openWriteClose(t, dir, "life 1")
	_, err := os.Stat(filepath.Join(dir, DiagnosticsStderrName+DiagnosticsPreviousSuffix))
	require.ErrorIs(t, err, os.ErrNotExist, "a first start has no previous life")

	openWriteClose(t, dir, "life 2")
	for _, name := range []string{DiagnosticsStdoutName, DiagnosticsStderrName} {
		stream := strings.TrimSuffix(strings.TrimPrefix(name, "runnerd."), ".log")
		require.Equal(t, stream+" life 2\n", readDiag(t, dir, name))
		require.Equal(t, stream+" life 1\n", readDiag(t, dir, name+DiagnosticsPreviousSuffix))
		requireMode0600(t, filepath.Join(dir, name))
		requireMode0600(t, filepath.Join(dir, name+DiagnosticsPreviousSuffix))
	}

	openWriteClose(t, dir, "life 3")
	require.Equal(t, "stderr life 2\n", readDiag(t, dir, DiagnosticsStderrName+DiagnosticsPreviousSuffix), "only one generation is kept")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 4)
}

// TestDiagnosticsPreviousLifeBounded: a previous file that is too large
// (not written by runnerd) or readable by others is kept cut to its newest
// half and made 0600.
func TestDiagnosticsPreviousLifeBounded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "diag")
	require.NoError(t, os.Mkdir(dir, 0o700))
	var big strings.Builder
	for i := 0; big.Len() <= 3*maxDiagnosticsLogBytes; i++ {
		fmt.Fprintf(&big, "%08d %s\n", i, strings.Repeat("y", 200))
	}
	path := filepath.Join(dir, DiagnosticsStderrName)
	require.NoError(t, os.WriteFile(path, []byte(big.String()), 0o644))
	require.NoError(t, os.Chmod(path, 0o644))

	openWriteClose(t, dir, "now")
	prev := filepath.Join(dir, DiagnosticsStderrName+DiagnosticsPreviousSuffix)
	requireMode0600(t, prev)
	got := readDiag(t, dir, DiagnosticsStderrName+DiagnosticsPreviousSuffix)
	require.LessOrEqual(t, len(got), maxDiagnosticsLogBytes)
	require.True(t, strings.HasPrefix(got, droppedMarker))
	require.True(t, strings.HasSuffix(big.String(), got[len(droppedMarker):]), "the newest lines are kept")
}

// TestDiagnosticsPreviousNotFollowed: a symlink at runnerd.stderr.log.1 is
// replaced, never written through; a directory there is refused.
func TestDiagnosticsPreviousNotFollowed(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "diag")
	openWriteClose(t, dir, "life 1")
	target := filepath.Join(base, "target")
	require.NoError(t, os.WriteFile(target, []byte("keep"), 0o600))
	require.NoError(t, os.Symlink(target, filepath.Join(dir, DiagnosticsStderrName+DiagnosticsPreviousSuffix)))
	openWriteClose(t, dir, "life 2")
	require.Equal(t, "stderr life 1\n", readDiag(t, dir, DiagnosticsStderrName+DiagnosticsPreviousSuffix))
	requireMode0600(t, filepath.Join(dir, DiagnosticsStderrName+DiagnosticsPreviousSuffix))
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "keep", string(b))

	prev := filepath.Join(dir, DiagnosticsStdoutName+DiagnosticsPreviousSuffix)
	require.NoError(t, os.Remove(prev))
	require.NoError(t, os.Mkdir(prev, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(prev, "x"), nil, 0o600))
	orig := os.Stderr
	_, err = OpenDiagnostics(dir, nil)
	require.ErrorContains(t, err, "keep previous "+DiagnosticsStdoutName)
	require.Same(t, orig, os.Stderr, "os.Stderr untouched on failure")
}
