package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/codexapp"
	"github.com/pcrunner/pcrunner/internal/opencode"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit)) }

// testWait bounds every wait in these tests: a safety net, never a figure.
const testWait = 20 * time.Second

// memSink is the far side of the Sink: it keeps every commit in memory.
type memSink struct {
	mu      sync.Mutex
	st      Stored
	events  []provider.Event
	commits int
	changed chan struct{}
	// gate, when set, is closed to open the flow-control gate.
	gate chan struct{}
	// outcomes are the command results commits recorded, by command id,
	// and the event types of the commit that recorded each.
	outcomes      map[string]CommandOutcome
	outcomeEvents map[string][]string
	// texts are the item texts as the commits left them, by item id; st
	// holds them in its items, as a record the runner restores does.
	texts map[string]string
	// written is each commit's size, in order.
	written []commitSize
}

// commitSize is what one commit handed the Sink, in bytes: the record,
// the item text chunks, and the item texts' total length after it.
type commitSize struct{ record, chunks, texts int }

func newMemSink() *memSink { return &memSink{changed: make(chan struct{})} }

func (s *memSink) Commit(record json.RawMessage, texts []ItemText, evs []provider.Event, out *CommandOutcome) error {
	var cp Stored
	if err := json.Unmarshal(record, &cp); err != nil {
		return err
	}
	if err := s.putTexts(&cp, len(record), texts); err != nil {
		return err
	}
	s.keep(cp, evs, out)
	return nil
}

// putTexts applies a commit's item texts as the runner's Sink does and
// restores them into cp.
func (s *memSink) putTexts(cp *Stored, recordBytes int, texts []ItemText) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]string, len(texts))
	n := commitSize{record: recordBytes}
	for _, t := range texts {
		cur, ok := s.texts[t.ItemID]
		if t.Off != 0 && (!ok || t.Off != len(cur)) {
			return fmt.Errorf("item text %s at %d: the sink holds %d bytes", t.ItemID, t.Off, len(cur))
		}
		next[t.ItemID] = cur[:t.Off] + t.Chunk
		n.chunks += len(t.Chunk)
		n.texts += t.Off + len(t.Chunk)
	}
	s.texts = next
	s.written = append(s.written, n)
	cp.RestoreTexts(func(id string) (string, bool) { v, ok := next[id]; return v, ok })
	return nil
}

// keep records a committed st (already a copy the Manager no longer
// mutates), its events and outcome.
func (s *memSink) keep(cp Stored, evs []provider.Event, out *CommandOutcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st = cp
	s.events = append(s.events, evs...)
	if out != nil {
		if s.outcomes == nil {
			s.outcomes, s.outcomeEvents = map[string]CommandOutcome{}, map[string][]string{}
		}
		s.outcomes[out.CommandID] = *out
		s.outcomeEvents[out.CommandID] = types(evs)
	}
	s.commits++
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *memSink) Drained() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		return true
	}
	select {
	case <-s.gate:
		return true
	default:
		return false
	}
}

// DrainSignal is the gate itself: closing it opens the gate.
func (s *memSink) DrainSignal() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		return closedSignal
	}
	return s.gate
}

var closedSignal = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (s *memSink) snapshot() (Stored, []provider.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st, append([]provider.Event(nil), s.events...)
}

// waitFor waits until cond holds on the committed events.
func (s *memSink) waitFor(t testing.TB, what string, cond func(st Stored, evs []provider.Event) bool) []provider.Event {
	t.Helper()
	deadline := time.After(testWait)
	for {
		s.mu.Lock()
		ch := s.changed
		st, evs := s.st, append([]provider.Event(nil), s.events...)
		s.mu.Unlock()
		if cond(st, evs) {
			return evs
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; events: %v", what, types(evs))
		}
	}
}

func (s *memSink) waitEvent(t testing.TB, typ string) []provider.Event {
	t.Helper()
	return s.waitFor(t, typ, func(_ Stored, evs []provider.Event) bool { return count(evs, typ) > 0 })
}

func types(evs []provider.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.EventType
	}
	return out
}

func count(evs []provider.Event, typ string) int {
	n := 0
	for _, e := range evs {
		if e.EventType == typ {
			n++
		}
	}
	return n
}

func since(evs []provider.Event, n int) []provider.Event { return evs[n:] }

// fakeacpBin builds test/fakeacp once per test process.
func fakeacpBin(t testing.TB) string {
	t.Helper()
	return testbin.Build(t, "test/fakeacp")
}

