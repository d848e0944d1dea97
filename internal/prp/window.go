package prp

import (
	"bytes"
	"sync"
	"time"
)

// Send window bounds (a pong must not wait behind a flood).
const (
	// maxUnackedEventBytes bounds the sealed bytes of events written but not
	// yet ACKed on one connection. A pong leaves the writer ahead of queued
	// events, but not ahead of what is already in the socket: everything the
	// core's reader has not yet read stands between the pong and the core.
	// The kernel buffers on both ends hold megabytes on loopback, tens of
	// milliseconds of the core's reader; 64 KiB is about 50 typical events
	// and well under a millisecond of reading. In BenchmarkPingDuringEventFlood
	// on a quiet run it gave e2e p99 4-8 ms where 128 KiB gave 7-12 ms, at
	// the same flood time. One event larger than the window
	// still goes, alone. The flow control of prp.md §8.5 already waits for
	// ACKs between batches, so this only paces inside one burst (an outbox
	// replay, a 128-event batch).
	maxUnackedEventBytes = 64 << 10
	// windowStall is how long the window waits for any ACK progress before
	// it stops pacing until the next ACK arrives: a core that withholds ACKs
	// (or a bug in the sniffing below) degrades to unpaced sending, never to
	// a stall. The reference core ACKs each event right after its commit
	// (prp.md §8.4), far inside a second.
	windowStall = time.Second
)

// sendWindow paces the link's normal lane by the core's cumulative ACK
// (prp.md §8.4): the writer holds the next event while the events in flight
// exceed maxUnackedEventBytes. It changes when frames are written, never
// which frames or their order. The reader reports ACKs (ack), the writer
// asks for room (admit) and records what it wrote (sent).
type sendWindow struct {
	// mu guards acked, inflight, bytes and open.
	mu       sync.Mutex
	acked    int64
	inflight []windowEntry // events written and not yet ACKed, in send order
	bytes    int           // sum of inflight costs
	open     bool          // stalled: unpaced until the next ACK progress
	kick     chan struct{} // ACK progress, for a writer holding an event
}

type windowEntry struct {
	seq  int64
	cost int
}

func newSendWindow() *sendWindow { return &sendWindow{kick: make(chan struct{}, 1)} }

// ack applies a cumulative ackedSourceSeq.
func (w *sendWindow) ack(seq int64) {
	w.mu.Lock()
	if seq <= w.acked {
		w.mu.Unlock()
		return
	}
	w.acked = seq
	n := 0
	for n < len(w.inflight) && w.inflight[n].seq <= seq {
		w.bytes -= w.inflight[n].cost
		n++
	}
	w.inflight = append(w.inflight[:0], w.inflight[n:]...)
	w.open = false
	w.mu.Unlock()
	kick(w.kick)
}

// admit reports whether an event of cost may be written now.
func (w *sendWindow) admit(cost int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.open || w.bytes == 0 || w.bytes+cost <= maxUnackedEventBytes
}

// sent records an event written to the socket.
func (w *sendWindow) sent(seq int64, cost int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if seq <= w.acked {
		return // a replay of a committed event: its re-ACK does not advance
	}
	w.inflight = append(w.inflight, windowEntry{seq, cost})
	w.bytes += cost
}

// stall stops pacing until the next ACK progress.
func (w *sendWindow) stall() {
	w.mu.Lock()
	w.open = true
	w.mu.Unlock()
}

// frameCost is the sealed size of a plaintext, near enough for pacing.
func frameCost(pt []byte) int { return 2*(len(pt)+gcmTagSize) + secureFrameOverhead }

// eventSeq sniffs the sourceSeq of a runner event envelope as
// MarshalEnvelope writes it: "kind" is the first such key (the identity
// and version before it hold no objects), and the payload's first
// "sourceSeq" key is the event's own (its schema and sourceEventId precede
// it; a nested payload comes later). False for anything else: the frame is
// then not paced. A wrong answer only mis-paces (windowStall bounds it); it
// never changes what is sent.
func eventSeq(pt []byte) (int64, bool) {
	i := bytes.Index(pt, []byte(`"kind":`))
	if i < 0 || !bytes.HasPrefix(pt[i+len(`"kind":`):], []byte(`"`+KindEvent+`"`)) {
		return 0, false
	}
	p := bytes.Index(pt, []byte(`"payload":{`))
	if p < 0 {
		return 0, false
	}
	rest := pt[p:]
	j := bytes.Index(rest, []byte(`"sourceSeq":`))
	if j < 0 {
		return 0, false
	}
	rest = rest[j+len(`"sourceSeq":`):]
	var n int64
	k := 0
	for k < len(rest) && k < 16 && rest[k] >= '0' && rest[k] <= '9' {
		n = n*10 + int64(rest[k]-'0')
		k++
	}
	return n, k > 0
}
