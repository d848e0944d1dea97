package config

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks the whole package for leaked goroutines (the diagnostics
// stderr copier is one). It is the only TestMain of package config; add
// package-wide setup here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
