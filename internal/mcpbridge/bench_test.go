package mcpbridge

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// The target for a tool call round trip:
// p50 < 2 ms, p99 < 10 ms. The benchmarks print p50/p99 per op; they do
// not assert them (STYLE.md: figures, never a timed assertion).
//
//	go test -run XXX -bench 'CallRoundTrip|BareLoopback' -benchtime 20000x ./internal/mcpbridge

// BenchmarkCallRoundTrip: a tools/call POST through the bridge (bearer,
// checks, decode, Handler answering at once, encode) over one kept-alive
// loopback connection.
func BenchmarkCallRoundTrip(b *testing.B) {
	s, _ := startServer(b, Config{Handler: handlerFunc(func(context.Context, Call) Result {
		return Result{Text: `{"ok":true}`}
	})})
	c := rawClient(b)
	body := []byte(callBody(1, "issue.comment", `{"body":"hello"}`))
	measure(b, func() {
		req, _ := http.NewRequest(http.MethodPost, s.URL(), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+s.Secret())
		req.Header.Set("Mcp-Session-Id", s.SessionID())
		roundTrip(b, c, req)
	})
}

// BenchmarkCallRoundTripGoSDK: the same call through the Go SDK's client,
// as an agent built on it makes it.
func BenchmarkCallRoundTripGoSDK(b *testing.B) {
	s, _ := startServer(b, Config{Handler: handlerFunc(func(context.Context, Call) Result {
		return Result{Text: `{"ok":true}`}
	})})
	cs := connectSDK(b, s)
	ctx := context.Background()
	params := &mcp.CallToolParams{Name: "issue.comment", Arguments: map[string]any{"body": "hello"}}
	measure(b, func() {
		if _, err := cs.CallTool(ctx, params); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkBareLoopbackHTTP: the floor: a net/http POST on loopback whose
// handler reads the body and writes a fixed JSON answer.
func BenchmarkBareLoopbackHTTP(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(b, err)
	answer := []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"{\"ok\":true}"}],"isError":false}}`)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close(); <-done })
	c := rawClient(b)
	url := "http://" + ln.Addr().String() + "/mcp"
	body := []byte(callBody(1, "issue.comment", `{"body":"hello"}`))
	measure(b, func() {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		roundTrip(b, c, req)
	})
}

func roundTrip(b *testing.B, c *http.Client, req *http.Request) {
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

// measure runs op b.N times, recording each latency, and reports p50/p99
// in µs.
func measure(b *testing.B, op func()) {
	b.Helper()
	op() // warm the connection
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		op()
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(samples)
	p := func(q float64) float64 {
		return float64(samples[int(q*float64(len(samples)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(p(0.50), "p50-µs")
	b.ReportMetric(p(0.99), "p99-µs")
	if len(samples) > 1000 {
		fmt.Printf("%s over %d calls: p50 %.0f µs, p99 %.0f µs, max %.0f µs\n", b.Name(), len(samples), p(0.50), p(0.99), p(1))
	}
}
