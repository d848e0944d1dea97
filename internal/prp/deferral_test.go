package prp

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func ackInbound(seq int) *inbound {
	return &inbound{env: &Envelope{Kind: KindAck}, size: int64(10 + seq)}
}

// TestDeferralGateHoldsAtTheBound: while the owner defers, the reader's
// gate holds once MaxDeferredFrames frames are unsettled, reports it once,
// and lets the reader go when a frame settles or the deferral ends; it
// never holds while the owner does not defer.
func TestDeferralGateHoldsAtTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var deferring atomic.Bool
		var helds, heldFrames atomic.Int32
		d := newDeferral(func() Deferral { return Deferral{Deferring: deferring.Load()} }, nil,
			func(frames int, _ int64) { helds.Add(1); heldFrames.Store(int32(frames)) })
		var ins []*inbound
		for i := range MaxDeferredFrames {
			ins = append(ins, &inbound{env: &Envelope{Kind: KindCommand}, size: int64(i)})
			d.arrive(ins[i])
		}
		require.NoError(t, d.gate(t.Context()), "not deferring: never held")

		deferring.Store(true)
		released := make(chan error, 1)
		go func() { released <- d.gate(t.Context()) }()
		synctest.Wait()
		require.Empty(t, released, "held at the bound")
		require.EqualValues(t, 1, helds.Load())
		require.EqualValues(t, MaxDeferredFrames, heldFrames.Load())
		d.release(ins[0])
		require.NoError(t, <-released, "a settled frame lets one more in")

		d.arrive(ins[0])
		go func() { released <- d.gate(t.Context()) }()
		time.Sleep(10 * deferralPoll)
		require.Empty(t, released)
		deferring.Store(false)
		time.Sleep(deferralPoll)
		require.NoError(t, <-released, "the deferral's end lets the reader go")

		deferring.Store(true)
		ctx, cancel := context.WithCancel(t.Context())
		go func() { released <- d.gate(ctx) }()
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-released, context.Canceled, "the link's end releases the reader")
	})
}

// TestDeferralBytesBound: the byte bound holds the reader too.
func TestDeferralBytesBound(t *testing.T) {
	d := newDeferral(func() Deferral { return Deferral{Deferring: true} }, nil, nil)
	big := &inbound{env: &Envelope{Kind: KindCommand}, size: MaxDeferredBytes - 1}
	d.arrive(big)
	require.False(t, d.full())
	d.arrive(ackInbound(1))
	require.True(t, d.full())
	d.release(big)
	require.False(t, d.full())
}

// TestDeferralMergesConsecutiveAcks: only two ACKs collapse, and only
// while the owner defers; the replaced one is settled.
func TestDeferralMergesConsecutiveAcks(t *testing.T) {
	var deferring atomic.Bool
	d := newDeferral(func() Deferral { return Deferral{Deferring: deferring.Load()} }, nil, nil)
	a, b := ackInbound(1), ackInbound(2)
	cmd := &inbound{env: &Envelope{Kind: KindCommand}, size: 5}
	for _, in := range []*inbound{a, b, cmd} {
		d.arrive(in)
	}
	require.False(t, d.merge(a, b), "not deferring")
	deferring.Store(true)
	require.False(t, d.merge(cmd, b), "a command is not merged")
	require.False(t, d.merge(a, cmd))
	require.True(t, d.merge(a, b))
	require.EqualValues(t, 2, d.frames.Load(), "the replaced ACK is settled")
	require.Equal(t, b.size+cmd.size, d.bytes.Load())
}

// TestDeferralChecksAcksAtArrival: while the owner defers, an ACK below
// its cursor or below an ACK this connection carried, or beyond the
// produced sequence, is refused; equal ACKs are not. Without a deferral
// the check is the ack routine's.
func TestDeferralChecksAcksAtArrival(t *testing.T) {
	rep := Deferral{Deferring: true, AckedSourceSeq: 5, ProducedSourceSeq: 9}
	d := newDeferral(func() Deferral { return rep }, nil, nil)
	require.NoError(t, d.checkAck(5))
	require.ErrorIs(t, d.checkAck(4), ErrDeferredAck)
	require.NoError(t, d.checkAck(7))
	require.NoError(t, d.checkAck(7))
	require.ErrorIs(t, d.checkAck(6), ErrDeferredAck, "below an earlier ACK of the connection")
	require.NoError(t, d.checkAck(9))
	require.ErrorIs(t, d.checkAck(10), ErrDeferredAck)
	rep.Deferring = false
	require.NoError(t, d.checkAck(1))
	require.NoError(t, d.checkAck(100))
}
