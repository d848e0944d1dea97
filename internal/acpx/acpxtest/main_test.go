package acpxtest

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit)) }
