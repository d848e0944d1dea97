package pcwrap_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeRuns is how many times TestREADMEDebugBlock runs the block: the
// issue that added it saw the old block fail 3 times in 6 (a send racing
// the wrapper's setup, a stop killing cat), so one pass proves little.
const readmeRuns = 20

// readmeRunBound bounds one run of the block (a warm make build, then a few
// short pcwrap calls; the stop's own bounds are 3 s each).
const readmeRunBound = 2 * time.Minute

// readmeSessionDir is the session directory the README's block uses; it is
// the only text the test replaces.
const readmeSessionDir = "/tmp/s"

// readmeBlock returns the first ```sh block under the README heading
// "## Debugging a session by hand", read at run time so the test checks
// the README as it stands.
func readmeBlock(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Debugging a session by hand\n")
	require.True(t, ok, "README.md has no debugging section")
	if next := strings.Index(section, "\n## "); next >= 0 {
		section = section[:next]
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	require.True(t, ok, "the debugging section has no ```sh block")
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok, "unterminated ```sh block")
	require.Contains(t, block, readmeSessionDir)
	return block
}

// TestREADMEDebugBlock runs the README's "Debugging a session by hand"
// block verbatim under bash -e from the repository root (only the session
// directory replaced by a temporary one), 20 times of 20: every run exits
// 0, prints cat's "hello" through tail --text and an exit frame with code 0
// and signal null, and leaves no session directory behind.
func TestREADMEDebugBlock(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make build and the README block 20 times; not in -short")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	block := readmeBlock(t, root)
	hello := regexp.MustCompile(`(?m)^\{"seq":\d+,"type":"data","stream":"stdout","text":"hello"\}$`)
	exit0 := regexp.MustCompile(`(?m)^\{"seq":\d+,"type":"exit","code":0,"signal":null\}$`)
	for i := range readmeRuns {
		dir := filepath.Join(t.TempDir(), "s")
		out, errOut, err := runReadmeBlock(t, root, strings.ReplaceAll(block, readmeSessionDir, dir))
		require.NoError(t, err, "run %d/%d\nstdout:\n%s\nstderr:\n%s", i+1, readmeRuns, out, errOut)
		assert.Regexp(t, hello, out, "run %d", i+1)
		assert.Regexp(t, exit0, out, "run %d", i+1)
		assert.NoDirExists(t, dir, "run %d: stop removes the session", i+1)
		if t.Failed() {
			t.Fatalf("run %d/%d failed\nstdout:\n%s\nstderr:\n%s", i+1, readmeRuns, out, errOut)
		}
	}
}

// runReadmeBlock runs script under bash -e in root, in its own process
// group. Output goes to files, not pipes: a background pcwrap left behind
// by a failing step would hold a pipe open and hang the wait. Whatever is
// left of the group when bash ends, or after readmeRunBound, is killed.
func runReadmeBlock(t *testing.T, root, script string) (stdout, stderr string, err error) {
	t.Helper()
	dir := t.TempDir()
	outF, err := os.Create(filepath.Join(dir, "stdout"))
	require.NoError(t, err)
	defer outF.Close()
	errF, err := os.Create(filepath.Join(dir, "stderr"))
	require.NoError(t, err)
	defer errF.Close()
	cmd := exec.Command("bash", "-e", "-c", script)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = outF, errF
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	timer := time.AfterFunc(readmeRunBound, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err = cmd.Wait()
	timer.Stop()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	o, _ := os.ReadFile(outF.Name())
	e, _ := os.ReadFile(errF.Name())
	return string(o), string(e), err
}
