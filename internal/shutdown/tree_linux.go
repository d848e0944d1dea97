package shutdown

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reapTick is the safety-net pace of the orphan reaper: SIGCHLD wakes it
// for a full /proc scan; the tick only retries the direct children the
// last scan saw (a few waitid calls, no scan: an idle session must stay
// cheap).
const reapTick = time.Second

// reapSettle is how long after a SIGCHLD the reaper scans: the SIGCHLDs
// of that window cost one scan, and the one of a short-lived leader's
// exit none at all (drain ends the reaper with a last scan of its own),
// so the scan, a file read per process on the machine, does not compete
// with the leader's last output on its way to the consumer. An orphan's
// zombie holds nothing but its pid meanwhile.
const reapSettle = 50 * time.Millisecond

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

// Bounds of the /proc reads. A scan runs on every SIGCHLD, including
// the one of the leader's exit while its first output is on the way, so
// it reads with bare syscalls into reused buffers: an os.File would try
// to register each /proc file with the poller (five extra syscalls a
// file) and a ReadFile would stat and read it twice.
const (
	// statBufSize holds a whole /proc/<pid>/stat line: 52 numeric fields
	// and a comm of at most 64 bytes (TASK_COMM_LEN 16 on most kernels).
	statBufSize = 1024
	// taskDirBufSize is one getdents batch of /proc/self/task: pcwrap
	// has a handful of threads.
	taskDirBufSize = 4096
	// procDirBufSize is one getdents batch of /proc: about 500 entries.
	procDirBufSize = 16 << 10
)

// readProc parses /proc/<pid>/stat; ok is false once the process is gone.
func readProc(pid int) (Proc, bool) {
	var buf [statBufSize]byte
	return readProcBuf(pid, buf[:])
}

// readProcBuf is readProc reading into buf: one open, one read, one close.
func readProcBuf(pid int, buf []byte) (Proc, bool) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Proc{}, false
	}
	n, err := readOnce(fd, buf)
	unix.Close(fd)
	// A line that fills buf may be cut short: no trustworthy start time.
	if err != nil || n <= 0 || n == len(buf) {
		return Proc{}, false
	}
	return parseProc(pid, buf[:n])
}

