package opencode

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// waitBound bounds every wait in these tests.
const waitBound = 20 * time.Second

// fakeServer is test/fakeopencode started as a plain child.
type fakeServer struct {
	url, password, record string
	cmd                   *exec.Cmd
}

func startFake(t *testing.T, password string) *fakeServer {
	t.Helper()
	bin := testbin.Build(t, "test/fakeopencode")
	rec := t.TempDir() + "/record.ndjson"
	cmd := exec.Command(bin, "serve", "--hostname", "127.0.0.1", "--port", "0", "--record", rec, "--idle", "2m")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), serverEnv(password)}
	cmd.Dir = t.TempDir()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text() + "\n"
		}
		close(lines)
		for sc.Scan() {
		}
	}()
	select {
	case l := <-lines:
		u, _, ok := listenURL([]byte(l))
		require.True(t, ok, "listening line %q", l)
		return &fakeServer{url: u, password: password, record: rec, cmd: cmd}
	case <-time.After(waitBound):
		t.Fatal("fakeopencode did not listen")
	}
	return nil
}

// collector is a Sink that keeps every batch and the last state, the way
// the Manager commits them.
type collector struct {
	mu    sync.Mutex
	in    []provider.Inbound
	st    State
	batch int
	wake  chan struct{}
}

func newCollector() *collector { return &collector{wake: make(chan struct{}, 1)} }

func (c *collector) sink(st State, in []provider.Inbound) {
	c.mu.Lock()
	c.in = append(c.in, in...)
	c.st = st
	c.batch++
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *collector) snapshot() ([]provider.Inbound, State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]provider.Inbound(nil), c.in...), c.st.clone()
}

// waitFor waits until cond holds over what was collected.
func (c *collector) waitFor(t *testing.T, what string, cond func([]provider.Inbound) bool) []provider.Inbound {
	t.Helper()
	deadline := time.After(waitBound)
	for {
		in, _ := c.snapshot()
		if cond(in) {
			return in
		}
		select {
		case <-c.wake:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; have %d messages", what, len(in))
		}
	}
}

func settled(in []provider.Inbound) bool {
	for _, m := range in {
		if m.Kind == provider.KindTurnSettled {
			return true
		}
	}
	return false
}

func hasPermission(in []provider.Inbound) bool {
	for _, m := range in {
		if m.Kind == provider.KindRequest {
			return true
		}
	}
	return false
}

func textOf(in []provider.Inbound, kind string) string {
	var b strings.Builder
	for _, m := range in {
		if m.Kind == provider.KindUpdate && m.Update.Kind == kind && m.Update.Content != nil {
			b.WriteString(m.Update.Content.Text)
		}
	}
	return b.String()
}

// runConn starts a Conn's run; the returned stop ends it and returns its
// error.
func runConn(t *testing.T, c *Conn) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(waitBound):
				t.Fatal("Run did not return")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// newConn opens a session on srv and starts its stream.
func newConn(t *testing.T, srv *fakeServer) (*Conn, *collector, func() error) {
	t.Helper()
	cl, err := newClient(srv.url, srv.password)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	col := newCollector()
	c := NewConn(cl, State{}, col.sink)
	c.wait = func(ctx context.Context, _ time.Duration) error { return sleepCtx(ctx, 10*time.Millisecond) }
	_, err = c.Open(context.Background(), "")
	require.NoError(t, err)
	return c, col, runConn(t, c)
}

// mapEvents runs the messages through the acpx mapper as the Manager
// does (turn.started first) and returns the PRP events.
func mapEvents(t *testing.T, turnID string, in []provider.Inbound, byRunCancel bool) []provider.Event {
	t.Helper()
	mp := provider.Mapper{Redactor: provider.NewRedactor(), Provider: "opencode", Cwd: "/work"}
	ms := &provider.MapState{}
	evs := mp.TurnStarted(ms, turnID)
	for _, m := range in {
		switch m.Kind {
		case provider.KindUpdate:
			evs = append(evs, mp.Update(ms, m.TurnID, *m.Update)...)
		case provider.KindRequest:
			_, e := mp.PermissionRequest(ms, m.TurnID, m.ID, *m.Permission)
			evs = append(evs, e...)
		case provider.KindTurnSettled:
			evs = append(evs, mp.Settle(ms, provider.SettlementOf(*m.Outcome, byRunCancel))...)
		}
	}
	return evs
}

func eventTypes(evs []provider.Event) []string {
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
