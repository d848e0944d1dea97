package catalog

import (
	"testing"

	"go.uber.org/goleak"
)

// regexp2's match-timeout clock is one process-wide goroutine that a timed
// match starts and that ends on its own a tick after the last deadline.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/dlclark/regexp2.runClock"))
}
