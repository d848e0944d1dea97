package state

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// foldOneByOne is the outbox's merge applied event by event: the oracle
// for fold.
func foldOneByOne(evs []Event, maxBytes int) []Event {
	var out []Event
	size := 0
	for _, e := range evs {
		if n := len(out); n > 0 && foldable(out[n-1], e) && size+len(e.Payload) <= maxBytes {
			if merged, err := mergeDelta(out[n-1].Payload, e.Payload); err == nil {
				out[n-1].Payload = merged
				size += len(e.Payload)
				continue
			}
		}
		out = append(out, e)
		size = len(e.Payload)
	}
	return out
}

func randomDelta(r *rand.Rand) Event {
	item := fmt.Sprintf("item-%d", r.IntN(2))
	p := map[string]any{"itemId": item, "kind": "assistant_message"}
	switch r.IntN(8) {
	case 0:
		p["text"] = r.IntN(100) // a non-string text: the newest value wins
	case 1:
		delete(p, "kind")
		p["delta"] = fmt.Sprintf("d%d", r.IntN(100))
	case 2:
		p["extra"] = []int{r.IntN(9)}
	default:
		p["text"] = fmt.Sprintf("<%d&%d>", r.IntN(100), r.IntN(100))
	}
	b, _ := json.Marshal(p)
	ev := Event{Type: "item.delta", Priority: P2, Payload: b, CoalesceKey: item}
	switch r.IntN(10) {
	case 0:
		ev.Priority = P1
	case 1:
		ev.Payload = json.RawMessage(`[1,2]`) // not an object: never merged
	}
	return ev
}

// TestFoldMatchesOneByOneMerge: folding a batch gives exactly the events
// and payload bytes of merging its deltas one at a time.
func TestFoldMatchesOneByOneMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		evs := make([]Event, r.IntN(30))
		for i := range evs {
			evs[i] = randomDelta(r)
		}
		maxBytes := 64 + r.IntN(2000)
		want := foldOneByOne(evs, maxBytes)
		got := fold(evs, maxBytes)
		require.Equal(t, len(want), len(got), "round %d", round)
		for i := range want {
			require.Equal(t, string(want[i].Payload), string(got[i].Payload), "round %d event %d", round, i)
			require.Equal(t, want[i].Priority, got[i].Priority)
			require.Equal(t, want[i].CoalesceKey, got[i].CoalesceKey)
		}
	}
}

// BenchmarkEnqueueDeltas: a commit of 128 one-chunk deltas of one item,
// enqueued one by one (the outbox re-encodes the merged event each time)
// and folded first.
func BenchmarkEnqueueDeltas(b *testing.B) {
	evs := make([]Event, 128)
	for i := range evs {
		evs[i] = Event{Type: "item.delta", Priority: P2, CoalesceKey: "item-1",
			Payload: json.RawMessage(fmt.Sprintf(`{"itemId":"item-1","kind":"assistant_message","text":"%d,"}`, i))}
	}
	for _, folded := range []bool{false, true} {
		b.Run(fmt.Sprintf("folded=%v", folded), func(b *testing.B) {
			s, err := Open(testConfig(filepath.Join(b.TempDir(), "state")))
			require.NoError(b, err)
			defer s.Close()
			for b.Loop() {
				require.NoError(b, s.Update(func(tx *Tx) error {
					batch := evs
					if folded {
						batch = tx.Fold(evs)
					}
					for _, e := range batch {
						if _, err := tx.Enqueue(e); err != nil {
							return err
						}
					}
					return nil
				}))
				_, _ = s.ApplyAck(s.Summary().HighestSourceSeq, 2)
			}
		})
	}
}
