package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/acpx/acpxtest"
	"github.com/pcrunner/pcrunner/internal/provider"
)

var update = flag.Bool("update", false, "rewrite golden transcripts")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testWait bounds each wait on the in-process agent (a safety net only).
const testWait = 10 * time.Second

func TestParseConfigFlagsAndEnv(t *testing.T) {
	env := map[string]string{
		"FAKEACP_INIT_DELAY_MS":         "40000",
		"FAKEACP_SUPPORTS_LOAD_SESSION": "true",
		"FAKEACP_CANCEL_MODE":           "end-turn",
		"FAKEACP_PROTOCOL_VERSION":      "2",
	}
	c, err := parseConfig([]string{"--protocol-version", "1", "--late-updates=3"}, func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, 40000, c.initDelayMs)
	require.True(t, c.supportsLoad)
	require.Equal(t, "end-turn", c.cancelMode)
	require.Equal(t, 1, c.protocolVersion, "a flag wins over its env var")
	require.Equal(t, 3, c.lateUpdates)
	require.Equal(t, -1, c.exitDuring)

	for _, bad := range []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"--cancel-mode", "sometimes"}},
		{args: []string{"--crash-mid-turn", "explode"}},
		{args: []string{"--busy-prompt", "maybe"}},
		{args: []string{"--no-such-flag"}},
		{env: map[string]string{"FAKEACP_INIT_DELAY_MS": "soon"}},
	} {
		_, err := parseConfig(bad.args, func(k string) string { return bad.env[k] })
		require.Error(t, err, "%v %v", bad.args, bad.env)
	}
}

// inProcess runs the agent loop on pipes, driven by acpxtest.Conn.
type inProcess struct {
	conn   *acpxtest.Conn
	stdin  *io.PipeWriter
	done   chan int
	stdout *io.PipeWriter
	once   sync.Once
}

func startInProcess(t *testing.T, cfg config) *inProcess {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &inProcess{stdin: inW, stdout: outW, done: make(chan int, 1)}
	go func() {
		code := run(cfg, inR, outW, io.Discard)
		_ = outW.Close()
		p.done <- code
	}()
	p.conn = acpxtest.NewConn(outR, inW, acpxtest.ConnOptions{Permissions: provider.ApproveAll})
	t.Cleanup(func() { p.stop(t) })
	return p
}

func (p *inProcess) stop(t *testing.T) {
	p.once.Do(func() {
		_ = p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(testWait):
			t.Error("fakeacp did not exit on stdin EOF")
		}
		<-p.conn.Done()
	})
}

func defaults(t *testing.T) config {
	c, err := parseConfig(nil, func(string) string { return "" })
	require.NoError(t, err)
	return c
}

// normalise drops the timestamps of a transcript; ids are deterministic.
func normalise(t *testing.T, raw []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var e map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		_, err := time.Parse(time.RFC3339Nano, e["ts"].(string))
		require.NoError(t, err)
		delete(e, "ts")
		b, err := json.Marshal(e)
		require.NoError(t, err)
		out.Write(append(b, '\n'))
	}
	return out.Bytes()
}

