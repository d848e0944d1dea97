// Package testbin builds this repository's binaries for black-box tests.
//
// Tests run the real static binaries, as operators do, so that a scenario
// exercises the same code path as production. Each test process builds a
// binary at most once; the Go build cache makes repeated builds cheap.
// Every TestMain of a package that builds one ends through Exit, which
// removes them, so no test run leaves binaries behind.
package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pcrunner/pcrunner/internal/testutil/sharedtest"
)

// HooksTag is the one build tag that compiles the test hooks of runnerd and
// pcwrap (the files whose //go:build line names it); binaries built without
// it carry none.
const HooksTag = "testhooks"

var (
	// mu guards built and dir: a test process builds from parallel tests.
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// Exit removes the folder of the binaries this process built, then exits
// with code. A TestMain hands it to goleak:
// goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit)).
func Exit(code int) {
	mu.Lock()
	if dir != "" {
		os.RemoveAll(dir)
	}
	mu.Unlock()
	os.Exit(code)
}

// Path returns the path of cmd/<name>, built statically (CGO_ENABLED=0,
// -trimpath) into a per-process temporary directory. Extra build tags (for
// test hooks) select a separate build.
func Path(tb testing.TB, name string, tags ...string) string {
	tb.Helper()
	return Build(tb, "cmd/"+name, tags...)
}

// Build is Path for any main package, named by its directory relative to
// the repository root (for example "test/fakeacp").
func Build(tb testing.TB, pkg string, tags ...string) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	key := strings.ReplaceAll(pkg, "/", "_")
	for _, t := range tags {
		key += "+" + t
	}
	if p, ok := built[key]; ok {
		return p
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "pcrunner-bin-")
		if err != nil {
			tb.Fatalf("make bin dir: %v", err)
		}
		dir = d
	}
	out := filepath.Join(dir, key)
	args := []string{"build", "-trimpath", "-o", out}
	if len(tags) > 0 {
		tagList := tags[0]
		for _, t := range tags[1:] {
			tagList += "," + t
		}
		args = append(args, "-tags", tagList)
	}
	args = append(args, "./"+pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = RepoRoot(tb)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[key] = out
	return out
}

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	root, err := sharedtest.ModuleRoot()
	if err != nil {
		tb.Fatalf("testbin: %v", err)
	}
	return root
}

// GatedPcwrap writes a pcwrap that execs the real one only once the file
// gate exists. Until then it runs under its final pid without
// .pcwrap.lock, as a pcwrap still starting does: restart tests hold it
// there.
func GatedPcwrap(tb testing.TB) (path, gate string) {
	tb.Helper()
	gate = filepath.Join(tb.TempDir(), "gate")
	path = filepath.Join(tb.TempDir(), "pcwrap-gated")
	script := "#!/bin/sh\nwhile [ ! -e '" + gate + "' ]; do sleep 0.01; done\nexec '" + Path(tb, "pcwrap") + "' \"$@\"\n"
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		tb.Fatalf("write gated pcwrap: %v", err)
	}
	return path, gate
}
