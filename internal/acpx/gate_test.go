package acpx

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/provider"
)

// TestACP19_ColdStartGate: five concurrent cold opens → at most four
// hold a slot; the fifth proceeds when one is released, or fails open
// after coldStartGateMaxWait on the injected clock.
func TestACP19_ColdStartGate(t *testing.T) {
	synctest.Test(t, testColdStartGate)
}

func testColdStartGate(t *testing.T) {
	g := NewColdStartGate(MaxConcurrentColdStarts, clock.System)
	ctx := context.Background()
	var releases []func()
	for i := 0; i < MaxConcurrentColdStarts; i++ {
		rel, held, err := g.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, held)
		releases = append(releases, rel)
	}
	type res struct {
		rel  func()
		held bool
	}
	fifth := make(chan res, 1)
	go func() {
		rel, held, _ := g.Acquire(ctx)
		fifth <- res{rel, held}
	}()
	synctest.Wait() // the fifth waits on its slot and its fail-open timer
	select {
	case <-fifth:
		t.Fatal("a fifth handshake overlapped four")
	default:
	}
	releases[0]()
	releases[0]() // release is idempotent
	r := first(t, fifth)
	require.True(t, r.held)

	sixth := make(chan res, 1)
	go func() {
		rel, held, _ := g.Acquire(ctx)
		sixth <- res{rel, held}
	}()
	synctest.Wait()
	time.Sleep(coldStartGateMaxWait) // simulated time: the fail-open timer fires
	r6 := first(t, sixth)
	require.False(t, r6.held, "fail-open after the gate wait")
	r6.rel()

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err := g.Acquire(cctx)
	require.ErrorIs(t, err, context.Canceled)

	_, held, err := NewColdStartGate(0, clock.System).Acquire(ctx)
	require.NoError(t, err)
	require.False(t, held, "a gate of 0 is disabled")
	for _, rel := range releases[1:] {
		rel()
	}
	r.rel()
}

// TestSecretsNeverInLogs: whatever the agent sends (bad lines, error
// texts, updates, requests), the client's log carries no payload bytes.
func TestSecretsNeverInLogs(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewJSONHandler(&lockedWriter{w: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := NewClient(provider.Record{}, ClientOptions{Logger: log})
	_, err := c.NewSession("/w", []MCPServer{{Type: MCPTransportHTTP, Name: "m", URL: "http://127.0.0.1:1/mcp", Headers: []HTTPHeader{{Name: "Authorization", Value: "Bearer " + testSecret}}}})
	require.NoError(t, err)
	require.NotContains(t, fmt.Sprint(c.Record()), testSecret, "env values never enter the record")
	b, _ := json.Marshal(c.Record())
	require.NotContains(t, string(b), testSecret)
	in := strings.Join([]string{
		"banner " + testSecret,
		`{"jsonrpc":"2.0","id":1,"result":{"sessionId":"s"}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + testSecret + `"}}}}`,
		`{"jsonrpc":"2.0","method":"_x/` + testSecret + `"}`,
		`{"jsonrpc":"2.0","error":{"code":-32700,"message":"` + testSecret + `"},"id":null}`,
		`{"jsonrpc":"2.0","id":"r","method":"fs/read_text_file","params":{"path":"` + testSecret + `"}}`,
	}, "\n") + "\n"
	_, err = c.Feed([]byte(in))
	require.NoError(t, err)
	_, err = c.Feed([]byte(strings.Repeat(testSecret+"\n", provider.MaxConsecutiveBadLines)))
	require.ErrorIs(t, err, provider.ErrTooManyBadLines)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, logs.String())
	require.NotContains(t, logs.String(), testSecret)
	require.NotContains(t, logs.String(), testSecret[:16])
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestRecordRoundTrip: the record survives JSON exactly, mid-turn with a
// partial line, pending requests both ways and mapping state.
func TestRecordRoundTrip(t *testing.T) {
	c := handshaken(t)
	_, err := c.Prompt("turn-1", "x")
	require.NoError(t, err)
	_, err = c.Feed([]byte(`{"jsonrpc":"2.0","id":9,"method":"session/request_permission","params":{"sessionId":"sess-1","toolCall":{"toolCallId":"c"},"options":[]}}` + "\n{\"jsonrpc\":"))
	require.NoError(t, err)
	mp := testMapper()
	mp.TurnStarted(c.Map(), "turn-1")
	mp.Update(c.Map(), "turn-1", upd(t, `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"}}`))
	rec := c.Record()
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	var back provider.Record
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, rec, back)
	require.Equal(t, []byte(`{"jsonrpc":`), back.Process.Wire.PartialLine)
	require.Contains(t, back.Process.Wire.AgentRequests, "9")
	require.Equal(t, "turn-1", back.Process.Wire.Turn.ID)
}
