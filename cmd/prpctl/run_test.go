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

// TestRelativeStateDirBecomesAbsolute: runnerd refuses a relative
// --state-dir, so prpctl resolves its own against its working directory.
func TestRelativeStateDirBecomesAbsolute(t *testing.T) {
	o, err := parseOptions([]string{"--mode", "dial", "--state-dir", "rel/state"}, io.Discard)
	require.NoError(t, err)
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.Equal(t, filepath.Join(wd, "rel/state"), o.stateDir)
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
