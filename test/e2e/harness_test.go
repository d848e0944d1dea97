// Package e2e holds black-box suites over the built runnerd and prpctl
// binaries: a real control.Core (the far side of the protocol) on loopback,
// real processes, real state directories.
package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit))
}

// waitBound bounds every single wait in these tests.
const waitBound = 20 * time.Second

var identity = prp.Identity{
	RunnerInstanceID: "runner_e2e", EnvironmentLeaseID: "env_e2e", RunID: "run_e2e",
	NormalizedSessionID: "session_e2e", TurnID: "turn_e2e", ItemID: "item_e2e",
}

const (
	runnerVersion = "0.0.0-e2e"
	runnerDigest  = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
)

// coreServer is prptest's core serving the dial route on loopback: runnerd
// is another process, outside any synctest bubble.
type coreServer struct {
	core *prptest.Core
	url  string
}

func newCoreServer(t testing.TB) *coreServer { return newCoreServerWith(t, nil) }

// newCoreServerWith is newCoreServer with tweak applied to the core's
// configuration (a lowered frame bound, an indexed core).
func newCoreServerWith(t testing.TB, tweak func(*control.Config)) *coreServer {
	cfg := control.Config{Identity: identity, RunnerVersion: runnerVersion, RunnerDigest: runnerDigest}
	if tweak != nil {
		tweak(&cfg)
	}
	core := prptest.NewCore(t, cfg)
	core.WaitBound = waitBound
	return &coreServer{core: core, url: core.ServeLoopback()}
}

func (c *coreServer) connectURL() string { return c.url }

// runnerdArgs is a dial-mode command line for stateDir.
func runnerdArgs(stateDir string, mode ...string) []string {
	if !slices.Contains(mode, "--lifecycle-mode") {
		// The rigs drive several commands and turns per runnerd: warm, idle
		// for longer than any test (a per-turn runnerd exits after its turn,
		// prp.md §7.4; lifecycle_test.go covers that).
		mode = append([]string{"--lifecycle-mode", "warm", "--idle-timeout-ms", "600000"}, mode...)
	}
	return append([]string{
		"--state-dir", stateDir,
		"--runner-id", identity.RunnerInstanceID, "--environment-lease-id", identity.EnvironmentLeaseID,
		"--run-id", identity.RunID, "--session-id", identity.NormalizedSessionID,
		"--turn-id", identity.TurnID, "--item-id", identity.ItemID,
		"--runner-version", runnerVersion, "--runner-digest", runnerDigest,
		"--reconnect-delay-ms", "5",
	}, mode...)
}

// startRunnerd launches runnerd with a fresh ticket and env in its
// environment.
func (c *coreServer) startRunnerd(t testing.TB, bin string, args []string, env ...string) *exec.Cmd {
	t.Helper()
	ticket, err := c.core.MintTicket()
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), env...), "PAPERCLIP_RUNNER_BOOTSTRAP_TICKET="+ticket)
	require.NoError(t, cmd.Start())
	return cmd
}

// waitExit waits for cmd, bounded, and returns its exit code.
func waitExit(t testing.TB, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitBound):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("runnerd did not exit in time")
	}
	return cmd.ProcessState.ExitCode()
}

func (c *coreServer) wait(t testing.TB, cond func(s control.Snapshot) bool) control.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	require.NoError(t, c.core.Wait(ctx, cond))
	return c.core.Snapshot()
}

// event is what the suites check of a committed event.
type event = prptest.Event

func decodeEvents(t testing.TB, raw []json.RawMessage) []event { return prptest.DecodeEvents(t, raw) }

// runnerdBin builds runnerd; RUNNERD_BENCH_TAGS (space-separated) adds
// build tags, e.g. "pprof" with RUNNERD_CPUPROFILE=/tmp/runnerd-%p.prof.
func runnerdBin(t testing.TB) string {
	return testbin.Path(t, "runnerd", strings.Fields(os.Getenv("RUNNERD_BENCH_TAGS"))...)
}

func stateDir(t testing.TB) string { return filepath.Join(t.TempDir(), "state") }
