package state

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEnqueueRefusesBySealedSize: an envelope that fits the frame as
// plaintext but not sealed (2×(len+16)+128) is refused with
// ErrEventTooLarge and leaves the outbox as it was; a smaller connection
// limit (FrameLimit) lowers the bound, and events after a refused one are
// stored.
func TestEnqueueRefusesBySealedSize(t *testing.T) {
	var conn atomic.Int64
	cfg := testConfig(t.TempDir() + "/state")
	cfg.MaxFrameBytes = 8192
	cfg.FrameLimit = func() int { return int(conn.Load()) }
	s := openStore(t, cfg)
	enqueue := func(n int) error {
		return s.Update(func(tx *Tx) error {
			_, err := tx.Enqueue(Event{Type: "item.completed", Priority: P1, Payload: obj(t, map[string]string{"x": strings.Repeat("a", n)})})
			return err
		})
	}
	require.ErrorIs(t, enqueue(6000), ErrEventTooLarge, "6 KB fits 8 KiB as plaintext, not sealed")
	require.Zero(t, s.Summary().HighestSourceSeq)
	require.NoError(t, enqueue(3000))
	env := s.Unsent(0)[0].ByteSize
	require.LessOrEqual(t, SealedFrameBytes(env), 8192)

	conn.Store(4096)
	require.ErrorIs(t, enqueue(3000), ErrEventTooLarge, "the connection's smaller limit applies")
	require.NoError(t, enqueue(1000))
	conn.Store(16384)
	require.ErrorIs(t, enqueue(6000), ErrEventTooLarge, "a larger connection limit never raises --max-frame-bytes")
	require.EqualValues(t, 2, s.Summary().HighestSourceSeq)
}
