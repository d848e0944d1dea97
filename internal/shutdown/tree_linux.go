package shutdown

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reapTick is the safety-net pace of the orphan reaper: SIGCHLD wakes it
// at once for a full /proc scan; the tick only retries the direct
// children the last scan saw (a few waitid calls, no scan: an idle
// session must stay cheap).
const reapTick = time.Second

// Subreaper makes the calling process a child subreaper
// (PR_SET_CHILD_SUBREAPER): whatever its child starts and orphans
// (double fork, setsid, a daemon) is re-parented to it instead of init,
// so it stays a descendant that terminate() can find. The attribute is
// not inherited across fork, so the child sees no difference.
func Subreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl PR_SET_CHILD_SUBREAPER: %w", err)
	}
	return nil
}

// Proc is one process as a /proc scan saw it; pid and start time
// together name it (a pid alone may be reused).
type Proc struct {
	Pid   int
	Ppid  int
	Pgid  int
	State byte
	Start uint64 // field 22: clock ticks since boot
	Comm  string
}

func (p Proc) String() string { return fmt.Sprintf("%d (%s)", p.Pid, p.Comm) }

// readProc parses /proc/<pid>/stat; ok is false once the process is gone.
func readProc(pid int) (Proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{}, false
	}
	return parseProc(pid, b)
}

// parseProc parses one /proc/<pid>/stat line. The comm field may hold
// spaces and parentheses, so fields count from the last ')'.
func parseProc(pid int, b []byte) (Proc, bool) {
	open := bytes.IndexByte(b, '(')
	i := bytes.LastIndexByte(b, ')')
	if open < 0 || i < open {
		return Proc{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), f[1] ppid, f[2] pgrp, f[19] starttime.
	if len(f) < 20 || len(f[0]) != 1 {
		return Proc{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Proc{}, false
	}
	return Proc{Pid: pid, Ppid: ppid, Pgid: pgid, State: f[0][0], Start: start, Comm: string(b[open+1 : i])}, true
}

// scanProcs reads every process's stat line.
func scanProcs() []Proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]Proc, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// zombie reports a process that has exited and waits to be reaped.
func (p Proc) zombie() bool { return p.State == 'Z' || p.State == 'X' }

// Tree is every process descended from this one (the wrapper, a child
// subreaper): found by ancestry in /proc, signalled only through a
// pidfd re-checked before use, never through a remembered number. The
// methods may be called concurrently.
type Tree struct {
	self int

	mu     sync.Mutex // guards leader and known
	leader int        // the child pcwrap keeps unreaped: never reaped here
	// known are the direct children other than the leader that the last
	// scan saw, unreaped: their pids cannot be reused meanwhile.
	known map[int]bool
}

// NewTree returns the tree of the calling process.
func NewTree() *Tree { return &Tree{self: os.Getpid()} }

// SetLeader names the child whose reaping belongs to its Group.
func (t *Tree) SetLeader(pid int) {
	t.mu.Lock()
	t.leader = pid
	t.mu.Unlock()
}

func (t *Tree) leaderPid() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leader
}

// Living returns every living (not zombie) descendant, parents before
// their children.
func (t *Tree) Living() []Proc {
	procs := scanProcs()
	kids := make(map[int][]int, len(procs))
	byPid := make(map[int]Proc, len(procs))
	for _, p := range procs {
		kids[p.Ppid] = append(kids[p.Ppid], p.Pid)
		byPid[p.Pid] = p
	}
	var out []Proc
	queue := append([]int(nil), kids[t.self]...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		p := byPid[pid]
		if !p.zombie() {
			out = append(out, p)
		}
		queue = append(queue, kids[pid]...)
	}
	return out
}

// Signal sends sig to every living descendant whose process group is not
// skipPgid (0 skips none; the leader's group gets its signal through the
// Group), each through a pidfd. It returns how many were signalled.
func (t *Tree) Signal(sig syscall.Signal, skipPgid int) int {
	n := 0
	for _, p := range t.Living() {
		if skipPgid != 0 && p.Pgid == skipPgid {
			continue
		}
		if signalProc(p, sig) {
			n++
		}
	}
	return n
}

// signalProc signals p through a pidfd, after checking that the pid
// still names the process the scan saw: same start time, not a zombie.
// Opened first and checked second, the pidfd cannot reach a stranger
// that took the pid over (invariant I2: never a stale numeric pid).
func signalProc(p Proc, sig syscall.Signal) bool {
	fd, err := unix.PidfdOpen(p.Pid, 0)
	if err != nil {
		return false // gone
	}
	defer unix.Close(fd)
	cur, ok := readProc(p.Pid)
	if !ok || cur.Start != p.Start || cur.zombie() {
		return false
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}

// ReapOrphans reaps every exited direct child except the leader: the
// processes re-parented here, found by a /proc scan. Each is waited for
// by its own pid with WNOHANG, never wait4(-1) or P_ALL, so the leader's
// status stays with its Group.
func (t *Tree) ReapOrphans() {
	leader := t.leaderPid()
	known := map[int]bool{}
	for _, p := range scanProcs() {
		if p.Ppid != t.self || p.Pid == leader {
			continue
		}
		if !p.zombie() || !reap(p.Pid) {
			known[p.Pid] = true
		}
	}
	t.mu.Lock()
	t.known = known
	t.mu.Unlock()
}

// reapKnown retries the direct children the last scan saw.
func (t *Tree) reapKnown() {
	t.mu.Lock()
	pids := make([]int, 0, len(t.known))
	for pid := range t.known {
		pids = append(pids, pid)
	}
	t.mu.Unlock()
	for _, pid := range pids {
		if reap(pid) {
			t.mu.Lock()
			delete(t.known, pid)
			t.mu.Unlock()
		}
	}
}

// reap reaps the child pid if it has exited; it reports whether the
// child is gone (reaped now, or no longer ours).
func reap(pid int) bool {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG, nil)
		switch err {
		case unix.EINTR:
			continue
		case nil:
			// si_pid is 0 when the child has not exited (WNOHANG).
			return (*sigchld)(unsafe.Pointer(&info)).pid != 0
		default:
			return true // ECHILD: not ours (any more)
		}
	}
}

// RunReaper reaps re-parented orphans on every SIGCHLD (a full scan) and
// every reapTick (the known children only) until stop is closed; it
// returns when it has stopped.
func (t *Tree) RunReaper(stop <-chan struct{}) {
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGCHLD)
	defer signal.Stop(sigc)
	tick := time.NewTicker(reapTick)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-sigc:
			t.ReapOrphans()
		case <-tick.C:
			t.reapKnown()
		}
	}
}
