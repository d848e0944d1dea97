package prp

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/pcrunner/pcrunner/internal/clock"
)

// Inbound deferral (durability.md §6.2 item 2): while the owner's routines
// are blocked on something other than the socket (a state write waiting
// for disk space), the frames that arrive wait in order for them, bounded.
const (
	// MaxDeferredFrames bounds the inbound frames a connection holds
	// unsettled while the owner defers (durability.md §6.2 item 2: 128
	// frames).
	MaxDeferredFrames = 128
	// MaxDeferredBytes bounds their plaintext bytes (§6.2 item 2: 32 MiB).
	MaxDeferredBytes = 32 << 20
	// deferralPoll is how often a reader held at the bound asks the owner
	// again whether it still defers, besides waking at each settled frame.
	deferralPoll = 100 * time.Millisecond
)

// ErrDeferredAck is a cumulative ACK that arrived while the owner defers
// and is below the cursor it will move (the owner's cursor, or an earlier
// ACK of this connection) or beyond the produced sequence: a protocol
// error, fatal as it would be once applied (prp.md §8.4).
var ErrDeferredAck = errors.New("protocol error: deferred ack outside the cursor and the produced sequence")

// Deferral is what the owner reports to the reader (ClientConfig.Deferral).
type Deferral struct {
	// Deferring: the owner's routines are blocked; inbound frames wait for
	// them in order, within MaxDeferredFrames and MaxDeferredBytes.
	Deferring bool
	// AckedSourceSeq and ProducedSourceSeq bound a deferred ACK: the
	// owner's cursor and the highest sequence it has produced.
	AckedSourceSeq, ProducedSourceSeq int64
}

// inbound is one forwarded frame as the dispatch routines receive it: the
// decoded envelope and its plaintext size, released once it is settled.
type inbound struct {
	env  *Envelope
	size int64
}

// deferral counts one connection's unsettled inbound frames: forwarded by
// the reader and not yet settled by the dispatch routines (an ack applied,
// a command's handler returned, or the frame dropped with the connection).
// Its fields are atomics: the reader adds, the dispatch routines release.
type deferral struct {
	report func() Deferral // nil: never deferring
	clk    clock.Clock
	frames atomic.Int64
	bytes  atomic.Int64
	// lastAck is the highest ACK this connection carried, -1 before any.
	lastAck atomic.Int64
	kick    chan struct{}
	// onHeld observes the reader stopping at the bound (ClientConfig.OnReadHeld).
	onHeld func(frames int, bytes int64)
}

func newDeferral(report func() Deferral, clk clock.Clock, onHeld func(int, int64)) *deferral {
	d := &deferral{report: report, clk: clock.Or(clk), kick: make(chan struct{}, 1), onHeld: onHeld}
	d.lastAck.Store(-1)
	return d
}

func (d *deferral) state() Deferral {
	if d.report == nil {
		return Deferral{}
	}
	return d.report()
}

// arrive counts a forwarded frame.
func (d *deferral) arrive(in *inbound) {
	d.frames.Add(1)
	d.bytes.Add(in.size)
}

// release settles a frame counted by arrive and wakes a held reader.
func (d *deferral) release(in *inbound) {
	d.frames.Add(-1)
	d.bytes.Add(-in.size)
	kick(d.kick)
}

// full reports whether the unsettled frames reached a bound.
func (d *deferral) full() bool {
	return d.frames.Load() >= MaxDeferredFrames || d.bytes.Load() >= MaxDeferredBytes
}

// gate runs in the reader before each read: while the owner defers and
// the unsettled frames are at a bound, the reader reads nothing more, so
// the peer's frames wait in the socket and none is dropped. It returns
// ctx's error once the link ends.
func (d *deferral) gate(ctx context.Context) error {
	held := false
	for d.full() && d.state().Deferring {
		if !held && d.onHeld != nil {
			d.onHeld(int(d.frames.Load()), d.bytes.Load())
		}
		held = true
		t := d.clk.NewTimer(deferralPoll)
		select {
		case <-d.kick:
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
	return nil
}

// checkAck runs in the reader for every ACK: while the owner defers, an
// ACK below the cursor it will move or beyond the produced sequence is
// refused at once, before it waits behind the blocked routines.
func (d *deferral) checkAck(seq int64) error {
	last := d.lastAck.Load()
	if seq > last {
		d.lastAck.Store(seq) // only the reader writes it
	}
	s := d.state()
	if !s.Deferring {
		return nil // the ack routine applies and checks it at once
	}
	if cursor := max(s.AckedSourceSeq, last); seq < cursor {
		return fmt.Errorf("%w: ack %d below cursor %d", ErrDeferredAck, seq, cursor)
	}
	if seq > s.ProducedSourceSeq {
		return fmt.Errorf("%w: ack %d beyond produced %d", ErrDeferredAck, seq, s.ProducedSourceSeq)
	}
	return nil
}

// merge collapses consecutive deferred ACKs: when the newest frame still
// waiting for the ack routine (last) and the arriving one (next) are both
// ACKs and the owner defers, next replaces last, which is settled. ACKs
// are cumulative and checkAck has ordered them, so applying next alone is
// applying both.
func (d *deferral) merge(last, next any) bool {
	l, ok1 := last.(*inbound)
	n, ok2 := next.(*inbound)
	if !ok1 || !ok2 || l.env.Kind != KindAck || n.env.Kind != KindAck || !d.state().Deferring {
		return false
	}
	d.release(l)
	return true
}
