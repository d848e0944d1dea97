package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRelativeStateDirRefused: runnerd refuses a relative --state-dir, and
// so does prpctl, rather than create one wherever it happens to run.
func TestRelativeStateDirRefused(t *testing.T) {
	_, err := parseOptions([]string{"--mode", "dial", "--state-dir", "rel/state"}, io.Discard)
	require.ErrorContains(t, err, `--state-dir must be an absolute path, got "rel/state"`)
}

// TestUsageErrors: --help goes to stdout with status 0; a mistyped command
// is named before anything starts; no command at all is a usage error, not
// a run that connects only to end.
func TestUsageErrors(t *testing.T) {
	var stdout, stderr strings.Builder
	require.Equal(t, 0, run(context.Background(), []string{"--help"}, strings.NewReader(""), &stdout, &stderr))
	require.Contains(t, stdout.String(), "USAGE")
	require.Empty(t, stderr.String())

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--state-dir", t.TempDir(), "--command", "bogus.cmd"}, `unknown command type "bogus.cmd" (known: `},
		{[]string{"--state-dir", t.TempDir()}, "nothing to do: give --command or --script"},
		{[]string{"--bogus"}, "unknown flag: --bogus"},
	} {
		stdout.Reset()
		stderr.Reset()
		code := run(context.Background(), tc.args, strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), tc.want)
		require.Empty(t, stdout.String())
	}
}

// runBound bounds one in-process prpctl run in these tests; prpctl's own
// --timeout is set far beyond it, so only an early exit passes.
const runBound = 20 * time.Second

// fakeRunnerd writes a stand-in runnerd that exits with code at once.
func fakeRunnerd(t *testing.T, code int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "runnerd")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf("#!/bin/sh\nexit %d\n", code)), 0o700))
	return path
}

// TestRunnerdExitEndsRun: when the runnerd prpctl launched dies, prpctl
// stops waiting at once (not after --timeout) and exits with runnerd's
// status, saying what was left undone; a runnerd that exits 0 with a
// command unanswered is still a failure (1).
func TestRunnerdExitEndsRun(t *testing.T) {
	cases := []struct {
		mode       string
		runnerd    int
		want       int
		wantStderr string
	}{
		{"dial", 3, 3, "prpctl: runnerd exited with status 3 before 1 of 1 commands got a result\n"},
		{"dial", 0, 1, "prpctl: runnerd exited with status 0 before 1 of 1 commands got a result\n"},
		{"listen", 4, 4, "prpctl: runnerd exited with status 4 before listening\n"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d", tc.mode, tc.runnerd), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), runBound)
			defer cancel()
			var stdout, stderr bytes.Buffer
			code := run(ctx, []string{"--mode", tc.mode, "--runnerd", fakeRunnerd(t, tc.runnerd),
				"--state-dir", t.TempDir(), "--command", "session.snapshot", "--timeout", "10m"},
				strings.NewReader(""), &stdout, &stderr)
			require.NoError(t, ctx.Err(), "prpctl waited for its run bound")
			require.Equal(t, tc.want, code, "stderr: %s", stderr.String())
			require.Equal(t, tc.wantStderr, stderr.String())
			if tc.mode == "dial" {
				require.Contains(t, stdout.String(), fmt.Sprintf(`{"code":%d,"kind":"runnerd_exit"}`, tc.runnerd))
			}
		})
	}
}
