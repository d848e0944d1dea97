package acpx

import (
	"testing"
	"time"
)

// testWait bounds every wait in these tests; it is a safety net, never an
// asserted figure.
const testWait = 15 * time.Second

// recv receives from ch within testWait (every wait in a test is bounded).
func recv[T any](t testing.TB, ch <-chan T) (T, bool) {
	t.Helper()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-time.After(testWait):
		t.Fatalf("no value within %v", testWait)
		var zero T
		return zero, false
	}
}

// first is recv's value alone.
func first[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	v, _ := recv(t, ch)
	return v
}

func settled(m Inbound) bool { return m.Kind == KindTurnSettled }
