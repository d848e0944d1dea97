package config

import (
	"errors"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

const testRunID = "3f1c2a9e-5b7d-4c1e-9a2b-8d6e4f0a1b2c"

// identityArgs are the identity flags every durable launch carries.
func identityArgs() []string {
	return []string{
		"--state-dir", "/var/lib/paperclip/state",
		"--runner-id", "runner_1",
		"--environment-lease-id", "lease_env_1",
		"--run-id", testRunID,
		"--session-id", "session_1",
		"--turn-id", "turn_1",
		"--item-id", "item_1",
		"--runner-version", "0.3.0",
		"--runner-digest", "sha256:" + strings.Repeat("ab", 32),
	}
}

func listenArgs(extra ...string) []string {
	args := []string{"--listen-address", "0.0.0.0", "--listen-port", "43127", "--listen-path", listenPathPrefix + testRunID}
	args = append(args, identityArgs()...)
	return append(args, extra...)
}

func dialArgs(url string, extra ...string) []string {
	args := append([]string{"--connect-url", url}, identityArgs()...)
	return append(args, extra...)
}

func noEnv(string) (string, bool) { return "", false }

func mustParse(t *testing.T, args []string) Config {
	t.Helper()
	cfg, err := ParseArgs(args, noEnv)
	require.NoError(t, err, "args %q", args)
	return cfg
}

func requireUsage(t *testing.T, args []string, flag string, code Code) *usageError {
	t.Helper()
	_, err := ParseArgs(args, noEnv)
	require.Error(t, err, "args %q", args)
	var ue *usageError
	require.ErrorAs(t, err, &ue)
	require.ErrorIs(t, err, errUsage)
	require.Equal(t, flag, ue.Flag, "error: %v", err)
	if code != "" {
		require.Equal(t, code, CodeOf(err), "error: %v", err)
	}
	require.Equal(t, ExitUsage, ExitCode(err))
	line := FormatError(err)
	require.Equal(t, 1, strings.Count(line, "\n"), "one line: %q", line)
	require.True(t, strings.HasPrefix(line, StderrPrefix), line)
	return ue
}

// TestServerLaunchArgvParses proves that the exact argv shapes of the
// reference core's launcher (CP/LT spawnRunner) parse: the listen group or
// --connect-url [--ca-bundle-path], the nine identity flags, --fake-harness
// and --fake-harness-script on every launch, outbox sizes, reconnect delay
// 250, then the optional lifetime, grace and lifecycle flags, plus the
// newest core's --max-frame-bytes 4194304.
func TestServerLaunchArgvParses(t *testing.T) {
	common := []string{
		"--state-dir", "/home/daytona/.paperclip/runner-state",
		"--runner-id", "runner-instance-7",
		"--environment-lease-id", "env-lease-7",
		"--run-id", testRunID,
		"--session-id", "normalized-session-7",
		"--turn-id", "turn-7",
		"--item-id", "item-7",
		"--runner-version", "0.3.0",
		"--runner-digest", "sha256:durable-recovery-approved",
		"--fake-harness", "/opt/paperclip/fake-harness",
		"--fake-harness-script", "/opt/paperclip/fake-harness-script.json",
		"--max-outbox-bytes", "16777216",
		"--p0-reserve-bytes", "1048576",
		"--reconnect-delay-ms", "250",
	}
	listen := append([]string{
		"--listen-address", "0.0.0.0",
		"--listen-port", "43127",
		"--listen-path", "/api/runner/v1/connect/" + testRunID,
	}, common...)

	t.Run("listen warm with frame bytes", func(t *testing.T) {
		args := append(append([]string{}, listen...),
			"--max-frame-bytes", "4194304",
			"--max-lifetime-ms", "0",
			"--reconnect-grace-ms", "420000",
			"--lifecycle-mode", "warm",
			"--idle-timeout-ms", "600000")
		cfg := mustParse(t, args)
		require.Equal(t, ModeListen, cfg.Mode)
		require.Equal(t, netip.MustParseAddr("0.0.0.0"), cfg.ListenAddress)
		require.EqualValues(t, 43127, cfg.ListenPort)
		require.Equal(t, "/api/runner/v1/connect/"+testRunID, cfg.ListenPath)
		require.EqualValues(t, 4194304, cfg.MaxFrameBytes)
		require.EqualValues(t, 16777216, cfg.MaxOutboxBytes)
		require.EqualValues(t, 1048576, cfg.P0ReserveBytes)
		require.Equal(t, 250*time.Millisecond, cfg.ReconnectDelay)
		require.True(t, cfg.HasReconnectGrace)
		require.Equal(t, 7*time.Minute, cfg.ReconnectGrace)
		require.Zero(t, cfg.MaxLifetime)
		require.Equal(t, LifecycleWarm, cfg.Lifecycle)
		require.Equal(t, 10*time.Minute, cfg.IdleTimeout)
		require.Equal(t, []string{"--fake-harness", "--fake-harness-script"}, cfg.Ignored)
		require.Empty(t, cfg.Warnings)
		require.Equal(t, prp.Identity{
			RunnerInstanceID: "runner-instance-7", EnvironmentLeaseID: "env-lease-7", RunID: testRunID,
			NormalizedSessionID: "normalized-session-7", TurnID: "turn-7", ItemID: "item-7",
		}, cfg.Identity)
		require.Equal(t, "sha256:durable-recovery-approved", cfg.RunnerDigest)
	})
	t.Run("listen per_turn with runtime", func(t *testing.T) {
		args := append(append([]string{}, listen...), "--max-runtime-ms", "3600000", "--lifecycle-mode", "per_turn")
		cfg := mustParse(t, args)
		require.Equal(t, time.Hour, cfg.MaxLifetime)
		require.Equal(t, LifecyclePerTurn, cfg.Lifecycle)
		require.False(t, cfg.HasReconnectGrace)
	})
	t.Run("dial loopback", func(t *testing.T) {
		args := append([]string{"--connect-url", "ws://127.0.0.1:3100/api/runner/v1/connect/" + testRunID}, common...)
		cfg := mustParse(t, args)
		require.Equal(t, ModeDial, cfg.Mode)
		require.Equal(t, "127.0.0.1", cfg.DialHost)
		require.EqualValues(t, 3100, cfg.DialPort)
	})
	t.Run("dial wss with CA bundle", func(t *testing.T) {
		args := append([]string{"--connect-url", "wss://paperclip.example.com/api/runner/v1/connect/" + testRunID, "--ca-bundle-path", "/etc/paperclip/ca.pem"}, common...)
		args = append(args, "--max-frame-bytes", "4194304")
		cfg := mustParse(t, args)
		require.Equal(t, "/etc/paperclip/ca.pem", cfg.CABundlePath)
		require.EqualValues(t, 443, cfg.DialPort)
	})
	t.Run("huge server durations", func(t *testing.T) {
		// R-bin takes any u64 here; a server that says "very long" must not be refused.
		args := append(append([]string{}, listen...), "--max-runtime-ms", "9007199254740991", "--reconnect-grace-ms", "18446744073709551615",
			"--lifecycle-mode", "warm", "--idle-timeout-ms", "604800000")
		cfg := mustParse(t, args)
		require.Zero(t, cfg.MaxLifetime, "Number.MAX_SAFE_INTEGER ms is unlimited")
		require.Equal(t, maxServerDuration, cfg.ReconnectGrace)
		require.Equal(t, 7*24*time.Hour, cfg.IdleTimeout)
	})
	t.Run("equals syntax", func(t *testing.T) {
		args := []string{"--connect-url=ws://127.0.0.1:1/x", "--max-frame-bytes=4194304"}
		args = append(args, identityArgs()...)
		cfg := mustParse(t, args)
		require.EqualValues(t, 4194304, cfg.MaxFrameBytes)
	})
}

func TestDefaults(t *testing.T) {
	cfg := mustParse(t, listenArgs())
	require.EqualValues(t, defaultMaxOutboxBytes, cfg.MaxOutboxBytes)
	require.EqualValues(t, 64*1024, cfg.MaxOutboxBytes)
	require.EqualValues(t, 32*1024, cfg.P0ReserveBytes)
	require.EqualValues(t, 1<<20, cfg.MaxFrameBytes)
	require.Equal(t, 25*time.Millisecond, cfg.ReconnectDelay)
	require.False(t, cfg.HasReconnectGrace)
	require.Zero(t, cfg.MaxLifetime)
	require.Equal(t, LifecyclePerTurn, cfg.Lifecycle)
	require.Zero(t, cfg.IdleTimeout)
	require.Equal(t, 20*time.Second, cfg.PingInterval)
	require.Equal(t, 45*time.Second, cfg.SilenceTimeout)
	require.Equal(t, LogFormatJSON, cfg.LogFormat)
	require.Equal(t, 30*time.Second, cfg.SessionOpenResumeTimeout)
	require.Equal(t, 30*time.Second, cfg.SessionOpenColdTimeout)
	require.Equal(t, 5*time.Second, cfg.CancelGrace)
	require.Equal(t, time.Second, cfg.WorkspaceWalkTimeout)
	require.Equal(t, 4, cfg.MaxConcurrentColdStarts)
	require.Empty(t, cfg.PcwrapPath)
	require.Empty(t, cfg.DiagnosticsDir)
	require.Empty(t, cfg.Ignored)
	for agent, want := range map[string]time.Duration{"claude": time.Minute, "pi": time.Minute, "opencode": time.Minute, "codex": 30 * time.Second, "gemini": 30 * time.Second, "custom": 30 * time.Second} {
		require.Equal(t, want, cfg.ColdTimeout(agent), agent)
	}
}

func TestOurFlags(t *testing.T) {
	cfg := mustParse(t, listenArgs(
		"--ping-interval-ms", "1000",
		"--silence-timeout-ms", "3000",
		"--log-format", "text",
		"--session-open-resume-timeout-ms", "1500",
		"--session-open-cold-timeout-ms", "2500",
		"--session-open-cold-timeout-agent", "codex=45000",
		"--session-open-cold-timeout-agent", "claude=90000",
		"--cancel-grace-ms", "0",
		"--workspace-baseline-timeout-ms", "250",
		"--max-concurrent-cold-starts", "-1",
		"--pcwrap-path", "/usr/local/bin/pcwrap",
		"--diagnostics-directory", "/tmp/diag",
		"--acpx-sidecar-command", "/opt/acpx",
		"--opencode-executable-sha256", "sha256:00",
	))
	require.Equal(t, time.Second, cfg.PingInterval)
	require.Equal(t, 3*time.Second, cfg.SilenceTimeout)
	require.Equal(t, LogFormatText, cfg.LogFormat)
	require.Equal(t, 1500*time.Millisecond, cfg.SessionOpenResumeTimeout)
	require.Equal(t, 2500*time.Millisecond, cfg.ColdTimeout("gemini"))
	require.Equal(t, 45*time.Second, cfg.ColdTimeout("codex"))
	require.Equal(t, 90*time.Second, cfg.ColdTimeout("claude"))
	require.Equal(t, time.Minute, cfg.ColdTimeout("pi"))
	require.Zero(t, cfg.CancelGrace)
	require.Equal(t, 250*time.Millisecond, cfg.WorkspaceWalkTimeout)
	require.Equal(t, -1, cfg.MaxConcurrentColdStarts)
	require.Equal(t, "/usr/local/bin/pcwrap", cfg.PcwrapPath)
	require.Equal(t, "/tmp/diag", cfg.DiagnosticsDir)
	require.Equal(t, []string{"--acpx-sidecar-command", "--opencode-executable-sha256"}, cfg.Ignored)
}

func TestBuildMetadataMode(t *testing.T) {
	cfg := mustParse(t, []string{"--build-metadata"})
	require.Equal(t, ModeBuildMetadata, cfg.Mode)
	requireUsage(t, []string{"--build-metadata", "--run-id", "x"}, "--build-metadata", CodeUsage)
	requireUsage(t, append([]string{"--build-metadata"}, listenArgs()...), "--build-metadata", CodeUsage)
	requireUsage(t, []string{"--build-metadata=false"}, "--build-metadata", CodeUsage)
	requireUsage(t, []string{"--build-metadata", "--build-metadata"}, "--build-metadata", CodeUsage)
	requireUsage(t, []string{"--build-metadata", "extra"}, "", CodeUsage)
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, append(listenArgs(), "--help")} {
		_, err := ParseArgs(args, noEnv)
		require.ErrorIs(t, err, pflag.ErrHelp, "%q", args)
	}
}

