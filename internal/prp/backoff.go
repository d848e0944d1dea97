package prp

import (
	"math/rand/v2"
	"time"
)

// Reconnect backoff bounds (prp.md §6.1, R-transport).
const (
	// defaultReconnectDelay is --reconnect-delay-ms's default (the server passes 250 ms).
	defaultReconnectDelay = 25 * time.Millisecond
	// backoffMinDelay and backoffMaxDelay clamp base×2^n before jitter.
	backoffMinDelay = time.Millisecond
	backoffMaxDelay = 5000 * time.Millisecond
	// backoffMaxExponent caps the doubling: base × 2^min(attempt, 5).
	backoffMaxExponent = 5
	// backoffJitterMinPct and backoffJitterMaxPct bound the jitter factor (75–125 %).
	backoffJitterMinPct = 75
	backoffJitterMaxPct = 125
)

// backoff computes reconnect delays: base × 2^min(attempt,5), clamped to
// 1–5000 ms, times a uniform jitter in [75 %, 125 %]. Reset after each
// successful authentication. Not safe for concurrent use.
type backoff struct {
	Base    time.Duration
	attempt int
	// jitter returns a value in [0, n); nil means math/rand/v2.
	jitter func(n int64) int64
}

// next returns the delay before the next attempt and counts the attempt.
func (b *backoff) next() time.Duration {
	d := backoffDelay(b.Base, b.attempt, b.jitterFn())
	if b.attempt < backoffMaxExponent {
		b.attempt++
	}
	return d
}

// Reset restarts the doubling; called on each successful authentication.
func (b *backoff) Reset() { b.attempt = 0 }

func (b *backoff) jitterFn() func(int64) int64 {
	if b.jitter != nil {
		return b.jitter
	}
	return rand.Int64N
}

// backoffDelay is the pure formula behind backoff: jitter(n) must return a
// value in [0, n).
func backoffDelay(base time.Duration, attempt int, jitter func(n int64) int64) time.Duration {
	if attempt < 0 {
		attempt = 0
	}
	base = min(max(base, backoffMinDelay), backoffMaxDelay) // keeps the shift from overflowing
	d := base << min(attempt, backoffMaxExponent)
	d = min(max(d, backoffMinDelay), backoffMaxDelay)
	pct := int64(backoffJitterMinPct) + jitter(backoffJitterMaxPct-backoffJitterMinPct+1)
	return time.Duration(int64(d) * pct / 100)
}
