package state

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The outbox-fill benchmark's shape (issue: a durable append must not cost
// more at a full outbox than at an empty one).
const (
	// fillMaxOutboxBytes bounds the outbox: above the server's 16 MiB,
	// since fillMinEvents of this package's smallest envelopes (about 570
	// bytes) are above 16 MiB.
	fillMaxOutboxBytes = 24 << 20
	// fillBytes is the outbox built before the full-outbox appends.
	fillBytes = 15 << 20
	// fillMinEvents: the full outbox holds at least this many events.
	fillMinEvents = 30000
	// fillBatch is how many events one Update appends while filling.
	fillBatch = 1000
	// fillAppends is how many single-event appends each side measures.
	fillAppends = 200
)

// fillEvent is a small provider delta (an envelope of about 600 bytes).
var fillEvent = Event{Type: "item.delta", Priority: P1,
	Payload: json.RawMessage(`{"channel":"progress","delta":"` + strings.Repeat("x", 16) + `"}`)}

// timedAppend returns how long one single-event durable append took;
// ack acknowledges the event at once (in memory, as a connected runner
// does).
func timedAppend(b *testing.B, s *Store, ack bool) time.Duration {
	start := time.Now()
	seq := enqueueB(b, s, fillEvent)
	d := time.Since(start)
	if ack {
		if _, err := s.ApplyAck(seq, 2); err != nil {
			b.Fatal(err)
		}
	}
	return d
}

func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

func enqueueB(b *testing.B, s *Store, ev Event) uint64 {
	var seq uint64
	if err := s.Update(func(tx *Tx) error {
		var err error
		seq, err = tx.Enqueue(ev)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return seq
}

// BenchmarkOutboxFill measures the median single-event durable append at
// an empty outbox (each event acknowledged at once) and at a full one (at
// least fillBytes and fillMinEvents events, built through the store in
// batches of fillBatch). The two stores are open side by side and their
// appends alternate, so a noisy neighbour slows both alike.
// outbox-fill-ratio is full over empty (target <= 1.5).
//
//	go test -run '^$' -bench OutboxFill -benchtime 1x ./internal/state
func BenchmarkOutboxFill(b *testing.B) {
	open := func(name string) *Store {
		s, err := Open(Config{Dir: filepath.Join(b.TempDir(), name), Identity: testIdentity, MaxOutboxBytes: fillMaxOutboxBytes})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}
	for range b.N {
		empty, full := open("empty"), open("full")
		for full.Summary().OutboxBytes < fillBytes || full.Summary().HighestSourceSeq < fillMinEvents {
			if err := full.Update(func(tx *Tx) error {
				for range fillBatch {
					if _, err := tx.Enqueue(fillEvent); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
		sum := full.Summary()
		var e, f []time.Duration
		for range fillAppends {
			e = append(e, timedAppend(b, empty, true))
			f = append(f, timedAppend(b, full, false))
		}
		pe, pf := p50(e), p50(f)
		b.ReportMetric(float64(pe.Microseconds())/1000, "empty-p50-ms")
		b.ReportMetric(float64(pf.Microseconds())/1000, "full-p50-ms")
		b.ReportMetric(float64(sum.HighestSourceSeq-sum.AckedSourceSeq), "full-events")
		b.ReportMetric(float64(sum.OutboxBytes)/(1<<20), "full-MiB")
		b.ReportMetric(float64(pf)/float64(pe), "outbox-fill-ratio")
	}
}