// TestHelpNamesEveryFlag keeps Help in step with the flag set.
func TestHelpNamesEveryFlag(t *testing.T) {
	p := newParser()
	p.fs.VisitAll(func(f *pflag.Flag) {
		name := "--" + f.Name
		// The ignored -sha256 variants appear as "--flag[-sha256]".
		short := strings.TrimSuffix(name, "-sha256")
		require.True(t, strings.Contains(Help, name+" ") || strings.Contains(Help, name+",") ||
			strings.Contains(Help, name+"\n") || strings.Contains(Help, short+"[-sha256]"), "Help does not mention %s", name)
	})
}

func TestUsageErrors(t *testing.T) {
	warm := []string{"--lifecycle-mode", "warm"}
	cases := []struct {
		name string
		args []string
		flag string
		code Code
	}{
		{"no args", nil, "", CodeUsage},
		{"unknown flag", listenArgs("--codex-app-server-proxy"), "", CodeUsage},
		{"unknown shorthand", listenArgs("-x"), "", CodeUsage},
		{"positional", listenArgs("extra"), "", CodeUsage},
		{"after terminator", listenArgs("--", "--run-id"), "", CodeUsage},
		{"both modes", append(listenArgs(), "--connect-url", "ws://127.0.0.1:1/x"), "", CodeUsage},
		{"fake harness without mode", []string{"--fake-harness", "/x", "--fake-harness-script", "/y"}, "--fake-harness", CodeUsage},
		{"acpx without mode", []string{"--acpx-sidecar-script", "/x"}, "--acpx-sidecar-script", CodeUsage},
		{"missing value", append(listenArgs(), "--item-id"), "", CodeUsage},
		{"value is a flag", []string{"--connect-url", "ws://127.0.0.1:1/x", "--run-id", "--state-dir", "/s"}, "--run-id", CodeUsage},
		{"repeated", append(listenArgs(), "--run-id", "other"), "--run-id", CodeUsage},
		{"repeated ignored", append(listenArgs(), "--fake-harness", "a", "--fake-harness", "b"), "--fake-harness", CodeUsage},
		{"missing state dir", []string{"--connect-url", "ws://127.0.0.1:1/x", "--runner-id", "r"}, "--state-dir", CodeUsage},
		{"empty identity", dialArgsWith("--turn-id", ""), "--turn-id", CodeUsage},
		{"control char identity", dialArgsWith("--item-id", "a\nb"), "--item-id", CodeUsage},
		{"long identity", dialArgsWith("--session-id", strings.Repeat("s", maxIdentityBytes+1)), "--session-id", CodeUsage},
		{"frame too small", listenArgs("--max-frame-bytes", "1023"), "--max-frame-bytes", CodeUsage},
		{"frame too big", listenArgs("--max-frame-bytes", "16777217"), "--max-frame-bytes", CodeUsage},
		{"frame hex", listenArgs("--max-frame-bytes", "0x100000"), "--max-frame-bytes", CodeUsage},
		{"frame signed", listenArgs("--max-frame-bytes", "+4096"), "--max-frame-bytes", CodeUsage},
		{"frame negative", listenArgs("--max-frame-bytes", "-4096"), "--max-frame-bytes", CodeUsage},
		{"frame overflow", listenArgs("--max-frame-bytes", "99999999999999999999999"), "--max-frame-bytes", CodeUsage},
		{"reserve not below limit", listenArgs("--max-outbox-bytes", "1000", "--p0-reserve-bytes", "1000"), "--p0-reserve-bytes", CodeUsage},
		{"outbox zero", listenArgs("--max-outbox-bytes", "0"), "--max-outbox-bytes", CodeUsage},
		{"delay too long", listenArgs("--reconnect-delay-ms", "5001"), "--reconnect-delay-ms", CodeUsage},
		{"lifetime beyond u64", listenArgs("--max-lifetime-ms", "18446744073709551616"), "--max-lifetime-ms", CodeUsage},
		{"ping beyond a day", listenArgs("--ping-interval-ms", "86400001", "--silence-timeout-ms", "86400002"), "--ping-interval-ms", CodeUsage},
		{"delay text", listenArgs("--reconnect-delay-ms", "25ms"), "--reconnect-delay-ms", CodeUsage},
		{"lifetime and runtime differ", listenArgs("--max-lifetime-ms", "1", "--max-runtime-ms", "2"), "--max-runtime-ms", CodeUsage},
		{"bad lifecycle", listenArgs("--lifecycle-mode", "forever"), "--lifecycle-mode", CodeUsage},
		{"warm without idle", listenArgs(warm...), "--idle-timeout-ms", CodeUsage},
		{"warm with zero idle", listenArgs(append(warm, "--idle-timeout-ms", "0")...), "--idle-timeout-ms", CodeUsage},
		{"per_turn with idle", listenArgs("--lifecycle-mode", "per_turn", "--idle-timeout-ms", "1000"), "--idle-timeout-ms", CodeUsage},
		{"default lifecycle with idle", listenArgs("--idle-timeout-ms", "1000"), "--idle-timeout-ms", CodeUsage},
		{"bad log format", listenArgs("--log-format", "xml"), "--log-format", CodeUsage},
		{"silence not above ping", listenArgs("--ping-interval-ms", "5000", "--silence-timeout-ms", "5000"), "--silence-timeout-ms", CodeUsage},
		{"zero ping", listenArgs("--ping-interval-ms", "0"), "--ping-interval-ms", CodeUsage},
		{"agent timeout no equals", listenArgs("--session-open-cold-timeout-agent", "claude"), "--session-open-cold-timeout-agent", CodeUsage},
		{"agent timeout bad name", listenArgs("--session-open-cold-timeout-agent", "Claude Code=1"), "--session-open-cold-timeout-agent", CodeUsage},
		{"agent timeout zero", listenArgs("--session-open-cold-timeout-agent", "claude=0"), "--session-open-cold-timeout-agent", CodeUsage},
		{"agent timeout twice", listenArgs("--session-open-cold-timeout-agent", "pi=1", "--session-open-cold-timeout-agent", "pi=2"), "--session-open-cold-timeout-agent", CodeUsage},
		{"cold starts text", listenArgs("--max-concurrent-cold-starts", "four"), "--max-concurrent-cold-starts", CodeUsage},
		{"ca bundle in listen mode", listenArgs("--ca-bundle-path", "/ca.pem"), "--ca-bundle-path", CodeUsage},
		{"ca bundle with ws", dialArgs("ws://127.0.0.1:1/x", "--ca-bundle-path", "/ca.pem"), "--ca-bundle-path", CodeUsage},
		{"listen path missing", append([]string{"--listen-address", "0.0.0.0"}, identityArgs()...), "--listen-path", CodeIngressBindConflict},
		{"listen path other run", append([]string{"--listen-path", listenPathPrefix + "other"}, identityArgs()...), "--listen-path", CodeIngressBindConflict},
		{"listen address hostname", listenArgs("--listen-address", "localhost")[2:], "--listen-address", CodeIngressBindConflict},
		{"listen port too big", append([]string{"--listen-port", "65536", "--listen-path", listenPathPrefix + testRunID}, identityArgs()...), "--listen-port", CodeUsage},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireUsage(t, tc.args, tc.flag, tc.code)
		})
	}
}

