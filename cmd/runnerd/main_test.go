package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit))
}

// runTimeout bounds every run of the binary; none should take a second.
const runTimeout = 20 * time.Second

const secretTicket = "bt_SECRET-ticket-0123456789abcdef"

const runID = "3f1c2a9e-5b7d-4c1e-9a2b-8d6e4f0a1b2c"

type result struct {
	code           int
	stdout, stderr string
}

// runBin runs bin with args and exactly env (plus PATH).
func runBin(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "run %s: %v", bin, err)
		code = ee.ExitCode()
	}
	return result{code, stdout.String(), stderr.String()}
}

// serverLaunchArgv is the argv the reference core's launcher (CP/LT
// spawnRunner) builds for a listen-mode warm run, with the newest core's
// --max-frame-bytes 4194304.
func serverLaunchArgv(stateDir string) []string {
	return []string{
		"--listen-address", "0.0.0.0",
		"--listen-port", "43127",
		"--listen-path", "/api/runner/v1/connect/" + runID,
		"--state-dir", stateDir,
		"--runner-id", "runner-instance-1",
		"--environment-lease-id", "env-lease-1",
		"--run-id", runID,
		"--session-id", "normalized-session-1",
		"--turn-id", "turn-1",
		"--item-id", "item-1",
		"--runner-version", "0.3.0",
		"--runner-digest", "sha256:approved",
		"--fake-harness", "/opt/paperclip/fake-harness",
		"--fake-harness-script", "/opt/paperclip/fake-harness-script.json",
		"--max-outbox-bytes", "16777216",
		"--p0-reserve-bytes", "1048576",
		"--reconnect-delay-ms", "250",
		"--max-frame-bytes", "4194304",
		"--max-lifetime-ms", "0",
		"--reconnect-grace-ms", "420000",
		"--lifecycle-mode", "warm",
		"--idle-timeout-ms", "600000",
	}
}

func TestBuildMetadata(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	r := runBin(t, bin, nil, "--build-metadata")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Empty(t, r.stderr)
	require.Equal(t, 1, strings.Count(r.stdout, "\n"))

	var m struct {
		Schema                     string   `json:"schema"`
		BinaryName                 string   `json:"binaryName"`
		PackageName                string   `json:"packageName"`
		PackageVersion             string   `json:"packageVersion"`
		BinaryContractVersion      int      `json:"binaryContractVersion"`
		NativeExecutionVersion     int      `json:"nativeExecutionVersion"`
		HarnessDriverVersion       int      `json:"harnessDriverVersion"`
		PRPTransportModes          []string `json:"prpTransportModes"`
		DurableSessionCapabilities []string `json:"durableSessionCapabilities"`
		PRP                        struct {
			Name           string `json:"name"`
			MinimumVersion int    `json:"minimumVersion"`
			MaximumVersion int    `json:"maximumVersion"`
		} `json:"prp"`
	}
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	require.Contains(t, raw, "capabilities")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m))
	require.Equal(t, "paperclip-runner/runnerd-build-metadata/v1", m.Schema)
	require.Equal(t, "paperclip-runnerd", m.BinaryName)
	require.Equal(t, "@paperclipai/paperclip-runner", m.PackageName)
	require.NotEmpty(t, m.PackageVersion)
	require.Equal(t, 2, m.BinaryContractVersion)
	require.Equal(t, 1, m.NativeExecutionVersion)
	require.Equal(t, 1, m.HarnessDriverVersion)
	require.Equal(t, "paperclip.runner", m.PRP.Name)
	require.Equal(t, 1, m.PRP.MinimumVersion)
	require.Equal(t, 2, m.PRP.MaximumVersion)
	require.Equal(t, []string{"dial_ws_loopback", "dial_wss", "listen_ws"}, m.PRPTransportModes)
	require.Subset(t, m.DurableSessionCapabilities, []string{"unlimited_runtime", "connection_lease_renewal"})

	// A broken ticket must not stop the server's metadata probe.
	r = runBin(t, bin, []string{config.BootstrapTicketEnv + "="}, "--build-metadata")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
}

