package acpxtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// testWait bounds every wait on a real process in these tests; it is a
// safety net, never an asserted figure.
const testWait = 15 * time.Second

// fakeClock is a manual Clock: timers fire only on advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	armed  chan time.Duration
}

type fakeTimer struct {
	clk     *fakeClock
	at      time.Time
	ch      chan time.Time
	stopped bool
	fired   bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), armed: make(chan time.Duration, 64)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	t := &fakeTimer{clk: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	c.armed <- d
	return t
}

// NewTicker and AfterFunc are part of clock.Clock; acpx arms only timers.
func (c *fakeClock) NewTicker(time.Duration) clock.Ticker { panic("fakeClock: acpx uses no ticker") }

func (c *fakeClock) AfterFunc(time.Duration, func()) clock.Timer {
	panic("fakeClock: acpx uses no AfterFunc")
}

// advance moves time and fires due timers.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if !t.stopped && !t.fired && !t.at.After(c.now) {
			t.fired = true
			t.ch <- c.now
		}
	}
}

// waitArmed waits until a timer of duration d is armed.
func (c *fakeClock) waitArmed(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.After(testWait)
	for {
		select {
		case got := <-c.armed:
			if got == d {
				return
			}
		case <-deadline:
			t.Fatalf("no %v timer armed", d)
		}
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }
func (t *fakeTimer) Stop() bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	was := !t.stopped && !t.fired
	t.stopped = true
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	was := !t.stopped && !t.fired
	t.at, t.stopped, t.fired = t.clk.now.Add(d), false, false
	return was
}

// fakeacpBin builds test/fakeacp once per test process.
func fakeacpBin(t testing.TB) string {
	t.Helper()
	return testbin.Build(t, "test/fakeacp")
}

// agentProc is fakeacp in its own process group, driven over pipes.
type agentProc struct {
	cmd        *exec.Cmd
	conn       *Conn
	stdin      io.WriteCloser
	stderr     *syncbuf.Buffer
	transcript string
	waitOnce   sync.Once
	waitErr    error
}

func startAgent(t testing.TB, opts ConnOptions, args ...string) *agentProc {
	t.Helper()
	return startAgentEnv(t, opts, nil, args...)
}

func startAgentEnv(t testing.TB, opts ConnOptions, env []string, args ...string) *agentProc {
	t.Helper()
	p := &agentProc{stderr: &syncbuf.Buffer{}, transcript: filepath.Join(t.TempDir(), "wire.ndjson")}
	p.cmd = exec.Command(fakeacpBin(t), append([]string{"--transcript", p.transcript}, args...)...)
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stderr = p.stderr
	p.cmd.WaitDelay = time.Second
	var err error
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	p.conn = NewConn(stdout, p.stdin, opts)
	t.Cleanup(p.stop)
	return p
}

// stop closes stdin (fakeacp exits on EOF), waits for the reader, kills
// whatever is left of the group, and reaps the process; every wait bounded.
func (p *agentProc) stop() {
	_ = p.stdin.Close()
	select {
	case <-p.conn.Done():
	case <-time.After(testWait):
	}
	p.killGroup()
	<-p.conn.Done()
	p.wait()
}

func (p *agentProc) killGroup() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }

// wait reaps the agent after its stdout reader finished.
func (p *agentProc) wait() error {
	p.waitOnce.Do(func() { p.waitErr = p.cmd.Wait() })
	return p.waitErr
}

// until drains the inbox until pred matches (or the stream ends).
func (p *agentProc) until(t *testing.T, pred func(provider.Inbound) bool) []provider.Inbound {
	t.Helper()
	var got []provider.Inbound
	deadline := time.After(testWait)
	for {
		select {
		case m, ok := <-p.conn.Inbox():
			if !ok {
				return got
			}
			got = append(got, m)
			if pred(m) {
				return got
			}
		case <-deadline:
			t.Fatalf("inbox: no matching message; got %d, stderr:\n%s", len(got), p.stderr.String())
		}
	}
}

func settled(m provider.Inbound) bool { return m.Kind == provider.KindTurnSettled }

// wireLine is one transcript entry (fakeacp's NDJSON).
type wireLine struct {
	Dir  string          `json:"dir"`
	Msg  json.RawMessage `json:"msg"`
	Text string          `json:"text"`
}

func (p *agentProc) wire(t *testing.T) []wireLine {
	t.Helper()
	f, err := os.Open(p.transcript)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // fakeacp has not written a line yet
	}
	require.NoError(t, err)
	defer f.Close()
	var out []wireLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l wireLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
		out = append(out, l)
	}
	return out
}

// received returns the messages fakeacp read with the given method (or,
// for "", the responses it read).
func (p *agentProc) received(t *testing.T, method string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range p.wire(t) {
		if l.Dir != "in" || l.Msg == nil {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(l.Msg, &m))
		if got, _ := m["method"].(string); got == method {
			out = append(out, m)
		}
	}
	return out
}

func openCold(t *testing.T, p *agentProc, agent string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	require.NoError(t, p.conn.Open(ctx, OpenOptions{Agent: agent, Command: "fakeacp", Cwd: "/work/repo"}))
}

// recv receives from ch within testWait (every wait in a test is bounded).
func recv[T any](t testing.TB, ch <-chan T) (T, bool) {
	t.Helper()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-time.After(testWait):
		t.Fatalf("no value within %v", testWait)
		var zero T
		return zero, false
	}
}

// first is recv's value alone.
func first[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	v, _ := recv(t, ch)
	return v
}

// testSecret is a secret value the redactor must scrub.
const testSecret = "sk-test-SECRET-value-0123456789abcdef"

func testMapper() provider.Mapper {
	return provider.Mapper{Redactor: provider.NewRedactor(testSecret, "short"), Provider: "claude", Cwd: "/work/repo"}
}

func types(evs []provider.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.EventType)
	}
	return out
}

func countTypes(evs []provider.Event) map[string]int {
	n := map[string]int{}
	for _, e := range evs {
		n[e.EventType]++
	}
	return n
}