func dialArgsWith(flag, value string) []string {
	args := dialArgs("ws://127.0.0.1:1/x")
	for i := range args {
		if args[i] == flag {
			args[i+1] = value
		}
	}
	return args
}

// TestPRP03_ListenerPath ports prp.md scenario 3: /api/runner/v1/connect/run_1
// is valid; an empty id, an extra segment, a query and % encoding are not.
// Invalid paths are runner_ingress_bind_conflict usage errors (prp.md §1.2).
func TestPRP03_ListenerPath(t *testing.T) {
	require.NoError(t, validateListenPath("/api/runner/v1/connect/run_1", "run_1"))
	mustParse(t, withRun("run_1", "--listen-path", "/api/runner/v1/connect/run_1"))

	bad := []struct{ path, runID string }{
		{"/api/runner/v1/connect/", ""},
		{"/api/runner/v1/connect/run_1/extra", "run_1/extra"},
		{"/api/runner/v1/connect/run_1/extra", "run_1"},
		{"/api/runner/v1/connect/run_1?x=1", "run_1?x=1"},
		{"/api/runner/v1/connect/run_1?x=1", "run_1"},
		{"/api/runner/v1/connect/run%5F1", "run%5F1"},
		{"/api/runner/v1/connect/run_1#f", "run_1#f"},
		{"/api/runner/v1/connect/run\\1", "run\\1"},
		{"/api/runner/v1/connect/run 1", "run 1"},
		{"/api/runner/v1/connect/run\x7f1", "run\x7f1"},
		{"/api/runner/v1/connect/run_2", "run_1"},
		{"/api/runner/v1/connect//run_1", "run_1"},
		{"/api/runner/v2/connect/run_1", "run_1"},
	}
	for _, b := range bad {
		require.Error(t, validateListenPath(b.path, b.runID), "path %q run %q", b.path, b.runID)
		if b.runID == "" {
			continue // --run-id "" fails as an empty identity first
		}
		args := withRun(b.runID, "--listen-path", b.path)
		_, err := ParseArgs(args, noEnv)
		require.Error(t, err, "path %q run %q", b.path, b.runID)
		if !strings.ContainsAny(b.runID, "\x7f") {
			require.ErrorIs(t, err, errIngressBindConflict, "path %q run %q: %v", b.path, b.runID, err)
			require.Contains(t, FormatError(err), "paperclip-runnerd: runner_ingress_bind_conflict: --listen-path: ")
		}
	}
}

