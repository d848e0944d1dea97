package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
)

// waitBound bounds every wait of these tests.
const waitBound = 10 * time.Second

// testIdentity is the registration the fake core and the runner share.
var testIdentity = prp.Identity{
	RunnerInstanceID: "runner_1", EnvironmentLeaseID: "env_1", RunID: "run_1",
	NormalizedSessionID: "session_1", TurnID: "turn_1", ItemID: "item_1",
}

const (
	testVersion = "0.0.0-test"
	testDigest  = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
)

// harness is a real prp.Core (the far side of the protocol) serving the
// dial route on a loopback httptest server, and a state dir.
type harness struct {
	t        *testing.T
	core     *prp.Core
	srv      *httptest.Server // nil when the core is reached over pipes
	pipe     http.RoundTripper
	stateDir string
}

// newPipeHarness is a harness whose core the runner reaches over in-memory
// pipes (pipeTransport), for tests inside a synctest bubble (simTest).
func newPipeHarness(t *testing.T, tweak func(*prp.CoreConfig)) *harness {
	t.Helper()
	cc := prp.CoreConfig{
		Identity:      testIdentity,
		RunnerVersion: testVersion, RunnerDigest: testDigest,
	}
	if tweak != nil {
		tweak(&cc)
	}
	var wg sync.WaitGroup
	h := &harness{t: t, core: prp.NewCore(cc), stateDir: filepath.Join(t.TempDir(), "state")}
	h.pipe = pipeTransport{h: h.core, wg: &wg}
	t.Cleanup(func() {
		h.core.Close()
		wg.Wait()
	})
	return h
}

func newHarness(t *testing.T, tweak func(*prp.CoreConfig)) *harness {
	t.Helper()
	cc := prp.CoreConfig{
		Identity:      testIdentity,
		RunnerVersion: testVersion, RunnerDigest: testDigest,
	}
	if tweak != nil {
		tweak(&cc)
	}
	h := &harness{t: t, core: prp.NewCore(cc), stateDir: filepath.Join(t.TempDir(), "state")}
	h.srv = httptest.NewServer(h.core)
	t.Cleanup(func() {
		h.core.Close()
		h.srv.Close()
	})
	return h
}

// config parses a runnerd command line for dial mode (or listen mode when
// listen is true) plus extra flags.
func (h *harness) config(listen bool, extra ...string) Config {
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
	} else if h.srv == nil {
		// pipeTransport ignores the address.
		args = append(args, "--connect-url", "ws://127.0.0.1:1"+prp.ConnectPath(testIdentity.RunID))
	} else {
		args = append(args, "--connect-url", "ws://"+strings.TrimPrefix(h.srv.URL, "http://")+prp.ConnectPath(testIdentity.RunID))
	}
	if !slices.Contains(extra, "--lifecycle-mode") {
		// These tests drive several commands and turns per process: warm,
		// idle for longer than any test (a per-turn runner exits after its
		// turn, prp.md §7.4; suspend_test.go covers that).
		args = append(args, "--lifecycle-mode", "warm", "--idle-timeout-ms", "600000")
	}
	cfg, err := ParseArgs(append(args, extra...), func(string) (string, bool) { return "", false })
	require.NoError(h.t, err)
	return cfg
}

// running is one RunLoop in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

// start runs the runner with a fresh ticket.
func (h *harness) start(cfg Config, opts Options) *running {
	h.t.Helper()
	tok, err := h.core.MintTicket()
	require.NoError(h.t, err)
	ticket, err := NewBootstrapTicket(tok)
	require.NoError(h.t, err)
	if opts.Transport == nil {
		opts.Transport = h.pipe
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- RunLoop(ctx, cfg, ticket, testLogger(), opts) }()
	h.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(waitBound):
			h.t.Error("runner did not stop")
		}
	})
	return r
}

// wait returns RunLoop's result, bounded.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // later waits (cleanup) see it too
		return err
	case <-time.After(waitBound):
		t.Fatal("runner did not stop in time")
		return nil
	}
}

func (h *harness) waitCore(cond func(s prp.CoreSnapshot) bool) prp.CoreSnapshot {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	require.NoError(h.t, h.core.Wait(ctx, cond))
	return h.core.Snapshot()
}

func (h *harness) queue(typ string, payload string) prp.Command {
	h.t.Helper()
	cmd, err := h.core.QueueCommand(prp.Command{Type: typ, Payload: json.RawMessage(payload)})
	require.NoError(h.t, err)
	return cmd
}

// waitResult waits for the command's result and decodes it.
func (h *harness) waitResult(id string) prp.CommandResultPayload {
	h.t.Helper()
	s := h.waitCore(func(s prp.CoreSnapshot) bool { return s.Results[id] != nil })
	var p prp.CommandResultPayload
	require.NoError(h.t, json.Unmarshal(s.Results[id], &p))
	return p
}

// coreEvent is the part of a committed event the tests check.
type coreEvent struct {
	SourceSeq     uint64          `json:"sourceSeq"`
	SourceEventID string          `json:"sourceEventId"`
	EventType     string          `json:"eventType"`
	Payload       json.RawMessage `json:"payload"`
}

func decodeEvents(t *testing.T, raw []json.RawMessage) []coreEvent {
	t.Helper()
	out := make([]coreEvent, 0, len(raw))
	for _, b := range raw {
		var env struct {
			Payload coreEvent `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(b, &env))
		out = append(out, env.Payload)
	}
	return out
}

func eventsOfType(evs []coreEvent, typ string) []coreEvent {
	var out []coreEvent
	for _, e := range evs {
		if e.EventType == typ {
			out = append(out, e)
		}
	}
	return out
}

// openState opens the harness state dir directly (the runner must be stopped).
func (h *harness) openState() *state.Store {
	h.t.Helper()
	st, err := state.Open(state.Config{Dir: h.stateDir, Identity: testIdentity})
	require.NoError(h.t, err)
	return st
}

// readState decodes runner-state.json without recovery side effects.
func (h *harness) readState() *state.State {
	h.t.Helper()
	b, err := readFile(filepath.Join(h.stateDir, state.FileName))
	require.NoError(h.t, err)
	var st state.State
	require.NoError(h.t, json.Unmarshal(b, &st))
	return &st
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
