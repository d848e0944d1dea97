package shutdown

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// treeWait bounds the waits on real processes in these tests.
const treeWait = 10 * time.Second

func TestParseProc(t *testing.T) {
	line := []byte("1234 (we ird) name)) S 77 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200")
	p, ok := parseProc(1234, line)
	require.True(t, ok)
	assert.Equal(t, Proc{Pid: 1234, Ppid: 77, Pgid: 1234, State: 'S', Start: 987654, Comm: "we ird) name)"}, p)
	assert.Equal(t, "1234 (we ird) name))", p.String())
	for _, bad := range []string{"", "garbage", "1 (x) S 1 2", "1 x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", "1 (x) SS 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 1 0 5 0 0"} {
		_, ok := parseProc(1, []byte(bad))
		assert.False(t, ok, "%q", bad)
	}
}

// pidsOf lists the pids of procs.
func pidsOf(procs []Proc) []int {
	var out []int
	for _, p := range procs {
		out = append(out, p.Pid)
	}
	return out
}

// TestTreeFindsAndSignalsEscapee: a descendant that left the child's
// process group by setsid is found by ancestry and signalled through its
// pidfd; skipping the leader's group leaves the leader alone.
func TestTreeFindsAndSignalsEscapee(t *testing.T) {
	pidFile := t.TempDir() + "/pid"
	g, err := Start(exec.Command("sh", "-c", `setsid sh -c 'echo $$ > `+pidFile+`; exec sleep 30' </dev/null >/dev/null 2>&1 & exec sleep 30`))
	require.NoError(t, err)
	leader := g.Pgid()
	t.Cleanup(func() {
		g.Signal(syscall.SIGKILL)
		<-g.Exited()
		g.Reap()
	})
	var escapee int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		escapee, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, treeWait, 10*time.Millisecond)
	tree := NewTree()
	living := pidsOf(tree.Living())
	assert.Contains(t, living, leader)
	assert.Contains(t, living, escapee)
	esc, ok := readProc(escapee)
	require.True(t, ok)
	assert.NotEqual(t, leader, esc.Pgid, "the escapee left the group")

	assert.Equal(t, 1, tree.Signal(syscall.SIGKILL, leader), "only the escapee")
	require.Eventually(t, func() bool { p, ok := readProc(escapee); return !ok || p.zombie() }, treeWait, 10*time.Millisecond)
	lp, ok := readProc(leader)
	require.True(t, ok)
	assert.False(t, lp.zombie(), "the leader's group was skipped")
}

// TestSignalProcRechecksIdentity: a pid whose start time differs from
// the scan's (the pid was reused) is never signalled.
func TestSignalProcRechecksIdentity(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p, ok := readProc(cmd.Process.Pid)
	require.True(t, ok)
	stale := p
	stale.Start--
	assert.False(t, signalProc(stale, syscall.SIGKILL), "another process's start time: not signalled")
	again, ok := readProc(cmd.Process.Pid)
	require.True(t, ok)
	assert.False(t, again.zombie())
	assert.True(t, signalProc(p, syscall.SIGKILL))
}

// TestReapOrphansLeavesTheLeader: as a subreaper, an orphan that exits
// is reaped by its own pid; the leader's zombie stays for its Group.
func TestReapOrphansLeavesTheLeader(t *testing.T) {
	require.NoError(t, Subreaper())
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	// The subshell forks the orphan and exits; the orphan re-parents
	// here and exits too; then the leader exits.
	g, err := Start(exec.Command("sh", "-c", `( sleep 0.1 & ) ; sleep 0.4`))
	require.NoError(t, err)
	tree := NewTree()
	tree.SetLeader(g.Pgid())
	self := os.Getpid()
	zombieKids := func() (leader, others int) {
		for _, p := range scanProcs() {
			if p.Ppid == self && p.zombie() {
				if p.Pid == g.Pgid() {
					leader++
				} else {
					others++
				}
			}
		}
		return leader, others
	}
	require.Eventually(t, func() bool { _, o := zombieKids(); return o > 0 }, treeWait, 10*time.Millisecond, "the orphan re-parents here and exits")
	<-g.Exited()
	tree.ReapOrphans()
	l, o := zombieKids()
	assert.Zero(t, o, "orphans reaped")
	assert.Equal(t, 1, l, "the leader is left for its Group")
	code, _ := Status(g.Reap())
	require.NotNil(t, code)
	assert.Equal(t, 0, *code)
}

