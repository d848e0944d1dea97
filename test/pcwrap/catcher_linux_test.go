package pcwrap_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/cgroup"
	"github.com/pcrunner/pcrunner/internal/procsession"
)

// The orphan catcher counts what outlives pcwrap by ancestry, not by a
// marker a process could drop: the test binary re-executed as a child
// subreaper runs pcwrap as its only child, so every process that
// outlives pcwrap re-parents to the catcher. Once pcwrap is reaped the
// catcher writes the living processes below it to the orphans file,
// kills and reaps them, and exits with pcwrap's status.
const (
	envCatcher = "PCRUNNER_TEST_ORPHAN_CATCHER" // the orphans file; set: run as the catcher
	// envCatcherUID runs pcwrap under this uid (and gid), with
	// RLIMIT_NPROC envCatcherNproc: the limit binds only a non-root user.
	envCatcherUID   = "PCRUNNER_TEST_CATCHER_UID"
	envCatcherNproc = "PCRUNNER_TEST_CATCHER_NPROC"
)

// runCatcherIfAsked runs the catcher when the test binary was started as
// one; it returns only otherwise.
func runCatcherIfAsked() {
	out := os.Getenv(envCatcher)
	if out == "" {
		return
	}
	os.Exit(runCatcher(out, os.Args[1:]))
}

func runCatcher(out string, argv []string) int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "catcher:", err)
		return 125
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PCRUNNER_TEST_CATCHER") && !strings.HasPrefix(kv, envCatcher+"=") {
			env = append(env, kv)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if v := os.Getenv(envCatcherUID); v != "" {
		uid, _ := strconv.Atoi(v)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
		if n, err := strconv.Atoi(os.Getenv(envCatcherNproc)); err == nil {
			// Inherited by pcwrap; root (the catcher) is not bound by it.
			lim := unix.Rlimit{Cur: uint64(n), Max: uint64(n)}
			if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
				fmt.Fprintln(os.Stderr, "catcher:", err)
				return 125
			}
		}
	}
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "catcher:", err)
		return 125
	}
	_ = os.WriteFile(out, []byte(strings.Join(livingBelow(os.Getpid()), "\n")), 0o600)
	// Leave nothing behind: kill what was caught and reap it.
	for len(livingBelow(os.Getpid())) > 0 {
		for _, p := range livingBelow(os.Getpid()) {
			pid, _ := strconv.Atoi(strings.Fields(p)[0])
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(-1, &ws, 0, nil)
	}
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); err != nil {
			break
		}
	}
	return code
}

// livingBelow lists "pid (comm)" of every living descendant of root.
func livingBelow(root int) []string {
	type proc struct {
		ppid   int
		comm   string
		zombie bool
	}
	procs := map[int]proc{}
	kids := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		st := string(b)
		i, j := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')')
		if i < 0 || j < i {
			continue
		}
		f := strings.Fields(st[j+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		procs[pid] = proc{ppid: ppid, comm: st[i+1 : j], zombie: f[0] == "Z" || f[0] == "X"}
		kids[ppid] = append(kids[ppid], pid)
	}
	var out []string
	queue := append([]int(nil), kids[root]...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if p := procs[pid]; !p.zombie {
			out = append(out, fmt.Sprintf("%d (%s)", pid, p.comm))
		}
		queue = append(queue, kids[pid]...)
	}
	return out
}

// catcherWrapper returns the wrapper argv and env that run pcwrap under
// the orphan catcher, and the orphans file it writes.
func catcherWrapper(t testing.TB) (wrapper, env []string, orphans string) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	orphans = filepath.Join(t.TempDir(), "orphans")
	return []string{exe}, []string{envCatcher + "=" + orphans}, orphans
}

// orphansOf reads what the catcher found alive after pcwrap exited.
func orphansOf(t testing.TB, orphans string) []string {
	t.Helper()
	b, err := os.ReadFile(orphans)
	require.NoError(t, err, "the catcher writes its count once pcwrap is reaped")
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\n")
}

// recordedCgroup returns the cgroup the session's child record names, ""
// when none.
func recordedCgroup(dir string) string {
	rec, err := procsession.ReadChildRecord(dir)
	if err != nil {
		return ""
	}
	return rec.Cgroup
}

// waitCgroup waits for the session's child record (written just after
// the spawn, possibly after the child's first output) and returns the
// cgroup it names, "" when none.
func waitCgroup(t testing.TB, dir string) string {
	t.Helper()
	var rec procsession.ChildRecord
	eventually(t, waitBound, "the child record", func() bool {
		var err error
		rec, err = procsession.ReadChildRecord(dir)
		return err == nil
	})
	return rec.Cgroup
}

// cleanupCgroup ends a cgroup a killed pcwrap left behind, as runnerd does.
func cleanupCgroup(path string) {
	if path != "" {
		_ = cgroup.Cleanup(path)
	}
}

// cgroupWritable reports whether pcwrap can make a child cgroup here; a
// writable cgroup2 hierarchy must be used.
func cgroupWritable() (bool, string) {
	c, err := cgroup.Create()
	if err != nil {
		return false, err.Error()
	}
	defer c.Close()
	_ = c.Remove()
	return true, ""
}
