package prp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBackoffFormula checks base × 2^min(n,5) clamped to 1–5000 ms with 75–125 % jitter (prp.md §6.1).
func TestBackoffFormula(t *testing.T) {
	lo := func(int64) int64 { return 0 }
	hi := func(n int64) int64 { return n - 1 }
	mid := func(int64) int64 { return 25 }
	ms := time.Millisecond
	cases := []struct {
		base    time.Duration
		attempt int
		jit     func(int64) int64
		want    time.Duration
	}{
		{25 * ms, 0, mid, 25 * ms},
		{25 * ms, 1, mid, 50 * ms},
		{25 * ms, 5, mid, 800 * ms},
		{25 * ms, 9, mid, 800 * ms}, // exponent capped at 5
		{250 * ms, 5, mid, 5000 * ms},
		{250 * ms, 5, hi, 6250 * ms}, // clamp before jitter
		{250 * ms, 0, lo, 187500 * time.Microsecond},
		{0, 0, mid, 1 * ms},            // clamped up to 1 ms
		{time.Hour, 5, mid, 5000 * ms}, // no overflow
	}
	for _, c := range cases {
		require.Equal(t, c.want, backoffDelay(c.base, c.attempt, c.jit), "%v %d", c.base, c.attempt)
	}
	b := backoff{Base: 25 * ms, jitter: mid}
	var got []time.Duration
	for range 7 {
		got = append(got, b.next())
	}
	require.Equal(t, []time.Duration{25 * ms, 50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 800 * ms}, got)
	b.Reset()
	require.Equal(t, 25*ms, b.next())
	// Real jitter stays within 75–125 %.
	b = backoff{Base: 100 * ms}
	for range 100 {
		d := b.next()
		b.Reset()
		require.GreaterOrEqual(t, d, 75*ms)
		require.LessOrEqual(t, d, 125*ms)
	}
}
