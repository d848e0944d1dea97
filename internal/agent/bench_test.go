package agent

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// stampSink records when each committed item.delta's stamps became durable.
type stampSink struct {
	*memSink
	mu      sync.Mutex
	samples []time.Duration
}

func (s *stampSink) Commit(record json.RawMessage, texts []ItemText, evs []provider.Event, out *CommandOutcome) error {
	if err := s.memSink.Commit(record, texts, evs, out); err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range evs {
		if e.EventType != "item.delta" {
			continue
		}
		text, _ := e.Payload["text"].(string)
		for _, f := range strings.Split(text, ";") {
			if ns, err := strconv.ParseInt(f, 10, 64); err == nil {
				s.samples = append(s.samples, now.Sub(time.Unix(0, ns)))
			}
		}
	}
	return nil
}

// BenchmarkAgentLineToCommit measures the executor+pcwrap overhead per
// ACP message: fakeacp stamps each agent_message_chunk line as it writes
// it (2 ms apart, so each travels alone); a sample ends when its
// item.delta is committed to the Sink. The runner's store write and send
// come on top (test/e2e BenchmarkAgentMessageOnWire). Figures only.
//
//	scripts/bench-agent
func BenchmarkAgentLineToCommit(b *testing.B) {
	const n = 300
	var ss *stampSink
	r := newRig(b, func(c *Config) { ss = &stampSink{memSink: c.Sink.(*memSink)}; c.Sink = ss })
	r.prepare()
	r.open()
	for b.Loop() {
		before := count(func() []provider.Event { _, e := r.sink.snapshot(); return e }(), "run.terminal")
		r.turn(fmt.Sprintf("stamp %d 2", n))
		r.sink.waitFor(b, "turn end", func(_ Stored, evs []provider.Event) bool { return count(evs, "run.terminal") > before })
	}
	ss.mu.Lock()
	s := append([]time.Duration(nil), ss.samples...)
	ss.mu.Unlock()
	if len(s) == 0 {
		b.Fatal("no samples")
	}
	slices.Sort(s)
	b.ReportMetric(ms(s[len(s)/2]), "p50-ms")
	b.ReportMetric(ms(s[len(s)*99/100]), "p99-ms")
	fmt.Printf("agent line→commit over %d messages: p50 %v p90 %v p99 %v max %v\n",
		len(s), s[len(s)/2], s[len(s)*9/10], s[len(s)*99/100], s[len(s)-1])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkAgentTenThousandChunks: 10,000 small agent_message_chunk
// updates in one turn are all committed, in order; consecutive deltas of
// one event file coalesce. Prints the commit count and wall time.
func BenchmarkAgentTenThousandChunks(b *testing.B) {
	const n = 10000
	r := newRig(b)
	r.prepare()
	r.open()
	var want strings.Builder
	for i := range n {
		want.WriteString(strconv.Itoa(i) + ",")
	}
	for b.Loop() {
		_, before := r.sink.snapshot()
		start := time.Now()
		r.turn(fmt.Sprintf("chunks %d", n))
		evs := r.sink.waitFor(b, "turn end", func(_ Stored, evs []provider.Event) bool {
			return count(evs[len(before):], "run.terminal") > 0
		})
		took := time.Since(start)
		var got strings.Builder
		deltas := 0
		for _, e := range evs[len(before):] {
			if e.EventType == "item.delta" {
				deltas++
				got.WriteString(e.Payload["text"].(string))
			}
		}
		if got.String() != want.String() {
			b.Fatalf("deltas out of order or lost (%d bytes, want %d)", got.Len(), want.Len())
		}
		fmt.Printf("agent 10k chunks: %d item.delta events, all in order, turn took %v\n", deltas, took)
	}
}
