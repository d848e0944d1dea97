// Package clock is the one injected time source of runnerd: every timer,
// ticker and timestamp in internal/prp, internal/runner, internal/agent and
// internal/acpx comes from a Clock passed in their configuration, so tests
// can run hours of protocol time in a manual clock or in testing/synctest.
//
// System, the default, is the time package itself; under testing/synctest it
// is already simulated time, so most tests need no fake at all.
package clock

import "time"

// Clock creates timers and reads the time. Implementations must be safe for
// concurrent use.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f in its own goroutine after d; the Timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a stoppable one-shot timer (time.Timer's contract).
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a stoppable periodic ticker (time.Ticker's contract).
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// System is the real clock.
var System Clock = system{}

// Or returns c, or System when c is nil, so a zero config field means the
// real clock.
func Or(c Clock) Clock {
	if c == nil {
		return System
	}
	return c
}

type system struct{}

func (system) Now() time.Time                            { return time.Now() }
func (system) NewTimer(d time.Duration) Timer            { return sysTimer{time.NewTimer(d)} }
func (system) NewTicker(d time.Duration) Ticker          { return sysTicker{time.NewTicker(d)} }
func (system) AfterFunc(d time.Duration, f func()) Timer { return sysTimer{time.AfterFunc(d, f)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time        { return t.t.C }
func (t sysTimer) Stop() bool                 { return t.t.Stop() }
func (t sysTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type sysTicker struct{ t *time.Ticker }

func (t sysTicker) C() <-chan time.Time   { return t.t.C }
func (t sysTicker) Stop()                 { t.t.Stop() }
func (t sysTicker) Reset(d time.Duration) { t.t.Reset(d) }