// rig is one Manager over real pcwrap and fakeacp.
type rig struct {
	t     testing.TB
	sink  *memSink
	cfg   Config
	m     *Manager
	state string
	cwd   string // the agent cwd, fixed so a record stays reusable
	turns int    // turn.start commands issued
}

// testDrivers are the drivers runnerd runs (internal/runner lists them).
var testDrivers = []provider.Registration{acpx.Registration, codexapp.Registration, opencode.Registration}

// testBounds are short bounds so fault scenarios finish in seconds.
func testConfig(t testing.TB, sink *memSink, stateDir string) Config {
	return Config{
		StateDir: stateDir, Pcwrap: testbin.Path(t, "pcwrap"), Sink: sink, Drivers: testDrivers,
		Environ:     []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir()},
		ResumeBound: 10 * time.Second,
		ColdBound:   func(string) time.Duration { return 10 * time.Second },
		CancelGrace: 500 * time.Millisecond,
		StopWait:    4 * time.Second,
	}
}

func newRig(t testing.TB, mutate ...func(*Config)) *rig {
	t.Helper()
	sink := newMemSink()
	stateDir := t.TempDir()
	cfg := testConfig(t, sink, stateDir)
	for _, f := range mutate {
		f(&cfg)
	}
	r := &rig{t: t, sink: sink, cfg: cfg, state: stateDir, cwd: t.TempDir()}
	r.m = NewManager(cfg, Stored{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		r.m.Shutdown(ctx)
	})
	return r
}

// prepare binds fakeacp (run as agent "claude") with flags.
func (r *rig) prepare(flags ...string) { r.t.Helper(); r.prepareAs("claude", flags...) }

// prepareAs binds fakeacp run as agent name (the bound follows the name).
func (r *rig) prepareAs(name string, flags ...string) {
	r.t.Helper()
	desc := map[string]any{"provider": map[string]any{
		"kind": "acpx", "agent": name, "command": fakeacpBin(r.t), "args": flags, "cwd": r.cwd,
	}}
	b, _ := json.Marshal(desc)
	_, err := r.m.Prepare(b)
	require.NoError(r.t, err)
}

func (r *rig) open() json.RawMessage {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	res, err := r.m.Open(ctx, "cmd-open")
	require.NoError(r.t, err)
	return res
}

func (r *rig) turn(text string) string {
	r.t.Helper()
	b, _ := json.Marshal(map[string]string{"text": text})
	r.turns++
	res, err := r.m.StartTurn(fmt.Sprintf("cmd-turn-%d", r.turns), b)
	require.NoError(r.t, err)
	var out struct {
		ProviderTurnID string `json:"providerTurnId"`
	}
	require.NoError(r.t, json.Unmarshal(res, &out))
	return out.ProviderTurnID
}

// sessionDir returns the live process session dir.
func (r *rig) sessionDir() string {
	r.t.Helper()
	st, _ := r.sink.snapshot()
	require.NotNil(r.t, st.Session)
	require.NotNil(r.t, st.Session.Process)
	return sessionPath(r.state, st.Session.Process.UUID)
}

func payloadOf(evs []provider.Event, typ string) map[string]any {
	for _, e := range evs {
		if e.EventType == typ {
			return e.Payload
		}
	}
	return nil
}

// eventually polls cond every 10 ms, bounded by testWait.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(testWait)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// openErr runs session.open expecting a failure and returns its code.
func (r *rig) openErr() *CommandError {
	r.t.Helper()
	return r.openErrWithin(testWait)
}

// openErrWithin is openErr with its own bound.
func (r *rig) openErrWithin(bound time.Duration) *CommandError {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	_, err := r.m.Open(ctx, "cmd-open")
	var ce *CommandError
	require.ErrorAs(r.t, err, &ce)
	return ce
}

// killAgent SIGKILLs the agent's group and waits until the executor has
// forgotten the process.
func (r *rig) killAgent() {
	r.t.Helper()
	pgid := agentPgid(r.t, r.sessionDir())
	require.NoError(r.t, syscall.Kill(-pgid, syscall.SIGKILL))
	eventually(r.t, "process forgotten", func() bool { st, _ := r.sink.snapshot(); return st.Session.Process == nil })
}

// killWait SIGKILLs pid and waits (bounded) until it is gone or a zombie.
func killWait(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	deadline := time.Now().Add(testWait)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return errors.New("process survived SIGKILL")
}

// said joins the text of every item.delta.
func said(evs []provider.Event) string {
	s := ""
	for _, e := range evs {
		if e.EventType == "item.delta" {
			if t, ok := e.Payload["text"].(string); ok {
				s += t
			}
		}
	}
	return s
}
