package pcwrap_test

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/procsession"
)

// containGraceMS is the grace of the containment scenarios (CI: 200 ms).
const containGraceMS = 200

// containBound bounds pcwrap's exit after the trigger in these
// scenarios: the 2 s drain bound (§8.1 item 4), the grace, the 2 s of
// SIGKILL rounds, and a loaded machine's slack.
const containBound = 10 * time.Second

// envContainRuns sets the runs per case (make containment N=100).
const envContainRuns = "PCRUNNER_CONTAINMENT_N"

// escapes are the ways a descendant leaves the child's process group
// (spec §8.3); each script starts its escapee in the background.
var escapes = []struct{ name, script string }{
	{"setsid", `setsid sleep 301 & setsid sh -c 'sleep 302; :' &`},
	{"env-i-setsid", `env -i setsid sleep 303 &`},
	{"double-fork-daemon", `( setsid sh -c 'sleep 304 </dev/null >/dev/null 2>&1 &' & )`},
	{"escaped-holds-stdout", `setsid sh -c 'echo held; sleep 305' &`},
	{"ignores-term", `setsid sh -c 'trap "" TERM; sleep 306' </dev/null >/dev/null 2>&1 &`},
}

// triggers end a session three ways; the leader's tail decides how.
var triggers = []struct {
	name string
	tail string // after "echo ready"
	put  string // queue file that ends it, "" for the leader's own exit
}{
	{"shutdown", "cat", shutdownMsg},
	{"stdinEnd", "cat", stdinEndMsg},
	{"leaderExit", "exit 0", ""},
}

// containRuns is how many times each case runs.
func containRuns(t testing.TB) int {
	if v := os.Getenv(envContainRuns); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	return 1
}

// containResult is one run: what outlived pcwrap, how long it took.
type containResult struct {
	orphans []string
	took    time.Duration
	cgroup  string
}

// runContained runs one case under the orphan catcher and returns what
// was left once pcwrap had exited.
func runContained(t *testing.T, mode, script, tail, put string, extraEnv ...string) containResult {
	t.Helper()
	wrapper, env, orphans := catcherWrapper(t)
	env = append(env, fmt.Sprintf("PAPERCLIP_PROCESS_SESSION_TERMINATE_GRACE_MS=%d", containGraceMS))
	env = append(env, extraEnv...)
	s := start(t, opts{mode: mode, payload: sh(script + "\necho ready\n" + tail), wrapper: wrapper, env: env})
	s.waitFrame(containBound, "ready", func(fr []frame.Frame) bool { return strings.Contains(output(fr, frame.StreamStdout), "ready\n") })
	cg := recordedCgroup(s.dir)
	began := time.Now()
	if put != "" {
		s.put(1, put)
	}
	s.wait(containBound)
	res := containResult{orphans: orphansOf(t, orphans), took: time.Since(began), cgroup: cg}
	if cg != "" {
		_, err := os.Stat(cg)
		assert.True(t, os.IsNotExist(err), "the child's cgroup %s is removed", cg)
	}
	return res
}

// TestContainmentNoOrphans: whichever way a descendant escapes the
// child's process group (setsid, env -i setsid, a double-forked daemon
// with closed stdio, one holding the stdout pipe, one ignoring SIGTERM),
// and whichever way the session ends (shutdown, stdinEnd, the leader's
// own exit), no process outlives pcwrap, counted by ancestry (pcwrap runs
// under a subreaper that catches every orphan) and by the cgroup's
// removal; both output modes.
func TestContainmentNoOrphans(t *testing.T) {
	if ok, why := cgroupWritable(); !ok {
		t.Logf("no writable cgroup2 here (%s): the process-tree walk alone is tested", why)
	}
	runs := containRuns(t)
	for _, mode := range []string{"events", "stdout"} {
		for _, tr := range triggers {
			for _, esc := range escapes {
				t.Run(mode+"/"+tr.name+"/"+esc.name, func(t *testing.T) {
					t.Parallel()
					for range runs {
						res := runContained(t, mode, esc.script, tr.tail, tr.put)
						assert.Empty(t, res.orphans, "processes outlived pcwrap")
					}
				})
			}
		}
	}
}

