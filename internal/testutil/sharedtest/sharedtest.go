// Package sharedtest locates the steering share (../shared beside the
// repository) that holds the reference vectors, schemas and fixtures.
//
// Tests read those files in place and never copy them into the repository.
// On a fresh clone without the share they skip with a clear message, so the
// suite still passes.
package sharedtest

import (
	"errors"
	"os"
	"path/filepath"
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
	root, err := ModuleRoot()
	if err != nil {
		tb.Skipf("sharedtest: %v; cannot locate ../shared (set %s)", err, EnvDir)
	}
	d := filepath.Join(filepath.Dir(root), "shared")
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

// ModuleRoot walks up from the working directory (go test runs a test in its
// package's directory) to the folder holding go.mod. It does not use the
// compiled file name, which -trimpath rewrites.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if st, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !st.IsDir() {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