func withRun(runID string, extra ...string) []string {
	args := identityArgs()
	for i := range args {
		if args[i] == "--run-id" {
			args[i+1] = runID
		}
	}
	return append(args, extra...)
}

// TestPRP46_NonDefaultListenerAccepted ports the configuration half of
// prp.md scenario 46: --listen-port 0 or --listen-address 127.0.0.1 is
// accepted with a warning for the runner to log. (The HTTP 400 for a wrong
// path belongs to the listener's tests.)
func TestPRP46_NonDefaultListenerAccepted(t *testing.T) {
	for _, extra := range [][]string{
		{"--listen-port", "0"},
		{"--listen-address", "127.0.0.1"},
		{"--listen-address", "::1", "--listen-port", "8080"},
	} {
		args := append([]string{"--listen-path", listenPathPrefix + testRunID}, identityArgs()...)
		cfg := mustParse(t, append(args, extra...))
		require.Equal(t, ModeListen, cfg.Mode)
		require.Len(t, cfg.Warnings, 1, "%q", extra)
		require.Contains(t, cfg.Warnings[0], "instead of 0.0.0.0:43127")
	}
	// Listen mode with only --listen-path uses the defaults, no warning.
	cfg := mustParse(t, append([]string{"--listen-path", listenPathPrefix + testRunID}, identityArgs()...))
	require.Equal(t, "0.0.0.0", cfg.ListenAddress.String())
	require.EqualValues(t, 43127, cfg.ListenPort)
	require.Empty(t, cfg.Warnings)
}

