package pcwrap_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// pcwrapSources returns the non-test Go sources that make up pcwrap's own
// logic (debug.go, the colleague's subcommands, and the client half of
// sessiondir are not the wrapper), keyed by repo-relative path.
func pcwrapSources(t *testing.T) map[string]string {
	root := testbin.RepoRoot(t)
	out := map[string]string{}
	globs := []string{
		"cmd/pcwrap/*.go",
		"internal/pcwrap/*.go",
		"internal/shutdown/*.go",
		"internal/stdinpoll/*.go",
		"internal/sessiondir/layout*.go",
		"internal/sessiondir/identity*.go",
		"internal/sessiondir/probe*.go",
		"internal/sessiondir/lock*.go",
		"internal/frame/*.go",
	}
	for _, g := range globs {
		m, err := filepath.Glob(filepath.Join(root, g))
		require.NoError(t, err)
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			if strings.HasSuffix(p, "_test.go") || rel == filepath.Join("cmd", "pcwrap", "debug.go") {
				continue
			}
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			out[rel] = string(b)
		}
	}
	require.NotEmpty(t, out)
	return out
}

func grep(src map[string]string, re *regexp.Regexp) []string {
	var hits []string
	for p, s := range src {
		for _, line := range strings.Split(s, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			if re.MatchString(line) {
				hits = append(hits, p+": "+strings.TrimSpace(line))
			}
		}
	}
	return hits
}

// TestPcwrap21_SourceInvariants (T11) checks by inspection: one
// exec.Cmd per pcwrap; every signal goes to the group through the live
// handle or to one descendant through a pidfd opened before its identity
// is re-checked (no stored pid, no Process.Kill/Signal); one identity
// latch that is never cleared; the identity capture precedes the spawn
// and the reader start.
func TestPcwrap21_SourceInvariants(t *testing.T) {
	src := pcwrapSources(t)

	spawns := grep(src, regexp.MustCompile(`exec\.Cmd\{|exec\.Command(Context)?\(`))
	assert.Len(t, spawns, 1, "exactly one child construction: %v", spawns)

	kills := grep(src, regexp.MustCompile(`\b(unix|syscall)\.Kill\(|\.Process\.(Kill|Signal)\(|Tgkill|PidfdSendSignal`))
	sort.Strings(kills)
	require.Len(t, kills, 2, "two signal call sites: %v", kills)
	assert.Contains(t, kills[0], "internal/shutdown/group_linux.go")
	assert.Contains(t, kills[0], "unix.Kill(-g.cmd.Process.Pid, sig)", "signals go to the group from the live handle")
	assert.Contains(t, kills[1], "internal/shutdown/tree_linux.go")
	assert.Contains(t, kills[1], "unix.PidfdSendSignal(fd, sig, nil, 0)", "a descendant is signalled through its pidfd")
	tree := src[filepath.Join("internal", "shutdown", "tree_linux.go")]
	open, check, send := strings.Index(tree, "unix.PidfdOpen("), strings.Index(tree, "cur.Start != p.Start"), strings.Index(tree, "unix.PidfdSendSignal(")
	assert.True(t, open > 0 && open < check && check < send, "the pidfd is opened, then the pid's identity re-checked, then signalled")
	assert.Empty(t, grep(src, regexp.MustCompile(`\bWait4\(-1|P_ALL`)), "never wait for any child: the leader's status belongs to its Group")

	latches := grep(src, regexp.MustCompile(`lost\s+atomic\.Bool`))
	assert.Len(t, latches, 1, "one latch: %v", latches)
	assert.Empty(t, grep(src, regexp.MustCompile(`lost\.Store\(|CompareAndSwap\(true`)), "the latch is never cleared")

	// Run's stages: prepare captures the identity, spawn starts the
	// child, start runs the reader.
	run := src[filepath.Join("internal", "pcwrap", "run.go")]
	capture := strings.Index(run, "s.prepare(ctx)")
	spawn := strings.Index(run, "s.spawn()")
	reader := strings.Index(run, "s.start(ch, verifier)")
	require.True(t, capture > 0 && spawn > 0 && reader > 0)
	assert.Less(t, capture, spawn, "capture precedes the spawn")
	assert.Less(t, capture, reader, "capture precedes the reader")
	assert.Contains(t, src[filepath.Join("internal", "pcwrap", "setup.go")], "s.sd.Capture()", "prepare captures the identity")
	assert.Contains(t, src[filepath.Join("internal", "pcwrap", "supervise.go")], "reader.Run(ctx)", "start runs the reader")
}

// TestProductionBuildHasNoTestHooks: the hook env vars exist only in the
// testhooks build.
func TestProductionBuildHasNoTestHooks(t *testing.T) {
	t.Parallel()
	prod, err := os.ReadFile(testbin.Path(t, "pcwrap"))
	require.NoError(t, err)
	assert.False(t, bytes.Contains(prod, []byte("PCWRAP_TEST_")), "production binary mentions a test hook")
	hooked, err := os.ReadFile(testbin.Path(t, "pcwrap", hookTag))
	require.NoError(t, err)
	assert.True(t, bytes.Contains(hooked, []byte("PCWRAP_TEST_")))
}

// TestRunnerdNeverSubreaper: only pcwrap becomes a child subreaper.
// runnerd must not: a runnerd restart (SIGTERM or SIGKILL) leaves every
// pcwrap running, and a subreaper runnerd would collect, and on exit
// orphan, what its sessions' children start. The prctl lives in the
// shutdown package alone, only pcwrap calls it, and runnerd links
// neither.
func TestRunnerdNeverSubreaper(t *testing.T) {
	root := testbin.RepoRoot(t)
	var callers []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		s := string(b)
		if strings.Contains(s, "PR_SET_CHILD_SUBREAPER, 1") || strings.Contains(s, "shutdown.Subreaper(") {
			callers = append(callers, rel)
		}
		return nil
	}))
	sort.Strings(callers)
	assert.Equal(t, []string{filepath.Join("internal", "pcwrap", "contain.go"), filepath.Join("internal", "shutdown", "tree_linux.go")}, callers)
	cmd := exec.Command("go", "list", "-deps", "./cmd/runnerd")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, pkg := range strings.Fields(string(out)) {
		assert.NotContains(t, []string{"github.com/pcrunner/pcrunner/internal/pcwrap", "github.com/pcrunner/pcrunner/internal/shutdown"}, pkg, "runnerd links %s", pkg)
	}
}
