package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// deferFillers is how many frames past the three commands and the ACKs
// the core sends during the wait: well over prp.MaxDeferredFrames.
const deferFillers = prp.MaxDeferredFrames + 72

// orderedStart is a turn.start handler that records the controllerSeq of
// each effect, in the order the effects run.
func orderedStart(mu *sync.Mutex, order *[]uint64) map[string]func(emit) handler {
	return map[string]func(emit) handler{"turn.start": func(emit) handler {
		return func(_ context.Context, cmd *prp.Command) (json.RawMessage, error) {
			mu.Lock()
			*order = append(*order, cmd.ControllerSeq)
			mu.Unlock()
			return nil, nil
		}
	}}
}

// TestDurability29_DeferredFramesBoundedAndApplied (durability.md §11
// scenario 29, §6.2 item 2): "In a pressure wait the core sends three
// commands, ACKs, then over 128 frames → reading stops at the bound,
// nothing dropped; after recovery the commands run in arrival order, one
// result each." The fillers are command_result_acks that match no result
// (consecutive ACKs would collapse into one frame). While the reader is
// held the core's ping goes unanswered; once space returns every deferred
// frame applies, the four commands (the blocked one and the three) run
// once each in controllerSeq order, and the pong comes.
func TestDurability29_DeferredFramesBoundedAndApplied(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		var full atomic.Bool
		var mu sync.Mutex
		var order []uint64
		type held struct {
			frames int
			bytes  int64
		}
		helds := make(chan held, 16)
		run, first := startUnderPressureWith(t, h, &full, options{
			Handlers:   orderedStart(&mu, &order),
			OnReadHeld: func(f int, b int64) { helds <- held{f, b} },
		})

		// The core journals three more commands; it keeps one in flight,
		// so they are sent raw, as a core that does not wait would.
		cmds := []prp.Command{first}
		for range 3 {
			c := h.queue("turn.start", `{"text":"y"}`)
			h.sendRaw(prp.KindCommand, c)
			cmds = append(cmds, c)
		}
		acked := h.core.Snapshot().AckedSourceSeq
		h.sendRaw(prp.KindAck, prp.AckPayload{AckedSourceSeq: acked})
		h.sendRaw(prp.KindAck, prp.AckPayload{AckedSourceSeq: acked}) // collapses into the one before
		for i := range deferFillers {
			h.sendRaw(prp.KindCommandResultAck, prp.CommandResultAckPayload{
				CommandID: fmt.Sprintf("command_prp_filler_%d", i), CommandType: "turn.start",
				ControllerSeq: 1, Status: "completed",
			})
		}
		synctest.Wait()
		select {
		case got := <-helds:
			require.Equal(t, prp.MaxDeferredFrames, got.frames, "reading stops at the frame bound")
			require.Less(t, got.bytes, int64(prp.MaxDeferredBytes))
		default:
			t.Fatal("the reader never stopped at the bound")
		}
		pongs := h.core.Snapshot().Pongs
		require.NoError(t, h.core.Ping(t.Context()))
		time.Sleep(time.Second)
		require.Equal(t, pongs, h.core.Snapshot().Pongs, "nothing is read past the bound")
		mu.Lock()
		require.Empty(t, order, "no effect before the blocked write completes")
		mu.Unlock()
		select {
		case err := <-run.done:
			t.Fatalf("runner ended under pressure: %v", err)
		default:
		}

		full.Store(false)
		for _, c := range cmds {
			require.Equal(t, "completed", h.waitResult(c.CommandID).Status, c.CommandID)
		}
		h.waitCore(func(s control.Snapshot) bool { return s.Pongs > pongs })
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		want := []uint64{}
		for _, c := range cmds {
			want = append(want, c.ControllerSeq)
		}
		require.Equal(t, want, order, "each command ran once, in arrival order")
		requireEachEventOnce(t, h.core.Snapshot())
		requireNoFailure(t, h)
	})
}

// TestDurability29_DeferredAckOutsideRangeIsFatal (durability.md §6.2
// item 2): during the wait an ACK beyond the produced sequence, or below
// an ACK the connection already carried, is a protocol error at arrival,
// as it would be once applied: runnerd exits non-zero and the blocked
// command leaves no result.
func TestDurability29_DeferredAckOutsideRangeIsFatal(t *testing.T) {
	for name, acks := range map[string]func(acked int64) []int64{
		"beyond-produced": func(acked int64) []int64 { return []int64{acked + 1000} },
		"below-cursor":    func(acked int64) []int64 { return []int64{acked, acked - 1} },
	} {
		t.Run(name, func(t *testing.T) {
			simTest(t, nil, func(t *testing.T, h *harness) {
				var full atomic.Bool
				var effects atomic.Int32
				run, cmd := startUnderPressure(t, h, &full, &effects)
				acked := h.core.Snapshot().AckedSourceSeq
				require.Positive(t, acked, "the connection's events were acknowledged")
				for _, a := range acks(acked) {
					h.sendRaw(prp.KindAck, prp.AckPayload{AckedSourceSeq: a})
				}
				err := run.wait(t)
				require.ErrorIs(t, err, prp.ErrDeferredAck)
				require.Zero(t, effects.Load())
				require.Nil(t, h.core.Snapshot().Results[cmd.CommandID])
			})
		})
	}
}

// TestDurability29_ConsecutiveAcksCollapse (durability.md §6.2 item 2):
// during the wait a burst of ACKs well over the frame bound collapses
// into the newest one waiting, so it does not fill the bound: the reader
// keeps reading, and a ping behind the burst is answered with
// storagePressure while the write still waits.
func TestDurability29_ConsecutiveAcksCollapse(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		var full atomic.Bool
		var effects atomic.Int32
		var helds atomic.Int32
		_, cmd := startUnderPressureWith(t, h, &full, options{
			Handlers:   countingStart(&effects),
			OnReadHeld: func(int, int64) { helds.Add(1) },
		})
		acked := h.core.Snapshot().AckedSourceSeq
		for range deferFillers {
			h.sendRaw(prp.KindAck, prp.AckPayload{AckedSourceSeq: acked})
		}
		pongs := h.core.Snapshot().Pongs
		h.sendRaw(prp.KindPing, struct{}{}) // behind the burst, on the normal lane
		s := h.waitCore(func(s control.Snapshot) bool { return s.Pongs > pongs })
		require.True(t, *s.LastPong.StoragePressure, "answered during the wait")
		require.Zero(t, helds.Load(), "the collapsed ACKs never reached the bound")
		require.Zero(t, effects.Load())

		full.Store(false)
		require.Equal(t, "completed", h.waitResult(cmd.CommandID).Status)
		require.EqualValues(t, 1, effects.Load())
	})
}
