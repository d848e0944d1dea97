// Package sharedtest locates the steering share (../shared beside the
// repository) that holds the reference vectors, schemas and fixtures.
//
// Tests read those files in place and never copy them into the repository.
// On a fresh clone without the share they skip with a clear message, so the
// suite still passes.
package sharedtest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// EnvDir overrides where the share is looked for.
const EnvDir = "PCRUNNER_SHARED_DIR"

// Dir returns the share's root directory, or skips the test when it is absent.
func Dir(tb testing.TB) string {
	tb.Helper()
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Skip("sharedtest: no caller information; cannot locate ../shared")
	}
	d := filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", "..", "shared"))
	if st, err := os.Stat(d); err != nil || !st.IsDir() {
		tb.Skipf("reference share not found at %s (set %s); skipping a test that needs the reference data", d, EnvDir)
	}
	return d
}

// Path returns a file inside the share, skipping the test when it is absent.
func Path(tb testing.TB, rel ...string) string {
	tb.Helper()
	p := filepath.Join(append([]string{Dir(tb)}, rel...)...)
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("reference file %s not found: %v", p, err)
	}
	return p
}
