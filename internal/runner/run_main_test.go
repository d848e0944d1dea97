package runner

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// TestMain checks the whole package for leaked goroutines. It is the only
// TestMain of package runner; add package-wide setup here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit))
}
