package prp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

var runnerIdentity = prp.Identity{
	RunnerInstanceID: "runner_1", EnvironmentLeaseID: "env_1", RunID: "run_1",
	NormalizedSessionID: "session_1", TurnID: "turn_1", ItemID: "item_1",
}

const (
	runnerVer = "0.1.0"
	runnerDig = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
)

func newTestCore(mod func(*control.Config)) *control.Core {
	cfg := control.Config{Identity: runnerIdentity, RunnerVersion: runnerVer, RunnerDigest: runnerDig}
	if mod != nil {
		mod(&cfg)
	}
	return control.NewCore(cfg)
}

// runnerUser is the Client's user in tests: it records every hook call.
type runnerUser struct {
	// mu guards welcomes, conns, controls and lost: the Client's hooks
	// append from its goroutines while the test reads.
	mu       sync.Mutex
	welcomes []*prp.Welcome
	conns    []*prp.Conn // the connection of each welcome
	controls []*prp.Envelope
	lost     []error
	changed  chan struct{}
	// block, when set, makes OnControl wait on it (a user stuck in provider work).
	block chan struct{}
}

func newRunnerUser() *runnerUser { return &runnerUser{changed: make(chan struct{}, 1)} }

func (u *runnerUser) hooks(cfg *prp.ClientConfig) {
	cfg.OnAuthenticated = func(_ context.Context, c *prp.Conn, w *prp.Welcome) error {
		u.mu.Lock()
		u.welcomes = append(u.welcomes, w)
		u.conns = append(u.conns, c)
		u.mu.Unlock()
		kick(u.changed)
		return nil
	}
	cfg.OnControl = func(ctx context.Context, _ *prp.Conn, env *prp.Envelope) error {
		if u.block != nil {
			select {
			case <-u.block:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		u.mu.Lock()
		u.controls = append(u.controls, env)
		u.mu.Unlock()
		kick(u.changed)
		return nil
	}
	cfg.OnLost = func(err error) {
		u.mu.Lock()
		u.lost = append(u.lost, err)
		u.mu.Unlock()
		kick(u.changed)
	}
}

// waitFor polls cond on every hook call until it holds or ctx ends.
func (u *runnerUser) waitFor(ctx context.Context, t testing.TB, what string, cond func(u *runnerUser) bool) {
	t.Helper()
	for {
		u.mu.Lock()
		ok := cond(u)
		u.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-u.changed:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

func (u *runnerUser) kinds() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var ks []string
	for _, e := range u.controls {
		ks = append(ks, e.Kind)
	}
	return ks
}

// startClient runs a Client; the returned channel yields Run's error.
func startClient(t testing.TB, ctx context.Context, cfg prp.ClientConfig) (*prp.Client, <-chan error) {
	t.Helper()
	if cfg.Identity == (prp.Identity{}) {
		cfg.Identity = runnerIdentity
	}
	cfg.RunnerVersion, cfg.RunnerDigest = runnerVer, runnerDig
	c, err := prp.NewClient(cfg)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return c, done
}

// eventEnvelope builds a runner event envelope with sourceSeq seq.
func eventEnvelope(t testing.TB, seq int64) []byte {
	t.Helper()
	payload := fmt.Appendf(nil, `{"schema":"paperclip.prp.event.v1","sourceEventId":"event_runner_1_%016d","sourceSeq":%d,"sourceInstanceId":"runner_1","sourceKind":"runner","eventType":"runner.diagnostic","schemaVersion":1,"priority":1,"payload":{"note":"<&>"}}`, seq, seq)
	b, err := prp.MarshalEnvelope(prp.NewEventEnvelope(prp.KindEvent, prp.ProtocolVersion, runnerIdentity, payload))
	require.NoError(t, err)
	return b
}

// resultEnvelope builds a completed command_result for cmd.
func resultEnvelope(t testing.TB, cmd *prp.Envelope) []byte {
	t.Helper()
	var c prp.Command
	require.NoError(t, json.Unmarshal(cmd.Payload, &c))
	p, err := jsonenc.Marshal(prp.CommandResultPayload{CommandID: c.CommandID, ControllerSeq: c.ControllerSeq,
		CommandType: c.Type, Status: "completed", Result: json.RawMessage(`{}`)})
	require.NoError(t, err)
	b, err := prp.MarshalEnvelope(prp.NewEventEnvelope(prp.KindCommandResult, cmd.Version, runnerIdentity, p))
	require.NoError(t, err)
	return b
}

// kick wakes a waiter without blocking (package prp's kick).
func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// kindOf returns an envelope's kind.
func kindOf(b []byte) string {
	var k struct {
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(b, &k)
	return k.Kind
}