// readOnce is one read(2), retried on EINTR; /proc's stat file comes
// whole from one read into a large enough buffer.
func readOnce(fd int, buf []byte) (int, error) {
	for {
		n, err := unix.Read(fd, buf)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// parseProc parses one /proc/<pid>/stat line. The comm field may hold
// spaces and parentheses, so fields count from the last ')'.
func parseProc(pid int, b []byte) (Proc, bool) {
	open := bytes.IndexByte(b, '(')
	i := bytes.LastIndexByte(b, ')')
	if open < 0 || i < open {
		return Proc{}, false
	}
	// After ')': field 3 (state), 4 (ppid), 5 (pgrp), ..., 22 (starttime).
	const (
		fState, fPpid, fPgrp, fStart = 0, 1, 2, 19
	)
	var p Proc
	rest, k := b[i+1:], 0
	for ; k <= fStart; k++ {
		var f []byte
		if f, rest = nextField(rest); f == nil {
			return Proc{}, false
		}
		var ok bool
		switch k {
		case fState:
			if len(f) != 1 {
				return Proc{}, false
			}
			p.State = f[0]
			continue
		case fPpid:
			p.Ppid, ok = atoi(f)
		case fPgrp:
			p.Pgid, ok = atoi(f)
		case fStart:
			p.Start, ok = atou(f)
		default:
			continue
		}
		if !ok {
			return Proc{}, false
		}
	}
	p.Pid, p.Comm = pid, string(b[open+1:i])
	return p, true
}

// nextField splits the first whitespace-separated field off b; f is nil
// when none is left.
func nextField(b []byte) (f, rest []byte) {
	start := 0
	for start < len(b) && isSpace(b[start]) {
		start++
	}
	if start == len(b) {
		return nil, nil
	}
	end := start
	for end < len(b) && !isSpace(b[end]) {
		end++
	}
	return b[start:end], b[end:]
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

// atoi parses a decimal int with an optional '-' (ppid and pgrp are 0 or
// positive; a refusal beats a wrong number).
func atoi(f []byte) (int, bool) {
	neg := len(f) > 0 && f[0] == '-'
	if neg {
		f = f[1:]
	}
	u, ok := atou(f)
	if !ok || u > math.MaxInt32 {
		return 0, false
	}
	if neg {
		return -int(u), true
	}
	return int(u), true
}

// atou parses an unsigned decimal of at most 19 digits (no overflow).
func atou(f []byte) (uint64, bool) {
	if len(f) == 0 || len(f) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range f {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	return u, true
}

// scanProcs reads every process's stat line: the pids from getdents of
// /proc, each stat line through one buffer.
func scanProcs() []Proc {
	fd, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	dents := make([]byte, procDirBufSize)
	stat := make([]byte, statBufSize)
	var out []Proc
	for {
		n, err := unix.Getdents(fd, dents)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return out
		}
		for b := dents[:n]; len(b) > 0; {
			pid, reclen := direntPid(b)
			if reclen <= 0 || reclen > len(b) {
				return out
			}
			b = b[reclen:]
			if pid <= 0 {
				continue
			}
			if p, ok := readProcBuf(pid, stat); ok {
				out = append(out, p)
			}
		}
	}
}

// direntPid reads one linux_dirent64 (u64 ino, s64 off, u16 reclen, u8
// type, NUL-terminated name): the entry's length, and its name as a pid
// (0 for a name that is not all digits).
func direntPid(b []byte) (pid, reclen int) {
	const nameOff = 19 // unsafe.Offsetof(unix.Dirent{}.Name)
	if len(b) < nameOff {
		return 0, 0
	}
	reclen = int(binary.NativeEndian.Uint16(b[16:18]))
	if reclen < nameOff || reclen > len(b) {
		return 0, 0
	}
	name := b[nameOff:reclen]
	if end := bytes.IndexByte(name, 0); end >= 0 {
		name = name[:end]
	}
	n, ok := atoi(name)
	if !ok || len(name) == 0 || name[0] == '-' {
		return 0, reclen
	}
	return n, reclen
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
	if !hasChildren() {
		return nil
	}
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
// processes re-parented here, found by a /proc scan (none without a
// child at all: hasChildren). Each is waited for by its own pid with
// WNOHANG, never wait4(-1) or a reaping P_ALL, so the leader's status
// stays with its Group.
func (t *Tree) ReapOrphans() {
	leader := t.leaderPid()
	known := map[int]bool{}
	var procs []Proc
	if hasChildren() {
		procs = scanProcs()
	}
	for _, p := range procs {
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

// hasChildren reports whether this process has any child, living or
// exited, and so whether a /proc scan can find a descendant at all:
// every living descendant's chain of parents ends at a living child of
// this process (a process's children are re-parented before it becomes a
// zombie, to this subreaper at the latest), so without a child there is
// none. It reads each thread's /proc/self/task/<tid>/children (a child,
// re-parented ones included, hangs off the thread that forked it or took
// it in, and stays listed until reaped): a file per thread of pcwrap
// instead of one per process on the machine, and no wait call at all, so
// nothing is reaped and every status stays with its own waiter. When a
// file cannot be read (a kernel without CONFIG_PROC_CHILDREN, a thread
// that just exited) the answer is yes, and the caller scans.
func hasChildren() bool {
	fd, err := unix.Open("/proc/self/task", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	dents := make([]byte, taskDirBufSize)
	buf := make([]byte, 1)
	for {
		n, err := unix.Getdents(fd, dents)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return true
		}
		if n <= 0 {
			return false
		}
		for b := dents[:n]; len(b) > 0; {
			tid, reclen := direntPid(b)
			if reclen <= 0 || reclen > len(b) {
				return true
			}
			b = b[reclen:]
			if tid <= 0 {
				continue
			}
			if listed, ok := threadHasChildren(tid, buf); listed || !ok {
				return true
			}
		}
	}
}

// threadHasChildren reads /proc/self/task/<tid>/children: listed when it
// names a child; ok is false when it could not be read.
func threadHasChildren(tid int, buf []byte) (listed, ok bool) {
	cfd, err := unix.Open("/proc/self/task/"+strconv.Itoa(tid)+"/children", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, false
	}
	defer unix.Close(cfd)
	for {
		n, err := unix.Read(cfd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, false
		}
		return n > 0, true // the file is empty, or starts with a pid
	}
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

// RunReaper reaps re-parented orphans reapSettle after a SIGCHLD (a full
// scan) and every reapTick (the known children only) until stop is
// closed; it returns when it has stopped.
func (t *Tree) RunReaper(stop <-chan struct{}) {
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGCHLD)
	defer signal.Stop(sigc)
	tick := time.NewTicker(reapTick)
	defer tick.Stop()
	settle := time.NewTimer(reapSettle)
	settle.Stop()
	defer settle.Stop()
	var settled <-chan time.Time // armed by a SIGCHLD until its scan
	for {
		select {
		case <-stop:
			return
		case <-sigc:
			if settled == nil {
				settle.Reset(reapSettle)
				settled = settle.C
			}
		case <-settled:
			settled = nil
			t.ReapOrphans()
		case <-tick.C:
			t.reapKnown()
		}
	}
}