// TestPRP01_DialURLSyntax ports the syntactic half of prp.md scenario 1:
// userinfo, query and https:// are rejected; wss://host/path resolves to port
// 443. Refusing ws:// to a non-loopback address needs DNS and belongs to the
// dialer (prp.md §1.3).
func TestPRP01_DialURLSyntax(t *testing.T) {
	good := map[string]struct {
		host string
		port uint16
	}{
		"wss://host/path":                       {"host", 443},
		"wss://host.example:8443/api/x":         {"host.example", 8443},
		"ws://127.0.0.1/api":                    {"127.0.0.1", 80},
		"ws://[::1]:3100/api/runner/v1/connect": {"::1", 3100},
		"ws://localhost:3100":                   {"localhost", 3100},
	}
	for raw, want := range good {
		cfg := mustParse(t, dialArgs(raw))
		require.Equal(t, want.host, cfg.DialHost, raw)
		require.Equal(t, want.port, cfg.DialPort, raw)
		require.Equal(t, raw, cfg.ConnectURL.String(), raw)
	}
	bad := []string{
		"https://host/path",
		"http://127.0.0.1/x",
		"WS://127.0.0.1/x",
		"ws://user:pass@127.0.0.1/x",
		"wss://user@host/x",
		"wss://host/path?ticket=1",
		"wss://host/path#frag",
		"wss://host/pa th",
		"wss://host/pa\\th",
		"wss://ho%73t/path",
		"wss://host:0/path",
		"wss://host:99999/path",
		"wss://host:/path",
		"wss:///path",
		"ws://::1/x",
		"wss://host/\x01",
		"",
		"ws://10.1.2.3/api/runner/v1/connect/x", // ws:// is loopback-only
		"ws://[2001:db8::1]:3100/x",
		"ws://0.0.0.0:3100/x",
	}
	for _, raw := range bad {
		_, err := ParseArgs(dialArgs(raw), noEnv)
		var ue *usageError
		require.ErrorAs(t, err, &ue, raw)
		require.Equal(t, "--connect-url", ue.Flag, raw)
		require.Equal(t, CodeConnectURLInvalid, CodeOf(err), raw)
		require.Equal(t, ExitFailure, ExitCode(err), "%s: the reference exits 1", raw)
		require.True(t, strings.HasPrefix(FormatError(err), StderrPrefix+"connect_url_invalid: --connect-url: "), raw)
	}
}

