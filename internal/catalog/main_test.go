package catalog

import (
	"testing"

	"go.uber.org/goleak"
)

// regexp2's match-timeout clock is one process-wide goroutine it starts on
// the first timed match and keeps.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/dlclark/regexp2.runClock"))
}
