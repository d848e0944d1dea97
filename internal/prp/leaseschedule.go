package prp

import "time"

// minRenewInterval keeps lease renewal from spinning when little lease time is left.
const minRenewInterval = 100 * time.Millisecond

// leaseSchedule is the runner's lease clock (prp.md §5): it renews at half
// the remaining lease, resends the unanswered request at half the then
// remaining time, and says when the lease has expired. It holds no lease
// and reads no clock: the caller passes both, so it is tested alone.
type leaseSchedule struct {
	renewAt time.Time // zero: no renewal planned (no lease, or not renewal v1)
}

// plan sets the next renewal for lease l as of now: when a connection is
// authenticated, a renewal is answered, or a renewal was just sent (the
// next one is then its resend).
func (s *leaseSchedule) plan(now time.Time, l *Lease) {
	if l == nil || l.RenewalVersion != 1 {
		s.renewAt = time.Time{}
		return
	}
	left := time.UnixMilli(l.ExpiresAtUnixMs).Sub(now)
	s.renewAt = now.Add(max(left/2, minRenewInterval))
}

// renewDue reports whether a lease_renew is due at now; planned is false
// when none is planned.
func (s *leaseSchedule) renewDue(now time.Time) (due, planned bool) {
	if s.renewAt.IsZero() {
		return false, false
	}
	return !now.Before(s.renewAt), true
}

// untilRenew is the wait from now to the planned renewal.
func (s *leaseSchedule) untilRenew(now time.Time) time.Duration { return s.renewAt.Sub(now) }

// leaseLeft is the time from now to l's expiry; ok is false without a lease.
// At or past expiry (left <= 0) the runner stops with LeaseExpiredCode.
func leaseLeft(now time.Time, l *Lease) (left time.Duration, ok bool) {
	if l == nil {
		return 0, false
	}
	return time.UnixMilli(l.ExpiresAtUnixMs).Sub(now), true
}
