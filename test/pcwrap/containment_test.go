package pcwrap_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/procsession"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// containGraceMS is the grace of the containment scenarios (CI: 200 ms).
const containGraceMS = 200

// containBound bounds pcwrap's exit after the trigger in these
// scenarios: the 2 s drain bound (§8.1 item 4), the grace, the 2 s of
// SIGKILL rounds, and a loaded machine's slack.
const containBound = 10 * time.Second

// envContainRuns sets the runs per case (make containment N=100);
// envContainBin measures another pcwrap binary (an older build, for the
// figures before a change).
const (
	envContainRuns = "PCRUNNER_CONTAINMENT_N"
	envContainBin  = "PCRUNNER_CONTAINMENT_PCWRAP"
)

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

// fiftyIgnoringTerm starts 50 descendants out of the group that ignore
// SIGTERM: the terminate figure of 50 descendants (spec §8.3: under 1 s
// past the grace).
const fiftyIgnoringTerm = `i=0; while [ $i -lt 50 ]; do setsid sh -c 'trap "" TERM; exec sleep 308' </dev/null >/dev/null 2>&1 & i=$((i+1)); done`

// defaultContainRuns is the runs per case in CI; -short runs one.
const defaultContainRuns = 10

// containRuns is how many times each case runs.
func containRuns(t testing.TB) int {
	if v := os.Getenv(envContainRuns); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	if testing.Short() {
		return 1
	}
	return defaultContainRuns
}

// containResult is one run: what outlived pcwrap, how long it took.
type containResult struct {
	orphans []string
	took    time.Duration
	cgroup  string
}

// runContained runs one case under the orphan catcher and returns what
// was left once pcwrap had exited.
func runContained(t *testing.T, mode, script, tail, put string) containResult {
	t.Helper()
	return runContainedBatch(t, 1, mode, script, tail, put)[0]
}

// runContainedBatch runs n sessions of one case side by side, each under
// its own orphan catcher: all start, all are ready, all are triggered,
// then each is waited for. A time is exact only for n = 1.
func runContainedBatch(t *testing.T, n int, mode, script, tail, put string) []containResult {
	t.Helper()
	type run struct {
		s       *session
		orphans string
		cg      string
		began   time.Time
	}
	runs := make([]*run, n)
	for i := range runs {
		wrapper, env, orphans := catcherWrapper(t)
		env = append(env, fmt.Sprintf("PAPERCLIP_PROCESS_SESSION_TERMINATE_GRACE_MS=%d", containGraceMS))
		s := start(t, opts{mode: mode, payload: sh(script + "\necho ready\n" + tail), wrapper: wrapper, env: env, bin: os.Getenv(envContainBin)})
		runs[i] = &run{s: s, orphans: orphans}
	}
	for _, r := range runs {
		r.s.waitFrame(containBound, "ready", func(fr []frame.Frame) bool { return strings.Contains(output(fr, frame.StreamStdout), "ready\n") })
		r.cg = waitCgroup(t, r.s.dir)
	}
	for _, r := range runs {
		r.began = time.Now()
		if put != "" {
			r.s.put(1, put)
		}
	}
	out := make([]containResult, 0, n)
	for _, r := range runs {
		r.s.wait(containBound)
		out = append(out, containResult{orphans: orphansOf(t, r.orphans), took: time.Since(r.began), cgroup: r.cg})
		if r.cg != "" {
			_, err := os.Stat(r.cg)
			assert.True(t, os.IsNotExist(err), "the child's cgroup %s is removed", r.cg)
		}
	}
	return out
}

