package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/toolcall"
)

// coreSink makes every commit durable in a real state store (one fsync'd
// write, as the runner's Sink does) and, as a fake core that answers at
// once, sends a semantic_tool.result for each semantic_tool.input it
// commits.
type coreSink struct {
	*memSink
	store  *state.Store
	m      func() *Manager
	wg     sync.WaitGroup
	nextID int
	mu     sync.Mutex
}

func (s *coreSink) Commit(record json.RawMessage, texts []ItemText, evs []provider.Event, out *CommandOutcome) error {
	if s.store != nil {
		if err := s.durable(record, texts, evs); err != nil {
			return err
		}
		s.answer(evs)
		var st Stored
		if err := json.Unmarshal(record, &st); err != nil {
			return err
		}
		if err := s.putTexts(&st, len(record), texts); err != nil {
			return err
		}
		s.keep(st, nil, out)
		return nil
	}
	s.answer(evs)
	return s.memSink.Commit(record, texts, nil, out) // keep the record, not the events: the run is long
}

func (s *coreSink) durable(record json.RawMessage, texts []ItemText, evs []provider.Event) error {
	err := s.store.Update(func(tx *state.Tx) error {
		if err := tx.SetRecord("acpAgent", record); err != nil {
			return err
		}
		// The item texts as the runner's Sink stores them.
		listed := map[string]bool{}
		for _, t := range texts {
			listed["acpAgent/item/"+t.ItemID] = true
			if err := tx.PutText("acpAgent/item/"+t.ItemID, t.Off, []byte(t.Chunk)); err != nil {
				return err
			}
		}
		for _, name := range tx.TextNames("acpAgent/item/") {
			if !listed[name] {
				tx.DropText(name)
			}
		}
		for _, e := range evs {
			b, err := json.Marshal(e.Payload)
			if err != nil {
				return err
			}
			if _, err := tx.Enqueue(state.Event{Type: e.EventType, Priority: state.Priority(e.Priority), Payload: b}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The core acknowledges at once too, so the outbox never fills.
	_, err = s.store.ApplyAck(s.store.Summary().HighestSourceSeq, state.MaxProtocolVersion)
	return err
}

func (s *coreSink) answer(evs []provider.Event) {
	for _, e := range evs {
		if e.EventType != prp.EventSemanticToolInput {
			continue
		}
		in := e.Payload["semantic_tool"].(map[string]any)
		s.mu.Lock()
		s.nextID++
		id := fmt.Sprintf("cmd-%d", s.nextID)
		s.mu.Unlock()
		p, _ := json.Marshal(map[string]any{"callId": in["callId"], "operationId": in["operationId"],
			"result": map[string]any{"id": "c"}, "isError": false})
		s.wg.Add(1)
		go func() { // the core answers at once; Commit runs under the manager's mutex
			defer s.wg.Done()
			_, _ = s.m().ToolResult(id, p)
		}()
	}
}

func percentiles(b *testing.B, name string, samples []time.Duration) {
	slices.Sort(samples)
	if len(samples) == 0 {
		return
	}
	at := func(q float64) float64 { return float64(samples[int(q*float64(len(samples)-1))].Microseconds()) / 1000 }
	b.ReportMetric(at(0.50), name+"-p50-ms")
	b.ReportMetric(at(0.99), name+"-p99-ms")
}

// BenchmarkToolRoundTrip measures a tool call round trip agent → bridge →
// core → agent: the Go SDK's MCP client calls a catalog tool; the bridge's
// handler commits the call and its semantic_tool.input (a durable state
// write), the fake core answers at once with semantic_tool.result (a second
// durable write) and the answer goes back to the client. Next to it, in
// the same run, a bare loopback HTTP request. Figures only (the target: p50
// under 2 ms, p99 under 10 ms on the dev machine).
//
//	go test -run XXX -bench BenchmarkToolRoundTrip ./internal/agent/
func BenchmarkToolRoundTrip(b *testing.B) {
	// durable: the commits go to a real state store (fsync'd writes, as in
	// runnerd); memory: the same path with an in-memory sink, which
	// isolates the bridge and executor cost from the disk.
	b.Run("durable", func(b *testing.B) { toolRoundTrip(b, true) })
	b.Run("memory", func(b *testing.B) { toolRoundTrip(b, false) })
}

func toolRoundTrip(b *testing.B, durable bool) {
	var cs *coreSink
	var r *rig
	r = newRig(b, func(c *Config) {
		cs = &coreSink{memSink: c.Sink.(*memSink), m: func() *Manager { return r.m }}
		if durable {
			st, err := state.Open(state.Config{Dir: filepath.Join(b.TempDir(), "state"), Identity: prp.Identity{
				RunnerInstanceID: "runner_1", EnvironmentLeaseID: "env_1", RunID: "run_1",
				NormalizedSessionID: "session_1", TurnID: "turn_1", ItemID: "item_1"}})
			require.NoError(b, err)
			b.Cleanup(func() { _ = st.Close() })
			cs.store = st
		}
		c.Sink = cs
		c.Correlation = func() toolcall.Correlation { return testCorrelation }
	})
	require.NoError(b, r.prepareTools(catalogJSON(b, opComment)))
	client := r.openTurn()

	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
	}))
	defer bare.Close()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()

	var tool, plain []time.Duration
	for b.Loop() {
		t0 := time.Now()
		got := callTool(b, client, "issue.comment", `{"body":"bench"}`)
		tool = append(tool, time.Since(t0))
		if got.err != nil || got.isError || !strings.Contains(got.text, `"id":"c"`) {
			b.Fatalf("tool call failed: %+v", got)
		}
		t0 = time.Now()
		resp, err := hc.Post(bare.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		require.NoError(b, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		plain = append(plain, time.Since(t0))
	}
	b.StopTimer()
	cs.wg.Wait()
	percentiles(b, "tool", tool)
	percentiles(b, "http", plain)
}
