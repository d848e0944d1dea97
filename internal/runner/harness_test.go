package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

// waitBound bounds every wait of these tests.
const waitBound = 10 * time.Second

// stopBound bounds a runLoop's return after its context is cancelled: above
// the runner's own bounded agent shutdown (agentShutdownWait), with room
// for a loaded machine: waitBound alone leaves too small a margin above
// agentShutdownWait for a goal test under load.
const stopBound = agentShutdownWait + waitBound

// testIdentity is the registration the fake core and the runner share.
var testIdentity = prp.Identity{
	RunnerInstanceID: "runner_1", EnvironmentLeaseID: "env_1", RunID: "run_1",
	NormalizedSessionID: "session_1", TurnID: "turn_1", ItemID: "item_1",
}

const (
	testVersion = "0.0.0-test"
	testDigest  = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
)

// harness is a real control.Core (the far side of the protocol, from prptest)
// serving the dial route, and a state dir. The runner reaches the core over
// prptest's in-memory Transport (newPipeHarness, inside a synctest bubble:
// simTest) or over loopback (newHarness, for tests that run real processes
// such as pcwrap, whose pipes are not in a bubble).
type harness struct {
	t          *testing.T
	core       *prptest.Core // nil for a harness around another core (v1_test.go)
	transport  http.RoundTripper
	connectURL string
	stateDir   string
}

func coreConfig(tweak func(*control.Config)) control.Config {
	cc := control.Config{
		Identity:      testIdentity,
		RunnerVersion: testVersion, RunnerDigest: testDigest,
	}
	if tweak != nil {
		tweak(&cc)
	}
	return cc
}

// newPipeHarness is a harness whose core the runner reaches over in-memory
// pipes, for tests inside a synctest bubble (simTest).
func newPipeHarness(t *testing.T, tweak func(*control.Config)) *harness {
	t.Helper()
	core := prptest.NewCore(t, coreConfig(tweak))
	return &harness{t: t, core: core, transport: core.Transport(), connectURL: core.PipeURL(),
		stateDir: filepath.Join(t.TempDir(), "state")}
}

// newHarness is a harness whose core listens on loopback.
func newHarness(t *testing.T, tweak func(*control.Config)) *harness {
	t.Helper()
	core := prptest.NewCore(t, coreConfig(tweak))
	return &harness{t: t, core: core, connectURL: core.ServeLoopback(), stateDir: filepath.Join(t.TempDir(), "state")}
}

// config parses a runnerd command line for dial mode (or listen mode when
// listen is true) plus extra flags.
func (h *harness) config(listen bool, extra ...string) config.Config {
	h.t.Helper()
	args := []string{
		"--state-dir", h.stateDir,
		"--runner-id", testIdentity.RunnerInstanceID, "--environment-lease-id", testIdentity.EnvironmentLeaseID,
		"--run-id", testIdentity.RunID, "--session-id", testIdentity.NormalizedSessionID,
		"--turn-id", testIdentity.TurnID, "--item-id", testIdentity.ItemID,
		"--runner-version", testVersion, "--runner-digest", testDigest,
		"--reconnect-delay-ms", "5",
	}
	if listen {
		args = append(args, "--listen-address", "127.0.0.1", "--listen-port", "0",
			"--listen-path", prp.ConnectPath(testIdentity.RunID))
	} else {
		args = append(args, "--connect-url", h.connectURL)
	}
	if !slices.Contains(extra, "--lifecycle-mode") {
		// These tests drive several commands and turns per process: warm,
		// idle for longer than any test (a per-turn runner exits after its
		// turn, prp.md §7.4; suspend_test.go covers that).
		args = append(args, "--lifecycle-mode", "warm", "--idle-timeout-ms", "600000")
	}
	cfg, err := config.ParseArgs(append(args, extra...), func(string) (string, bool) { return "", false })
	require.NoError(h.t, err)
	return cfg
}

// running is one runLoop in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

// start runs the runner with a fresh ticket.
func (h *harness) start(cfg config.Config, opts options) *running {
	h.t.Helper()
	ticket, err := config.NewBootstrapTicket(h.core.Ticket())
	require.NoError(h.t, err)
	if opts.Transport == nil {
		opts.Transport = h.transport
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- runLoop(ctx, cfg, ticket, testLogger(), opts) }()
	h.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(stopBound):
			h.t.Error("runner did not stop")
		}
	})
	return r
}

// wait returns runLoop's result, bounded.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // later waits (cleanup) see it too
		return err
	case <-time.After(stopBound):
		t.Fatal("runner did not stop in time")
		return nil
	}
}

func (h *harness) waitCore(cond func(s control.Snapshot) bool) control.Snapshot {
	h.t.Helper()
	return h.core.WaitFor(cond)
}

func (h *harness) queue(typ string, payload string) prp.Command {
	h.t.Helper()
	return h.core.Queue(typ, payload)
}

// waitResult waits for the command's result and decodes it.
func (h *harness) waitResult(id string) prp.CommandResultPayload {
	h.t.Helper()
	return h.core.WaitResult(id)
}

// openState opens the harness state dir directly (the runner must be stopped).
func (h *harness) openState() *state.Store {
	h.t.Helper()
	st, err := state.Open(state.Config{Dir: h.stateDir, Identity: testIdentity})
	require.NoError(h.t, err)
	return st
}

// readState decodes runner-state.json without recovery side effects.
// readState reads the durable state (the store, outbox and records
// included) without touching the live runner's lock.
func (h *harness) readState() *state.State {
	h.t.Helper()
	st, err := state.Read(h.stateDir)
	require.NoError(h.t, err)
	return st
}

func resultCodeOf(t *testing.T, p prp.CommandResultPayload) string {
	t.Helper()
	return resultCode(p.Result)
}

func cmdID(n int) string { return fmt.Sprintf("command_prp_%08d", n) }

// testLogger logs to stderr when PCRUNNER_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("PCRUNNER_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}

// resultCode reads a command result's code ("" when absent).
func resultCode(result json.RawMessage) string {
	var r struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(result, &r)
	return r.Code
}

// simTest runs f in a synctest bubble with a harness whose core is reached
// over in-memory pipes. Every goroutine of the runner and the core must end
// before f returns; the harness's cleanups (run in the bubble) stop them.
func simTest(t *testing.T, tweak func(*control.Config), f func(t *testing.T, h *harness)) {
	synctest.Test(t, func(t *testing.T) {
		h := newPipeHarness(t, tweak)
		f(t, h)
	})
}