// FuzzParseProc: /proc/<pid>/stat lines are parsed from the last ')' on;
// any input gets a Proc or a refusal, never a panic, and a parsed comm
// is what lies between the first '(' and the last ')'.
func FuzzParseProc(f *testing.F) {
	f.Add([]byte("1234 (we ird) name)) S 77 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200"))
	f.Add([]byte("1 (x) Z 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 1 0 5"))
	f.Add([]byte(")("))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, ok := parseProc(1, b)
		if !ok {
			return
		}
		if !strings.Contains(string(b), "("+p.Comm+")") {
			t.Fatalf("comm %q not in %q", p.Comm, b)
		}
	})
}

// TestScanProcsSeesSelf: the getdents walk of /proc finds this process
// with its parent, group and the start time its own stat line gives.
func TestScanProcsSeesSelf(t *testing.T) {
	self, ok := readProc(os.Getpid())
	require.True(t, ok)
	var found []Proc
	for _, p := range scanProcs() {
		if p.Pid == os.Getpid() {
			found = append(found, p)
		}
	}
	require.Len(t, found, 1)
	assert.Equal(t, os.Getppid(), found[0].Ppid)
	assert.Equal(t, unix.Getpgrp(), found[0].Pgid)
	assert.Equal(t, self.Start, found[0].Start)
}

// FuzzDirentPid: getdents bytes are walked by their own record lengths;
// any input gives a length inside it (or 0 to stop) and never a panic.
func FuzzDirentPid(f *testing.F) {
	rec := make([]byte, 24)
	rec[16] = 24
	copy(rec[19:], "123\x00")
	f.Add(rec)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		pid, reclen := direntPid(b)
		if reclen < 0 || reclen > len(b) || pid < 0 {
			t.Fatalf("pid %d reclen %d of %d bytes", pid, reclen, len(b))
		}
	})
}

// BenchmarkScanProcs: one full /proc scan, as on every SIGCHLD; compare
// ns/op with the machine's process count (a file read each).
func BenchmarkScanProcs(b *testing.B) {
	n := 0
	for b.Loop() {
		n = len(scanProcs())
	}
	b.ReportMetric(float64(n), "procs")
}

// TestReaperReapsOrphansAfterSIGCHLD: the running reaper reaps an
// orphan that re-parented here and exited, within reapSettle of its
// SIGCHLD (bounded here by treeWait), and never the leader.
func TestReaperReapsOrphansAfterSIGCHLD(t *testing.T) {
	require.NoError(t, Subreaper())
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	g, err := Start(exec.Command("sh", "-c", `( sleep 0.1 & ) ; sleep 1`))
	require.NoError(t, err)
	tree := NewTree()
	tree.SetLeader(g.Pgid())
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); tree.RunReaper(stop) }()
	self := os.Getpid()
	orphans := func() (living, zombies int) {
		for _, p := range scanProcs() {
			if p.Ppid == self && p.Pid != g.Pgid() {
				if p.zombie() {
					zombies++
				} else {
					living++
				}
			}
		}
		return living, zombies
	}
	require.Eventually(t, func() bool { l, _ := orphans(); return l > 0 }, treeWait, 5*time.Millisecond, "the orphan re-parents here")
	require.Eventually(t, func() bool { l, z := orphans(); return l == 0 && z == 0 }, treeWait, 5*time.Millisecond, "the orphan exits and is reaped")
	close(stop)
	<-done
	code, _ := Status(g.Reap())
	require.NotNil(t, code, "the leader was left for its Group")
	assert.Equal(t, 0, *code)
}

// TestHasChildrenOnlyLooks: an exited child counts as a child and keeps
// its status for its own wait (the question reaps nothing); once it is
// reaped, a process with no other child has none.
func TestHasChildrenOnlyLooks(t *testing.T) {
	cmd := exec.Command("sh", "-c", "exit 3")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	require.Eventually(t, func() bool { p, ok := readProc(pid); return ok && p.zombie() }, treeWait, 5*time.Millisecond)
	assert.True(t, hasChildren())
	assert.True(t, hasChildren(), "asking twice reaps nothing")
	var exitErr *exec.ExitError
	require.ErrorAs(t, cmd.Wait(), &exitErr, "the status waited for its own wait")
	assert.Equal(t, 3, exitErr.ExitCode())
	others := 0
	for _, p := range scanProcs() {
		if p.Ppid == os.Getpid() {
			others++
		}
	}
	if others == 0 {
		assert.False(t, hasChildren(), "no child left")
		assert.Empty(t, NewTree().Living())
	}
}
