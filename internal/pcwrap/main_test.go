package pcwrap

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (the
// emitter and the wrapper's routines).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