// TestContainmentNoOrphans: whichever way a descendant escapes the
// child's process group (setsid, env -i setsid, a double-forked daemon
// with closed stdio, one holding the stdout pipe, one ignoring SIGTERM),
// and whichever way the session ends (shutdown, stdinEnd, the leader's
// own exit), no process outlives pcwrap, counted by ancestry (pcwrap runs
// under a subreaper that catches every orphan) and by the cgroup's
// removal; both output modes. The runs of a case go side by side.
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
					for _, res := range runContainedBatch(t, runs, mode, esc.script, tr.tail, tr.put) {
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
	cg := waitCgroup(t, s.dir)
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
	cg := waitCgroup(t, s.dir)
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

// TestContainmentFiftyDescendants: 50 descendants out of the group that
// ignore SIGTERM all end at the grace's SIGKILL; nothing outlives pcwrap.
func TestContainmentFiftyDescendants(t *testing.T) {
	t.Parallel()
	res := runContained(t, "events", fiftyIgnoringTerm, "cat", shutdownMsg)
	assert.Empty(t, res.orphans, "processes outlived pcwrap")
	t.Logf("50 TERM-ignoring descendants: pcwrap exited %v after the shutdown (grace %d ms)", res.took.Round(time.Millisecond), containGraceMS)
}

// TestContainmentFigures prints the orphan counts and terminate times
// of `make containment` (N runs per case, PCRUNNER_CONTAINMENT_N), events
// mode; the cases run side by side.
func TestContainmentFigures(t *testing.T) {
	if os.Getenv(envContainRuns) == "" {
		t.Skip("figures only under make containment (PCRUNNER_CONTAINMENT_N)")
	}
	runs := containRuns(t)
	type row struct {
		name    string
		orphans int
		took    []time.Duration
	}
	var rows []*row
	t.Run("cases", func(t *testing.T) {
		cases := append([]struct{ name, script string }{}, escapes...)
		cases = append(cases, struct{ name, script string }{"fifty-ignore-term", fiftyIgnoringTerm})
		for _, tr := range triggers {
			for _, esc := range cases {
				r := &row{name: fmt.Sprintf("%-10s %-20s", tr.name, esc.name)}
				rows = append(rows, r)
				t.Run(tr.name+"/"+esc.name, func(t *testing.T) {
					t.Parallel()
					for range runs {
						res := runContained(t, "events", esc.script, tr.tail, tr.put)
						r.orphans += len(res.orphans)
						r.took = append(r.took, res.took)
					}
				})
			}
		}
	})
	fmt.Printf("containment: %d runs per case, grace %d ms; time = trigger to pcwrap's exit\n", runs, containGraceMS)
	for _, r := range rows {
		took := r.took
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		if len(took) == 0 {
			continue
		}
		fmt.Printf("containment %s runs=%d orphans=%d p50=%v p95=%v max=%v\n", r.name, len(took), r.orphans,
			took[len(took)/2].Round(time.Millisecond), took[len(took)*95/100].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	}
}

// Fork bomb bounds: the uid's process limit, and how full the bomb must
// be before the stop (pcwrap's own threads count against the limit too).
const (
	bombNproc = 64
	bombFull  = 30
	// unusedUID runs the bomb: no account, no process of its own here.
	unusedUID = 54321
)

// forkBomb forks for ever, ignoring SIGTERM; a failed fork waits 5 ms.
const forkBomb = `$SIG{TERM} = "IGNORE"; while (1) { defined(fork()) or select(undef, undef, undef, 0.005) }`

// TestContainmentForkBomb: a fork bomb that left the child's process
// group (setsid), run by an unused uid under RLIMIT_NPROC (root ignores
// the limit) and so without a cgroup (not writable for that uid): the
// process-tree walk's SIGKILL rounds end it, and nothing outlives pcwrap.
// pcwrap survives it (its threads count against the same limit) because
// the child starts with the soft limit lowered by pcwrap's headroom.
// Serial: it fills the uid's process table with what it can.
func TestContainmentForkBomb(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run pcwrap as an unused uid")
	}
	if n := processesOf(unusedUID); n > 0 {
		t.Skipf("uid %d runs %d processes here: not unused", unusedUID, n)
	}
	// pcwrap and its session dir must be reachable by that uid.
	base := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(base), 0o755))
	require.NoError(t, os.Chmod(base, 0o755))
	src, err := os.ReadFile(testbin.Path(t, "pcwrap"))
	require.NoError(t, err)
	bin := filepath.Join(base, "pcwrap")
	require.NoError(t, os.WriteFile(bin, src, 0o755))
	dir := filepath.Join(base, "session")
	for _, d := range []string{dir, filepath.Join(dir, "stdin")} {
		require.NoError(t, os.Mkdir(d, 0o700))
		require.NoError(t, os.Chown(d, unusedUID, unusedUID))
	}
	wrapper, env, orphans := catcherWrapper(t)
	env = append(env, envCatcherUID+"="+strconv.Itoa(unusedUID), envCatcherNproc+"="+strconv.Itoa(bombNproc),
		fmt.Sprintf("PAPERCLIP_PROCESS_SESSION_TERMINATE_GRACE_MS=%d", containGraceMS))
	// Every member forks for ever (a failed fork only retries, where a
	// shell would exit), so the bomb stays at the limit, and ignores
	// SIGTERM: only the SIGKILL rounds end it.
	perl, err := exec.LookPath("perl")
	if err != nil {
		t.Skip("no perl to run the fork bomb")
	}
	p := sh(`setsid ` + perl + ` -e '` + forkBomb + `' </dev/null >/dev/null 2>&1 & echo ready; exec cat`)
	p.Cwd = "/"
	s := start(t, opts{mode: "stdout", bin: bin, dir: dir, payload: p, wrapper: wrapper, env: env})
	t.Cleanup(func() { killAllOf(unusedUID) })
	s.waitFrame(containBound, "ready", func(fr []frame.Frame) bool { return strings.Contains(output(fr, frame.StreamStdout), "ready\n") })
	eventually(t, containBound, "the bomb to fill the uid's limit", func() bool { return processesOf(unusedUID) >= bombFull })
	assert.Empty(t, waitCgroup(t, dir), "no cgroup for an unprivileged uid here")
	began := time.Now()
	// Readable by pcwrap's uid: the harness's put writes 0600 as root.
	tmp := filepath.Join(dir, "stdin", "shutdown.tmp")
	require.NoError(t, os.WriteFile(tmp, []byte(shutdownMsg), 0o644))
	require.NoError(t, os.Rename(tmp, s.stdinPath(1)))
	s.wait(containBound)
	t.Logf("fork bomb of at least %d processes ended %v after the shutdown", bombFull, time.Since(began).Round(time.Millisecond))
	fr := s.frames()
	require.NotEmpty(t, fr)
	assert.Equal(t, frame.FrameExit, fr[len(fr)-1].Type, "pcwrap's stderr: %s", s.stderr.String())
	assert.Empty(t, orphansOf(t, orphans), "processes outlived pcwrap")
	assert.Zero(t, processesOf(unusedUID), "nothing of the uid is left")
	assert.NotContains(t, s.stderr.String(), "survived", "pcwrap ended every descendant")
}

// processesOf counts the living processes whose real uid is uid.
func processesOf(uid int) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var state string
		var ruid int
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				state = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				ruid, _ = strconv.Atoi(strings.Fields(v)[0])
			}
		}
		if ruid == uid && !strings.HasPrefix(state, "Z") {
			n++
		}
	}
	return n
}

// killAllOf SIGKILLs every process of uid until none is left (bounded):
// the safety net of a failed fork bomb test.
func killAllOf(uid int) {
	deadline := time.Now().Add(containBound)
	for processesOf(uid) > 0 && time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == uid {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}
