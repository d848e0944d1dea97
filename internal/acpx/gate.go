package acpx

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/pcrunner/pcrunner/internal/clock"
)

// ColdStartGate limits concurrent cold session.open handshakes per runnerd
// (acp.md §4.2). Adopt and resume take no slot. A waiter that has not got
// a slot after coldStartGateMaxWait proceeds without one (fail-open, as
// Paperclip's gate does).
type ColdStartGate struct {
	clock clock.Clock
	slots chan struct{} // nil: gate disabled
	// released counts slots given back, so a test can tell a launch that
	// waited for a slot from one that broke the bound.
	released atomic.Uint64
}

// NewColdStartGate returns a gate with max slots; max ≤ 0 disables it.
func NewColdStartGate(max int, clk clock.Clock) *ColdStartGate {
	g := &ColdStartGate{clock: clock.Or(clk)}
	if max > 0 {
		g.slots = make(chan struct{}, max)
	}
	return g
}

// Acquire waits for a slot. It returns a release func (a no-op when the
// gate is disabled or the wait failed open) and whether a slot is held. The
// cold bound starts after Acquire returns.
func (g *ColdStartGate) Acquire(ctx context.Context) (release func(), held bool, err error) {
	if g.slots == nil {
		return func() {}, false, nil
	}
	select {
	case g.slots <- struct{}{}:
		return g.releaser(), true, nil
	default:
	}
	t := g.clock.NewTimer(coldStartGateMaxWait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return g.releaser(), true, nil
	case <-t.C():
		return func() {}, false, nil
	case <-ctx.Done():
		return func() {}, false, fmt.Errorf("acquire cold-start slot: %w", ctx.Err())
	}
}

func (g *ColdStartGate) releaser() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			<-g.slots
			g.released.Add(1)
		})
	}
}

// Released reports how many slots have been given back so far.
func (g *ColdStartGate) Released() uint64 { return g.released.Load() }