func TestHelp(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	for _, arg := range []string{"--help", "-h"} {
		r := runBin(t, bin, nil, arg)
		require.Equal(t, 0, r.code)
		require.Empty(t, r.stderr)
		for _, want := range []string{"MODES", "--connect-url", "--listen-path", "PAPERCLIP_RUNNER_BOOTSTRAP_TICKET", "EXIT STATUS", "--fake-harness"} {
			require.Contains(t, r.stdout, want)
		}
	}
}

func TestUsageErrorsExit2WithOneLine(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	state := t.TempDir()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no arguments", nil, "paperclip-runnerd: usage: no mode"},
		{"unknown flag", append(serverLaunchArgv(state), "--no-such-flag"), "paperclip-runnerd: usage: unknown flag: --no-such-flag"},
		{"fake harness alone", []string{"--fake-harness", "/x", "--fake-harness-script", "/y"}, "paperclip-runnerd: usage: --fake-harness: "},
		{"repeated flag", append(serverLaunchArgv(state), "--max-frame-bytes", "1048576"), "paperclip-runnerd: usage: --max-frame-bytes: given more than once"},
		{"frame bytes out of range", replace(serverLaunchArgv(state), "4194304", "16777217"), `paperclip-runnerd: usage: --max-frame-bytes: invalid value "16777217": must be between 1024 and 16777216`},
		{"warm without idle", serverLaunchArgv(state)[:len(serverLaunchArgv(state))-2], "paperclip-runnerd: usage: --idle-timeout-ms: required with --lifecycle-mode warm"},
		{"listen path for another run", replace(serverLaunchArgv(state), "/api/runner/v1/connect/"+runID, "/api/runner/v1/connect/other"), "paperclip-runnerd: runner_ingress_bind_conflict: --listen-path: "},
		{"metadata plus more", []string{"--build-metadata", "--run-id", "x"}, "paperclip-runnerd: usage: --build-metadata: must be the only argument"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runBin(t, bin, []string{config.BootstrapTicketEnv + "=" + secretTicket}, tc.args...)
			require.Equal(t, config.ExitUsage, r.code, "stderr: %s", r.stderr)
			require.Empty(t, r.stdout)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
			require.True(t, strings.HasPrefix(r.stderr, tc.want), "stderr %q does not start with %q", r.stderr, tc.want)
			require.NotContains(t, r.stderr, secretTicket)
		})
	}
}

