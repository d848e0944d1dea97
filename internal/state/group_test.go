package state

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// TestChunkNeverRewritten: the outbox refuses an output.body.chunk its
// sanitiser would change (its digests cover its exact text) and stores one
// it leaves alone byte for byte; any other event is still redacted.
func TestChunkNeverRewritten(t *testing.T) {
	s, _ := newStore(t)
	secret := "token ghp_" + strings.Repeat("a", 36)
	err := s.Update(func(tx *Tx) error {
		_, err := tx.Enqueue(Event{Type: prp.EventOutputBodyChunk, Priority: P1, Payload: obj(t, map[string]string{"text": secret})})
		return err
	})
	require.ErrorIs(t, err, ErrChunkRewritten)
	require.Empty(t, s.Unacked())

	enqueue(t, s, Event{Type: prp.EventOutputBodyChunk, Priority: P1, Payload: jsonenc.MustMarshal(map[string]string{"text": "plain <text>"})})
	enqueue(t, s, Event{Type: prp.EventItemCompleted, Priority: P1, Payload: obj(t, map[string]string{"text": secret})})
	out := s.Unacked()
	require.Len(t, out, 2)
	require.Contains(t, string(out[0].Envelope), `"text":"plain <text>"`)
	require.Contains(t, string(out[0].Envelope), `"schemaVersion":2`, "a chunk is a v2 event")
	require.NotContains(t, string(out[1].Envelope), "ghp_")
}

// TestEnqueueGroupAllOrNone: a group that does not fit the non-P0 room, the
// frame limit or the group bound stores nothing and leaves the lifecycle
// alone (no backpressure: the caller sends less); one that fits is stored
// in order with contiguous sequence numbers and never coalesces.
func TestEnqueueGroupAllOrNone(t *testing.T) {
	cfg := testConfig(t.TempDir() + "/state")
	cfg.MaxOutboxBytes, cfg.P0ReserveBytes = 64<<10, 32<<10
	s := openStore(t, cfg)
	ev := func(n int) Event {
		return Event{Type: prp.EventItemDelta, Priority: P2, CoalesceKey: "k", Payload: obj(t, map[string]string{"text": strings.Repeat("a", n)})}
	}
	group := func(evs []Event, limit int) error {
		return s.Update(func(tx *Tx) error { _, err := tx.EnqueueGroup(evs, limit); return err })
	}
	require.ErrorIs(t, group([]Event{ev(20 << 10), ev(20 << 10)}, 128), ErrGroupDoesNotFit, "40 KiB > 32 KiB of room")
	require.ErrorIs(t, group([]Event{ev(10), ev(10), ev(10)}, 2), ErrGroupDoesNotFit, "over the group bound")
	require.ErrorIs(t, group([]Event{ev(10), ev(40 << 10)}, 128), ErrGroupDoesNotFit, "over the frame limit... and the room")
	require.Empty(t, s.Unacked())
	require.NotEqual(t, Backpressure, s.Summary().Lifecycle, "a refused group is not backpressure")

	require.NoError(t, group([]Event{ev(100), ev(100), ev(100)}, 3))
	out := s.Unacked()
	require.Len(t, out, 3, "no event of a group coalesces")
	for i, e := range out {
		require.EqualValues(t, i+1, e.SourceSeq)
	}
	enqueue(t, s, ev(5))
	require.Len(t, s.Unacked(), 4, "nothing merges into a group's last event")
}

// TestLargeEventRefusedAtEnqueue: with the default frame limit (1 MiB) an
// event of any type whose sealed frame exceeds it is refused at enqueue
// with ErrEventTooLarge, so it never sits at the head of the outbox; the
// next event is stored and is the next to send.
func TestLargeEventRefusedAtEnqueue(t *testing.T) {
	cfg := testConfig(t.TempDir() + "/state")
	cfg.MaxOutboxBytes, cfg.P0ReserveBytes = 16<<20, 1<<20
	s := openStore(t, cfg)
	// 600 KB fits the frame as plaintext, not sealed (about 2×).
	big := obj(t, map[string]string{"message": strings.Repeat("a", 600_000)})
	for i, typ := range prp.EventTypes() {
		p := Priority(i % 3)
		err := s.Update(func(tx *Tx) error {
			_, err := tx.Enqueue(Event{Type: typ, Priority: p, Payload: big})
			return err
		})
		require.ErrorIs(t, err, ErrEventTooLarge, "%s P%d", typ, p)
	}
	require.Empty(t, s.Unacked())
	seq := enqueue(t, s, Event{Type: prp.EventItemCompleted, Priority: P1, Payload: obj(t, map[string]string{"text": "after"})})
	require.Equal(t, seq, s.Unsent(0)[0].SourceSeq)
	require.NotEqual(t, Backpressure, s.Summary().Lifecycle)
}