// TestACP23_GoldenTranscript: the wire transcript of scenario 2
// (initialize, session/new, "echo hi") matches the golden file once
// timestamps are dropped.
func TestACP23_GoldenTranscript(t *testing.T) {
	cfg := defaults(t)
	cfg.transcript = filepath.Join(t.TempDir(), "wire.ndjson")
	p := startInProcess(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	require.NoError(t, p.conn.Open(ctx, acpxtest.OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/work/repo"}))
	done, err := p.conn.Prompt("turn-1", "echo hi")
	require.NoError(t, err)
	select {
	case out := <-done:
		require.Equal(t, provider.StopEndTurn, out.StopReason)
	case <-ctx.Done():
		t.Fatal("turn did not settle")
	}
	p.stop(t)
	raw, err := os.ReadFile(cfg.transcript)
	require.NoError(t, err)
	got := normalise(t, raw)
	golden := filepath.Join("testdata", "scenario02.golden.ndjson")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

// TestBaselineValidation: session/new validates cwd and mcpServers
// (-32602); prompts on unknown sessions get -32002; unknown methods
// -32601; unknown notifications are ignored.
func TestBaselineValidation(t *testing.T) {
	p := startInProcess(t, defaults(t))
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	for _, tc := range []struct {
		method string
		params any
		code   int
	}{
		{"session/new", map[string]any{"cwd": "relative", "mcpServers": []any{}}, provider.CodeInvalidParams},
		{"session/new", map[string]any{"cwd": "/abs"}, provider.CodeInvalidParams},
		{"session/prompt", map[string]any{"sessionId": "sess-9999", "prompt": []any{}}, provider.CodeResourceNotFound},
		{"session/load", map[string]any{"sessionId": "x", "cwd": "/abs", "mcpServers": []any{}}, provider.CodeMethodNotFound},
		{"_vendor/x", map[string]any{}, provider.CodeMethodNotFound},
	} {
		_, err := p.conn.Call(ctx, tc.method, tc.params)
		var re *provider.RPCError
		require.ErrorAs(t, err, &re, tc.method)
		require.Equal(t, tc.code, re.Code, tc.method)
	}
	require.NoError(t, p.conn.Notify("_vendor/ping", map[string]any{}))
	_, err := p.conn.Call(ctx, "session/new", map[string]any{"cwd": "/abs", "mcpServers": []any{}})
	require.NoError(t, err, "the agent still answers after an ignored notification")
}

// FuzzDispatch feeds arbitrary stdin lines; the agent must never crash and
// must exit on EOF with every prompt goroutine finished.
func FuzzDispatch(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`,
		`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}` + "\n" +
			`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"sess-0001","prompt":[{"type":"text","text":"permission allow"}]}}`,
		`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}` + "\n" +
			`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"sess-0001","prompt":[{"type":"text","text":"sleep 100000"}]}}`,
		`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"sess-0001"}}`,
		`{"jsonrpc":"2.0","id":7,"result":{}}`,
		"garbage",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := defaults(t)
		done := make(chan int, 1)
		go func() { done <- run(cfg, bytes.NewReader(data), io.Discard, io.Discard) }()
		select {
		case <-done:
		case <-time.After(testWait):
			t.Fatal("agent did not exit on EOF")
		}
	})
}

func TestNoWallClockInOutput(t *testing.T) {
	cfg := defaults(t)
	var out bytes.Buffer
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`,
		`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}`,
	}, "\n") + "\n"
	require.Equal(t, 0, run(cfg, strings.NewReader(in), &out, io.Discard))
	require.NotContains(t, out.String(), time.Now().UTC().Format("2006-01-02"))
	require.Contains(t, out.String(), `"sessionId":"sess-0001"`)
}

// FuzzParseConfig feeds arbitrary flag and env text; parsing either fails
// cleanly or yields a config whose modes are valid.
func FuzzParseConfig(f *testing.F) {
	f.Add("--cancel-mode end-turn --late-updates 3", "FAKEACP_INIT_DELAY_MS=5")
	f.Add("--crash-mid-turn=sigkill", "FAKEACP_BUSY_PROMPT=queue")
	f.Add("--protocol-version x", "FAKEACP_STDOUT_BANNER=-1")
	f.Fuzz(func(t *testing.T, args, env string) {
		k, v, _ := strings.Cut(env, "=")
		c, err := parseConfig(strings.Fields(args), func(name string) string {
			if name == k {
				return v
			}
			return ""
		})
		if err != nil {
			return
		}
		switch c.cancelMode {
		case "cancelled", "ignore", "end-turn", "error":
		default:
			t.Fatalf("accepted cancel mode %q", c.cancelMode)
		}
		if c.busyPrompt != "reject" && c.busyPrompt != "queue" {
			t.Fatalf("accepted busy mode %q", c.busyPrompt)
		}
	})
}