// TestServerLaunchArgvAccepted: the reference core's exact launch argv
// parses with nothing refused (only the fake-harness flags ignored), and the
// binary runs it into listen mode: with only the address and port swapped
// for loopback and a port the kernel picks (the fixed 0.0.0.0:43127 would
// collide between runs), runnerd logs "listening", and SIGTERM then ends it
// with status 0, an orderly stop (prp.md §13).
func TestServerLaunchArgvAccepted(t *testing.T) {
	cfg, err := config.ParseArgs(serverLaunchArgv(t.TempDir()), func(string) (string, bool) { return "", false })
	require.NoError(t, err, "the exact argv")
	require.Equal(t, config.ModeListen, cfg.Mode)
	require.Equal(t, []string{"--fake-harness", "--fake-harness-script"}, cfg.Ignored)
	require.Empty(t, cfg.Warnings, "the reference address and port draw no warning")

	bin := testbin.Path(t, "runnerd")
	args := replace(replace(serverLaunchArgv(t.TempDir()), "0.0.0.0", "127.0.0.1"), "43127", "0")
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), config.BootstrapTicketEnv + "=" + secretTicket}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	listening := make(chan string, 1)
	var stderr strings.Builder
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			var rec struct {
				Msg     string `json:"msg"`
				Address string `json:"address"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
				listening <- rec.Address
			}
		}
	}()
	select {
	case addr := <-listening:
		ap, err := netip.ParseAddrPort(addr)
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1", ap.Addr().String())
		require.NotZero(t, ap.Port())
	case <-scanned:
		_ = cmd.Wait()
		t.Fatalf("runnerd exited without listening: %s", stderr.String())
	case <-time.After(runTimeout):
		_ = cmd.Process.Kill()
		<-scanned
		_ = cmd.Wait()
		t.Fatalf("runnerd did not listen in time: %s", stderr.String())
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	exited := make(chan error, 1)
	go func() {
		<-scanned // stderr is read to its end before Wait closes the pipe
		exited <- cmd.Wait()
	}()
	select {
	case err := <-exited:
		require.NoError(t, err, "SIGTERM is an orderly stop: status 0; stderr: %s", stderr.String())
	case <-time.After(runTimeout):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatal("runnerd did not stop on SIGTERM in time")
	}
	out := stderr.String()
	require.NotContains(t, out, "paperclip-runnerd: usage:")
	require.NotContains(t, out+stdout.String(), secretTicket)
	// The logger is JSON on stderr and says which flags it ignored.
	require.Contains(t, out, `"flags":["--fake-harness","--fake-harness-script"]`)

	// The same argv without a ticket is refused before anything starts,
	// with the reference's status, 1.
	r := runBin(t, bin, nil, serverLaunchArgv(t.TempDir())...)
	require.Equal(t, config.ExitFailure, r.code)
	require.Equal(t, "paperclip-runnerd: bootstrap_ticket_missing: PAPERCLIP_RUNNER_BOOTSTRAP_TICKET is required in dial and listen mode\n", r.stderr)

	r = runBin(t, bin, []string{config.BootstrapTicketEnv + "=  "}, serverLaunchArgv(t.TempDir())...)
	require.Equal(t, config.ExitFailure, r.code)
	require.True(t, strings.HasPrefix(r.stderr, "paperclip-runnerd: bootstrap_ticket_invalid: "), r.stderr)
}

// A ws:// --connect-url to an address that is not loopback is refused
// before any state exists: exit 1 (the reference's status), one
// connect_url_invalid line, and no runner-state.json for a later start to
// "recover".
func TestNonLoopbackWSRefusedBeforeState(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	stateDir := filepath.Join(t.TempDir(), "state")
	args := append([]string{"--connect-url", "ws://10.1.2.3/api/runner/v1/connect/" + runID}, serverLaunchArgv(stateDir)[6:]...)
	r := runBin(t, bin, []string{config.BootstrapTicketEnv + "=" + secretTicket}, args...)
	require.Equal(t, config.ExitFailure, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stderr, "paperclip-runnerd: connect_url_invalid: --connect-url: ws:// is only for loopback"), r.stderr)
	require.NoDirExists(t, stateDir)
}

// TestTicketNeverReachesChildren uses the test-hook build: runnerd starts a
// shell child the ordinary way, which prints its own /proc/self/environ and
// runnerd's /proc/<pid>/environ. The ticket appears in neither, while other
// variables pass through untouched.
func TestTicketNeverReachesChildren(t *testing.T) {
	bin := testbin.Path(t, "runnerd", testbin.HooksTag)
	env := []string{config.BootstrapTicketEnv + "=" + secretTicket, "PCRUNNER_TESTHOOK_EXEC=1", "OTHER_VAR=kept"}
	r := runBin(t, bin, env, serverLaunchArgv(t.TempDir())...)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	child, parent, ok := strings.Cut(r.stdout, "\n--runnerd--\n")
	require.True(t, ok, "hook output: %q", r.stdout)
	require.Contains(t, child, "OTHER_VAR=kept")
	require.Contains(t, parent, "OTHER_VAR=kept")
	require.NotContains(t, child, config.BootstrapTicketEnv, "child inherited the ticket variable")
	require.NotContains(t, r.stdout+r.stderr, secretTicket)
}

func replace(args []string, old, new string) []string {
	out := append([]string(nil), args...)
	for i := range out {
		if out[i] == old {
			out[i] = new
		}
	}
	return out
}

// TestDiagnosticsDirectory: with --diagnostics-directory, runnerd's raw
// stdout and stderr stay empty; its logs and final error line go to the
// bounded, redacted runnerd.stderr.log there (prp.md §13), which holds
// neither the ticket nor a credential from the environment.
func TestDiagnosticsDirectory(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	const apiKey = "sk-ant-api03-SECRETSECRETSECRET0123456789"
	diag := filepath.Join(t.TempDir(), "diagnostics")
	args := []string{
		"--connect-url", "ws://127.0.0.1:1/api/runner/v1/connect/" + runID, // nothing listens: reconnect until the lifetime ends
		"--state-dir", filepath.Join(t.TempDir(), "state"),
		"--runner-id", "runner-instance-1", "--environment-lease-id", "env-lease-1",
		"--run-id", runID, "--session-id", "normalized-session-1", "--turn-id", "turn-1", "--item-id", "item-1",
		"--runner-version", "0.3.0", "--runner-digest", "sha256:approved",
		"--max-lifetime-ms", "300", "--diagnostics-directory", diag,
	}
	env := []string{config.BootstrapTicketEnv + "=" + secretTicket, "ANTHROPIC_API_KEY=" + apiKey}
	r := runBin(t, bin, env, args...)
	require.Equal(t, config.ExitFailure, r.code)
	require.Empty(t, r.stdout)
	require.Empty(t, r.stderr, "raw output is discarded")

	errLog, err := os.ReadFile(filepath.Join(diag, config.DiagnosticsStderrName))
	require.NoError(t, err)
	require.Contains(t, string(errLog), "paperclip-runnerd: transport_reconnect_deadline_exceeded")
	require.Contains(t, string(errLog), `"level":"INFO"`, "the logs are there too")
	outLog, err := os.ReadFile(filepath.Join(diag, config.DiagnosticsStdoutName))
	require.NoError(t, err)
	for _, secret := range []string{secretTicket, apiKey} {
		require.NotContains(t, string(errLog)+string(outLog), secret)
	}
	fi, err := os.Stat(diag)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())

	// A symlinked directory is refused before anything runs, on the raw stderr.
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(diag, link))
	r = runBin(t, bin, env, replace(args, diag, link)...)
	require.Equal(t, config.ExitFailure, r.code)
	require.Contains(t, r.stderr, "paperclip-runnerd: runner_failed: open --diagnostics-directory")
}

// deadDialArgs is a dial-mode command line whose server is not there:
// runnerd reconnects until its short lifetime ends, then exits 1 with
// transport_reconnect_deadline_exceeded.
func deadDialArgs(t *testing.T, extra ...string) []string {
	t.Helper()
	return append([]string{
		"--connect-url", "ws://127.0.0.1:1/api/runner/v1/connect/" + runID,
		"--state-dir", filepath.Join(t.TempDir(), "state"),
		"--runner-id", "runner-instance-1", "--environment-lease-id", "env-lease-1",
		"--run-id", runID, "--session-id", "normalized-session-1", "--turn-id", "turn-1", "--item-id", "item-1",
		"--runner-version", "0.3.0", "--runner-digest", "sha256:approved",
		"--max-lifetime-ms", "300",
	}, extra...)
}

// logLines decodes runnerd's JSON log lines on stderr, each as its keys in
// order (duplicates kept) and as a map; the final error line is skipped.
func logLines(t *testing.T, stderr string) (keys [][]string, recs []map[string]any) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.HasPrefix(line, config.StderrPrefix) {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(line))
		tok, err := dec.Token()
		require.NoError(t, err, line)
		require.Equal(t, json.Delim('{'), tok, line)
		var ks []string
		for dec.More() {
			k, err := dec.Token()
			require.NoError(t, err, line)
			ks = append(ks, k.(string))
			var skip json.RawMessage
			require.NoError(t, dec.Decode(&skip), line)
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		keys, recs = append(keys, ks), append(recs, m)
	}
	return keys, recs
}

// TestLogLinesHaveOneComponentKey: every JSON log line carries the key
// "component" once; a line from a package below runnerd names both
// ("runnerd.state", "runnerd.prp.client").
func TestLogLinesHaveOneComponentKey(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	r := runBin(t, bin, []string{config.BootstrapTicketEnv + "=" + secretTicket}, deadDialArgs(t)...)
	require.Equal(t, config.ExitFailure, r.code, "stderr: %s", r.stderr)
	keys, recs := logLines(t, r.stderr)
	require.NotEmpty(t, recs)
	components := map[string]bool{}
	for i, ks := range keys {
		n := 0
		for _, k := range ks {
			if k == "component" {
				n++
			}
		}
		require.Equal(t, 1, n, "line %d keys %q", i, ks)
		components[recs[i]["component"].(string)] = true
	}
	require.True(t, components["runnerd.state"], "components: %v", components)
	require.True(t, components["runnerd.prp.client"], "components: %v", components)
}

// TestLogLevel: --log-level warn drops runnerd's INFO lines and keeps its
// warnings; debug keeps INFO; a bad level is a usage error (exit 2, one
// line) before anything starts.
func TestLogLevel(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	env := []string{config.BootstrapTicketEnv + "=" + secretTicket}
	levels := func(stderr string) map[string]int {
		_, recs := logLines(t, stderr)
		n := map[string]int{}
		for _, rec := range recs {
			n[rec["level"].(string)]++
		}
		return n
	}
	r := runBin(t, bin, env, deadDialArgs(t, "--log-level", "warn")...)
	require.Equal(t, config.ExitFailure, r.code, "stderr: %s", r.stderr)
	n := levels(r.stderr)
	require.Zero(t, n["INFO"], "stderr: %s", r.stderr)
	require.NotZero(t, n["WARN"], "stderr: %s", r.stderr)
	require.Contains(t, r.stderr, "paperclip-runnerd: transport_reconnect_deadline_exceeded", "the error line is not a log line")

	r = runBin(t, bin, env, deadDialArgs(t, "--log-level", "debug")...)
	require.Equal(t, config.ExitFailure, r.code, "stderr: %s", r.stderr)
	require.NotZero(t, levels(r.stderr)["INFO"], "stderr: %s", r.stderr)

	r = runBin(t, bin, env, deadDialArgs(t, "--log-level", "verbose")...)
	require.Equal(t, config.ExitUsage, r.code, "stderr: %s", r.stderr)
	require.Equal(t, "paperclip-runnerd: usage: --log-level: must be debug, info, warn or error, got \"verbose\"\n", r.stderr)
}

// TestListenIdleWithoutConnectionExits0: a warm listen-mode runnerd that
// no server ever dials exits 0 at --idle-timeout-ms (bounded by runTimeout;
// before, it ran until killed).
func TestListenIdleWithoutConnectionExits0(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	args := replace(replace(replace(serverLaunchArgv(t.TempDir()), "0.0.0.0", "127.0.0.1"), "43127", "0"), "600000", "200")
	r := runBin(t, bin, []string{config.BootstrapTicketEnv + "=" + secretTicket}, args...)
	require.Equal(t, config.ExitOK, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stderr, "no server has connected")
	require.NotContains(t, r.stderr, config.StderrPrefix, "no error line")
}

// TestDiagnosticsKeepCrashedLife: after a failed life, the next start
// keeps its runnerd.stderr.log as runnerd.stderr.log.1, error line
// included, and writes its own to a fresh runnerd.stderr.log.
func TestDiagnosticsKeepCrashedLife(t *testing.T) {
	bin := testbin.Path(t, "runnerd")
	diag := filepath.Join(t.TempDir(), "diagnostics")
	env := []string{config.BootstrapTicketEnv + "=" + secretTicket}
	r := runBin(t, bin, env, deadDialArgs(t, "--diagnostics-directory", diag)...)
	require.Equal(t, config.ExitFailure, r.code)
	first, err := os.ReadFile(filepath.Join(diag, config.DiagnosticsStderrName))
	require.NoError(t, err)
	require.Contains(t, string(first), "paperclip-runnerd: transport_reconnect_deadline_exceeded")

	r = runBin(t, bin, env, deadDialArgs(t, "--diagnostics-directory", diag, "--log-level", "error")...)
	require.Equal(t, config.ExitFailure, r.code)
	kept, err := os.ReadFile(filepath.Join(diag, config.DiagnosticsStderrName+config.DiagnosticsPreviousSuffix))
	require.NoError(t, err)
	require.Equal(t, string(first), string(kept))
	second, err := os.ReadFile(filepath.Join(diag, config.DiagnosticsStderrName))
	require.NoError(t, err)
	require.NotEqual(t, string(first), string(second))
	fi, err := os.Stat(filepath.Join(diag, config.DiagnosticsStderrName+config.DiagnosticsPreviousSuffix))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}