// All missing identity flags are named in one error, so one run shows
// everything a launch lacks.
func TestMissingIdentityFlagsInOneError(t *testing.T) {
	ue := requireUsage(t, []string{"--connect-url", "ws://127.0.0.1:1/x", "--runner-id", "r", "--turn-id", "t"}, "--state-dir", CodeUsage)
	require.Equal(t, "required; so are --environment-lease-id, --run-id, --session-id, --item-id, --runner-version, --runner-digest", ue.Problem)
}

func TestParseArgsRefusesWhileTicketInEnvironment(t *testing.T) {
	env := func(k string) (string, bool) {
		if k == BootstrapTicketEnv {
			return "secret-ticket", true
		}
		return "", false
	}
	_, err := ParseArgs(listenArgs(), env)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "secret-ticket")
	require.Equal(t, ExitUsage, ExitCode(err))
}

// FuzzParseArgs feeds arbitrary argument vectors (NUL-separated) to
// ParseArgs: it must never panic, every error must be a usage error (or
// help) that formats as one line, and every accepted Config must keep the
// documented invariants.
func FuzzParseArgs(f *testing.F) {
	f.Add(strings.Join(listenArgs(), "\x00"))
	f.Add(strings.Join(dialArgs("wss://host/path", "--ca-bundle-path", "/ca"), "\x00"))
	f.Add(strings.Join(listenArgs("--lifecycle-mode", "warm", "--idle-timeout-ms", "5"), "\x00"))
	f.Add(strings.Join(listenArgs("--session-open-cold-timeout-agent", "x=1", "--max-concurrent-cold-starts", "-3"), "\x00"))
	f.Add("--build-metadata")
	f.Add("--help")
	f.Add("--fake-harness\x00x")
	f.Add("--connect-url=ws://[::1]:0/\x00--run-id\x00--")
	f.Add(strings.Join(listenArgs("--log-level", "debug"), "\x00"))
	f.Add(strings.Join(dialArgs("ws://127.0.0.1:1/x", "--log-level=verbose"), "\x00"))
	f.Add(strings.Join(append([]string{"--listen-path", listenPathPrefix + "r", "--state-dir", "rel"}, identityArgs()[2:]...), "\x00"))
	f.Add("storage\x00inspect-state\x00--path\x00/s/runner-state.json")
	f.Add("storage")
	f.Add("state\x00dump\x00--state-dir\x00/s")
	f.Add(strings.Join(append([]string{"--indexed-state"}, listenArgs()...), "\x00"))
	f.Fuzz(func(t *testing.T, joined string) {
		var args []string
		if joined != "" {
			args = strings.Split(joined, "\x00")
		}
		cfg, err := ParseArgs(args, noEnv)
		if err != nil {
			if errors.Is(err, pflag.ErrHelp) {
				return
			}
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("error is not a *UsageError: %T %v", err, err)
			}
			line := FormatError(err)
			if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") || len(line) > maxErrorLineBytes {
				t.Fatalf("not one bounded line: %q", line)
			}
			return
		}
		switch cfg.Mode {
		case ModeBuildMetadata:
			return
		case ModeStorage:
			if checkStorageOperation(cfg.StorageOperation) != nil || len(args) < 2 || args[0] != StorageCommand {
				t.Fatalf("storage operation %q from %q", cfg.StorageOperation, args)
			}
			if line := FormatError(StorageUnsupported(cfg.StorageOperation)); line != StderrPrefix+"storage_unsupported: "+cfg.StorageOperation+"\n" {
				t.Fatalf("storage line %q", line)
			}
			return
		case ModeStateDump:
			if len(args) < 2 || args[0] != StateCommand || args[1] != StateDumpOperation ||
				cfg.StateDir == "" || cfg.StateDir != filepath.Clean(cfg.StateDir) || strings.ContainsRune(cfg.StateDir, 0) {
				t.Fatalf("state dump of %q from %q", cfg.StateDir, args)
			}
			return
		}
		if !filepath.IsAbs(cfg.StateDir) {
			t.Fatalf("accepted a relative --state-dir %q", cfg.StateDir)
		}
		if cfg.LogLevel < slog.LevelDebug || cfg.LogLevel > slog.LevelError {
			t.Fatalf("log level %v", cfg.LogLevel)
		}
		switch cfg.Mode {
		case ModeListen:
			if cfg.ListenPath != listenPathPrefix+cfg.Identity.RunID || validateRunIDSegment(cfg.Identity.RunID) != nil {
				t.Fatalf("listen path %q for run %q", cfg.ListenPath, cfg.Identity.RunID)
			}
		case ModeDial:
			if cfg.ConnectURL == nil || cfg.DialPort == 0 || cfg.DialHost == "" ||
				(cfg.ConnectURL.Scheme != "ws" && cfg.ConnectURL.Scheme != "wss") ||
				cfg.ConnectURL.User != nil || cfg.ConnectURL.RawQuery != "" || cfg.ConnectURL.Fragment != "" {
				t.Fatalf("bad dial target %+v", cfg.ConnectURL)
			}
			if cfg.CABundlePath != "" && cfg.ConnectURL.Scheme != "wss" {
				t.Fatal("CA bundle without wss")
			}
		default:
			t.Fatalf("mode %v", cfg.Mode)
		}
		if cfg.MaxFrameBytes < minMaxFrameBytes || cfg.MaxFrameBytes > maxMaxFrameBytes {
			t.Fatalf("frame bytes %d", cfg.MaxFrameBytes)
		}
		if cfg.P0ReserveBytes >= cfg.MaxOutboxBytes || cfg.P0ReserveBytes < 0 {
			t.Fatalf("reserve %d limit %d", cfg.P0ReserveBytes, cfg.MaxOutboxBytes)
		}
		if cfg.SilenceTimeout <= cfg.PingInterval || cfg.PingInterval <= 0 {
			t.Fatalf("ping %v silence %v", cfg.PingInterval, cfg.SilenceTimeout)
		}
		if (cfg.Lifecycle == LifecycleWarm) != (cfg.IdleTimeout > 0) {
			t.Fatalf("lifecycle %s idle %v", cfg.Lifecycle, cfg.IdleTimeout)
		}
		for _, id := range []string{cfg.StateDir, cfg.Identity.RunnerInstanceID, cfg.Identity.EnvironmentLeaseID, cfg.Identity.RunID,
			cfg.Identity.NormalizedSessionID, cfg.Identity.TurnID, cfg.Identity.ItemID, cfg.RunnerVersion, cfg.RunnerDigest} {
			if id == "" {
				t.Fatal("empty identity value accepted")
			}
		}
	})
}

// BenchmarkParseArgsServerArgv measures parsing the reference core's full
// listen-mode launch argv (runs once per runner start; printed, not asserted).
func BenchmarkParseArgsServerArgv(b *testing.B) {
	args := listenArgs("--fake-harness", "/x", "--fake-harness-script", "/y", "--max-outbox-bytes", "16777216",
		"--p0-reserve-bytes", "1048576", "--reconnect-delay-ms", "250", "--max-frame-bytes", "4194304",
		"--max-lifetime-ms", "0", "--reconnect-grace-ms", "420000", "--lifecycle-mode", "warm", "--idle-timeout-ms", "600000")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseArgs(args, noEnv); err != nil {
			b.Fatal(err)
		}
	}
}
