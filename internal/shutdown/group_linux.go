package shutdown

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Group is the spawned child and its process group (Setpgid, so the
// group id is the leader's pid). The leader is left a zombie after it
// exits until Reap, so its group id cannot be handed out again while
// Signal may still use it.
type Group struct {
	cmd *exec.Cmd

	mu     sync.Mutex // guards reaped and state
	reaped bool
	state  *os.ProcessState

	exited  chan struct{} // the leader exited (not yet reaped)
	info    unix.Siginfo  // the leader's exit, as waitid reported it; set before exited closes
	reapReq chan struct{}
	reapedC chan struct{}
}

// Start spawns cmd in its own process group with a parent-death signal of
// SIGKILL (spec §2.4). Linux fires that signal when the creating thread
// exits, so the spawn runs on an OS thread that stays locked until the
// child is reaped (golang/go #27505): a kill -9 of pcwrap takes the child
// with it.
func Start(cmd *exec.Cmd) (*Group, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	g := &Group{
		cmd:     cmd,
		exited:  make(chan struct{}),
		reapReq: make(chan struct{}),
		reapedC: make(chan struct{}),
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		errc <- nil
		g.info = waitExited(cmd.Process.Pid)
		close(g.exited)
		<-g.reapReq
		g.mu.Lock()
		_ = cmd.Wait() // the status is in ProcessState
		g.state = cmd.ProcessState
		g.reaped = true
		g.mu.Unlock()
		close(g.reapedC)
		runtime.UnlockOSThread() // the child is gone: the thread may go
	}()
	if err := <-errc; err != nil {
		return nil, err
	}
	return g, nil
}

// waitExited blocks until the process exits, without reaping it, and
// returns what waitid reported.
func waitExited(pid int) unix.Siginfo {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return info
		}
	}
}

// sigchld is the SIGCHLD member of siginfo_t on 64-bit Linux (the union
// starts at offset 16): si_pid, si_uid, si_status.
type sigchld struct {
	signo, errno, code int32
	_                  int32
	pid                int32
	uid                uint32
	status             int32
}

// siginfo codes of a child's exit (<asm-generic/siginfo.h>).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// ExitStatus is the exited leader's status without reaping it, for the
// exit frame of a group kept after its leader (pcwrap's keep-group
// option): the zombie keeps the group id ours meanwhile. Call it only
// after Exited.
func (g *Group) ExitStatus() (code *int, signal string) {
	<-g.exited
	ci := (*sigchld)(unsafe.Pointer(&g.info))
	switch ci.code {
	case cldKilled, cldDumped:
		return nil, unix.SignalName(syscall.Signal(ci.status))
	default:
		c := int(ci.status)
		return &c, ""
	}
}

// Signal sends sig to the child's process group while the leader is
// unreaped; it reports whether the kernel accepted it.
func (g *Group) Signal(sig syscall.Signal) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reaped {
		return false
	}
	return unix.Kill(-g.cmd.Process.Pid, sig) == nil
}

// Exited is closed when the leader has exited (it is still unreaped).
func (g *Group) Exited() <-chan struct{} { return g.exited }

// Reap reaps the exited leader and returns its status. Call it only after
// Exited; from then on Signal sends nothing.
func (g *Group) Reap() *os.ProcessState {
	select {
	case <-g.reapReq:
	default:
		close(g.reapReq)
	}
	<-g.reapedC
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

// Pgid returns the group id while the leader is unreaped (0 after).
func (g *Group) Pgid() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reaped {
		return 0
	}
	return g.cmd.Process.Pid
}

// StartTime returns field 22 of /proc/<pid>/stat of the unreaped leader
// (clock ticks since boot), which with the pgid names the group uniquely.
func (g *Group) StartTime() (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reaped {
		return 0, errors.New("read start time: child already reaped")
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(g.cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read start time: %w", err)
	}
	return parseStartTime(string(b))
}

// parseStartTime extracts field 22 from a /proc/<pid>/stat line; the comm
// field may hold spaces and parentheses, so fields count from the last ')'.
func parseStartTime(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("parse start time: malformed stat")
	}
	f := strings.Fields(stat[i+1:])
	// After ')' come fields 3…; field 22 is index 19.
	if len(f) < 20 {
		return 0, errors.New("parse start time: short stat")
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse start time: %w", err)
	}
	return v, nil
}

// Status is the exit frame content of a reaped leader: code, or the
// signal name ("SIGTERM") when a signal killed it.
func Status(ps *os.ProcessState) (code *int, signal string) {
	if ps == nil {
		return nil, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return nil, unix.SignalName(ws.Signal())
	}
	c := ps.ExitCode()
	return &c, ""
}