// TestContainmentUsesWritableCgroup: a writable cgroup2 hierarchy is
// used: the child record names the child's cgroup, the child runs in
// it, and it is gone when pcwrap is.
func TestContainmentUsesWritableCgroup(t *testing.T) {
	if ok, why := cgroupWritable(); !ok {
		t.Skipf("no writable cgroup2 hierarchy: %s", why)
	}
	t.Parallel()
	s := start(t, opts{mode: "stdout", payload: sh(`cat /proc/self/cgroup; cat`)})
	s.waitFrame(containBound, "cgroup line", func(fr []frame.Frame) bool { return strings.Contains(output(fr, frame.StreamStdout), "0::") })
	cg := recordedCgroup(s.dir)
	require.NotEmpty(t, cg, "the child record names the cgroup")
	var line string
	for _, l := range strings.Split(output(s.frames(), frame.StreamStdout), "\n") {
		if strings.HasPrefix(l, "0::") {
			line = l
		}
	}
	assert.True(t, strings.HasSuffix(cg, strings.TrimPrefix(line, "0::")), "the child runs in %s (it says %s)", cg, line)
	s.put(1, shutdownMsg)
	s.wait(containBound)
	_, err := os.Stat(cg)
	assert.True(t, os.IsNotExist(err), "removed after the session")
}

// TestKilledPcwrapCgroupCleanedUp: the kernel does not kill a cgroup
// whose creator died. After kill -9 of pcwrap the parent-death signal
// takes only the direct child; runnerd's rule for a dead wrapper
// (procsession.KillOrphanGroup: cgroup.kill, populated 0, remove) ends
// the setsid descendant too and removes the cgroup.
func TestKilledPcwrapCgroupCleanedUp(t *testing.T) {
	if ok, why := cgroupWritable(); !ok {
		t.Skipf("no writable cgroup2 hierarchy: %s", why)
	}
	t.Parallel()
	pidFile := t.TempDir() + "/pid"
	s := start(t, opts{payload: sh(`setsid sh -c 'echo $$ > ` + pidFile + `; exec sleep 307' </dev/null >/dev/null 2>&1 & sleep 300`)})
	escapee := readPid(t, pidFile)
	cg := recordedCgroup(s.dir)
	require.NotEmpty(t, cg)
	require.NoError(t, s.cmd.Process.Kill())
	s.wait(waitBound)
	require.True(t, alive(escapee), "standalone, only the direct child dies with pcwrap")
	_, err := procsession.KillOrphanGroup(s.dir)
	require.NoError(t, err)
	assert.False(t, alive(escapee), "the cgroup's members are gone")
	_, err = os.Stat(cg)
	assert.True(t, os.IsNotExist(err), "the cgroup is removed")
}

// TestContainmentFigures prints the orphan counts and terminate times
// of `make containment` (N runs per case, PCRUNNER_CONTAINMENT_N).
func TestContainmentFigures(t *testing.T) {
	if os.Getenv(envContainRuns) == "" {
		t.Skip("figures only under make containment (PCRUNNER_CONTAINMENT_N)")
	}
	runs := containRuns(t)
	for _, tr := range triggers {
		for _, esc := range escapes {
			var orphans int
			var took []time.Duration
			for range runs {
				res := runContained(t, "events", esc.script, tr.tail, tr.put)
				orphans += len(res.orphans)
				took = append(took, res.took)
			}
			sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
			fmt.Printf("containment %-10s %-22s runs=%d orphans=%d exit p50=%v p95=%v max=%v\n", tr.name, esc.name, runs, orphans,
				took[len(took)/2].Round(time.Millisecond), took[len(took)*95/100].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
		}
	}
}
