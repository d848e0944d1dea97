package config

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// TestLogLevelFlag: --log-level takes debug, info, warn or error (default
// info); anything else is a usage error naming the flag (exit 2).
func TestLogLevelFlag(t *testing.T) {
	require.Equal(t, slog.LevelInfo, mustParse(t, listenArgs()).LogLevel)
	for name, want := range map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError} {
		require.Equal(t, want, mustParse(t, listenArgs("--log-level", name)).LogLevel, name)
		require.Equal(t, want, mustParse(t, dialArgs("ws://127.0.0.1:1/x", "--log-level="+name)).LogLevel, name)
	}
	for _, bad := range []string{"", "INFO", "warning", "trace", "0"} {
		ue := requireUsage(t, listenArgs("--log-level="+bad), "--log-level", CodeUsage)
		require.Contains(t, ue.Problem, "debug, info, warn or error")
	}
	requireUsage(t, listenArgs("--log-level", "warn", "--log-level", "info"), "--log-level", CodeUsage)
}

// TestStateDirMustBeAbsolute: a relative --state-dir is a usage error
// (exit 2): the agents' sessions under it outlive the process, so it must
// not depend on the working directory.
func TestStateDirMustBeAbsolute(t *testing.T) {
	for _, dir := range []string{"state", "./state", "../state", "state/../x"} {
		args := listenArgs()
		for i := range args {
			if args[i] == "--state-dir" {
				args[i+1] = dir
			}
		}
		ue := requireUsage(t, args, "--state-dir", CodeUsage)
		require.Contains(t, ue.Problem, "absolute")
	}
	require.Equal(t, "/var/lib/paperclip/state", mustParse(t, listenArgs()).StateDir)
}

// helpExitSection returns the EXIT STATUS paragraph of Help for status.
func helpExitSection(t *testing.T, status string) string {
	t.Helper()
	_, sec, ok := strings.Cut(Help, "\nEXIT STATUS\n")
	require.True(t, ok)
	sec, _, _ = strings.Cut(sec, "\n\n")
	var out []string
	in := false
	for _, line := range strings.Split(sec, "\n") {
		if len(line) > 3 && line[2] != ' ' {
			in = strings.HasPrefix(line, "  "+status+"  ")
		}
		if in {
			out = append(out, line)
		}
	}
	require.NotEmpty(t, out, "no exit status %s in Help", status)
	return strings.Join(out, "\n")
}

// TestHelpExitStatusAgreesWithExitCode: --help lists each documented
// outcome under the status runnerd really exits with: a bad --listen-path
// is a usage error (2) whose line starts runner_ingress_bind_conflict, a
// bind failure is 1, a signal's orderly stop is 0; the grace's start is
// documented.
func TestHelpExitStatusAgreesWithExitCode(t *testing.T) {
	args := append([]string{"--listen-path", listenPathPrefix + "another-run"}, identityArgs()...)
	_, err := ParseArgs(args, noEnv)
	require.Equal(t, ExitUsage, ExitCode(err))
	require.Equal(t, CodeIngressBindConflict, CodeOf(err))
	usage := helpExitSection(t, "2")
	require.Contains(t, usage, "--listen-path")
	require.Contains(t, usage, string(CodeIngressBindConflict))

	bind := NewError(CodeIngressBindConflict, "listen", errors.New("bind: address already in use"))
	require.Equal(t, ExitFailure, ExitCode(bind))
	require.Contains(t, helpExitSection(t, "1"), string(CodeIngressBindConflict)+" (the listener could not bind)")

	require.Equal(t, ExitOK, ExitCode(nil))
	require.Contains(t, helpExitSection(t, "0"), "SIGTERM")

	_, grace, ok := strings.Cut(Help, "--reconnect-grace-ms MS")
	require.True(t, ok)
	grace, _, _ = strings.Cut(grace, "\n  --")
	require.Contains(t, strings.Join(strings.Fields(grace), " "), "only after the first successful authentication")
}

// TestIndexedStateFlag: --indexed-state is a switch the newest server passes
// first (durability.md §7.1); it takes no value and may appear once.
func TestIndexedStateFlag(t *testing.T) {
	require.False(t, mustParse(t, listenArgs()).IndexedState)
	require.True(t, mustParse(t, append([]string{"--indexed-state"}, listenArgs()...)).IndexedState)
	require.True(t, mustParse(t, dialArgs("ws://127.0.0.1:1/x", "--indexed-state")).IndexedState)
	requireUsage(t, listenArgs("--indexed-state=false"), "--indexed-state", CodeUsage)
	requireUsage(t, listenArgs("--indexed-state", "--indexed-state"), "--indexed-state", CodeUsage)
}

// TestStorageMode: `storage <operation>` is its own mode whatever follows
// the operation (durability.md §8.1); the operation must be a plain name,
// so it is safe to print.
func TestStorageMode(t *testing.T) {
	cfg := mustParse(t, []string{"storage", "inspect-state", "--path", "/s/runner-state.json", "--unknown", "x"})
	require.Equal(t, ModeStorage, cfg.Mode)
	require.Equal(t, "inspect-state", cfg.StorageOperation)
	require.Equal(t, "paperclip-runnerd: storage_unsupported: inspect-state\n", FormatError(StorageUnsupported(cfg.StorageOperation)))
	require.Equal(t, ExitFailure, ExitCode(StorageUnsupported("seal")))
	for _, args := range [][]string{{"storage"}, {"storage", ""}, {"storage", "--path"}, {"storage", "-x"}, {"storage", "Seal"},
		{"storage", strings.Repeat("a", maxStorageOperationBytes+1)}} {
		_, err := ParseArgs(args, noEnv)
		var ue *usageError
		require.True(t, errors.As(err, &ue), "%q: %v", args, err)
		require.Contains(t, ue.Problem, "storage")
	}
	// "storage" anywhere but first is an ordinary stray argument.
	requireUsage(t, listenArgs("storage", "seal"), "", CodeUsage)
}

// TestStateDumpMode: `state dump --state-dir DIR` is its own mode and
// takes nothing else; a relative directory is cleaned, not refused.
func TestStateDumpMode(t *testing.T) {
	cfg := mustParse(t, []string{"state", "dump", "--state-dir", "/s/x/../state/"})
	require.Equal(t, ModeStateDump, cfg.Mode)
	require.Equal(t, "/s/state", cfg.StateDir)
	require.Equal(t, "rel/state", mustParse(t, []string{"state", "dump", "--state-dir=rel//state"}).StateDir)
	_, err := ParseArgs([]string{"state", "dump", "--help"}, noEnv)
	require.ErrorIs(t, err, pflag.ErrHelp)
	requireUsage(t, []string{"state"}, "", CodeUsage)
	requireUsage(t, []string{"state", "show", "--state-dir", "/s"}, "", CodeUsage)
	requireUsage(t, []string{"state", "dump"}, "--state-dir", CodeUsage)
	requireUsage(t, []string{"state", "dump", "--state-dir", ""}, "--state-dir", CodeUsage)
	requireUsage(t, []string{"state", "dump", "--state-dir", "a\x00b"}, "--state-dir", CodeUsage)
	requireUsage(t, []string{"state", "dump", "--state-dir", "/s", "--run-id", "r"}, "", CodeUsage)
	requireUsage(t, []string{"state", "dump", "--state-dir", "/s", "extra"}, "", CodeUsage)
	// "state" anywhere but first is an ordinary stray argument.
	requireUsage(t, listenArgs("state", "dump"), "", CodeUsage)
}
