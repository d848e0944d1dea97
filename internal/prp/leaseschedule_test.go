package prp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLeaseSchedule: renewal at half the remaining lease, the resend of an
// unanswered request at half the then-remaining time, the floor near
// expiry, no renewal without renewal v1, and expiry (prp.md §5).
func TestLeaseSchedule(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	lease := &Lease{RenewalVersion: 1, ExpiresAtUnixMs: t0.Add(60 * time.Second).UnixMilli()}
	var s leaseSchedule

	_, planned := s.renewDue(t0)
	require.False(t, planned, "nothing planned before the first plan")

	s.plan(t0, lease)
	due, planned := s.renewDue(t0.Add(29 * time.Second))
	require.True(t, planned)
	require.False(t, due)
	require.Equal(t, 30*time.Second, s.untilRenew(t0))
	due, _ = s.renewDue(t0.Add(30 * time.Second))
	require.True(t, due, "half of the 60 s lease has elapsed")

	// Unanswered: the resend comes at half of the 30 s then left.
	t1 := t0.Add(30 * time.Second)
	s.plan(t1, lease)
	require.Equal(t, 15*time.Second, s.untilRenew(t1))

	// Answered with a later expiry: half of the new remaining time.
	renewed := &Lease{RenewalVersion: 1, ExpiresAtUnixMs: t1.Add(60 * time.Second).UnixMilli()}
	s.plan(t1, renewed)
	require.Equal(t, 30*time.Second, s.untilRenew(t1))

	// Close to expiry the interval never drops below the floor.
	t2 := t0.Add(60*time.Second - 50*time.Millisecond)
	s.plan(t2, lease)
	require.Equal(t, minRenewInterval, s.untilRenew(t2))

	// A lease without renewal v1 is never renewed.
	s.plan(t0, &Lease{ExpiresAtUnixMs: lease.ExpiresAtUnixMs})
	_, planned = s.renewDue(t0.Add(time.Hour))
	require.False(t, planned)
	s.plan(t0, nil)
	_, planned = s.renewDue(t0)
	require.False(t, planned)

	// Expiry.
	left, ok := leaseLeft(t0, lease)
	require.True(t, ok)
	require.Equal(t, 60*time.Second, left)
	left, _ = leaseLeft(t0.Add(60*time.Second), lease)
	require.LessOrEqual(t, left, time.Duration(0), "at expiry")
	_, ok = leaseLeft(t0, nil)
	require.False(t, ok)
}
