package pcwrap

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/cgroup"
	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/shutdown"
)

// Bounds of ending the descendants that outlive the leader (spec §8.3).
const (
	// restKillWait bounds the SIGKILL rounds after the grace: a process
	// forking as fast as it can is caught within a few rounds, so only a
	// task stuck in the kernel outlasts it; pcwrap then names it and
	// exits.
	restKillWait = 2 * time.Second
	// restKillRound paces those rounds.
	restKillRound = 20 * time.Millisecond
	// maxSurvivorsNamed bounds the survivor list in the error frame.
	maxSurvivorsNamed = 20
	// nprocHeadroom is how many of the uid's RLIMIT_NPROC slots the
	// child's tree may not take: the limit counts threads, and the Go
	// runtime dies when it cannot make one it needs, as during the
	// terminate that ends a fork bomb (seen at 8 to 11 threads). The
	// kernel checks a fork against the forking process's own limit, so
	// the child starts with the soft limit lowered by this much while
	// pcwrap keeps its own.
	nprocHeadroom = 16
)

// OOM policy (spec §2.4): the child starts at least this much more
// likely than pcwrap and runnerd to be the OOM killer's pick.
const (
	// EnvOOMScoreAdj sets the child's oom_score_adj (absolute,
	// -1000..1000); stripped from the child's environment.
	EnvOOMScoreAdj = "PCWRAP_OOM_SCORE_ADJ"
	// DefaultOOMScoreAdj is the child's value when neither the variable
	// nor the flag sets one.
	DefaultOOMScoreAdj = 500
	minOOMScoreAdj     = -1000
	maxOOMScoreAdj     = 1000
	oomScoreAdjPath    = "/proc/self/oom_score_adj"
)

// ParseOOMScoreAdj parses an oom_score_adj setting: a decimal integer in
// -1000..1000.
func ParseOOMScoreAdj(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < minOOMScoreAdj || n > maxOOMScoreAdj {
		return 0, fmt.Errorf("invalid oom_score_adj %q; want an integer from %d to %d", v, minOOMScoreAdj, maxOOMScoreAdj)
	}
	return n, nil
}

// containment finds and ends every descendant of the child (spec §8.3):
// pcwrap is a child subreaper, so orphans re-parent to it and the
// process-tree walk sees them; where a cgroup v2 child could be made,
// the child runs in it and cgroup.kill ends everything at once. Its
// fields are set before the child starts and never change after.
type containment struct {
	tree *shutdown.Tree
	cg   *cgroup.Cgroup // nil where no cgroup could be made
	log  *slog.Logger

	reaperStop chan struct{}
	reaperDone chan struct{}
	closeOnce  sync.Once
}

// newContainment makes pcwrap a subreaper and tries for a cgroup. Neither
// failing fails the session: each is said once at debug level.
func newContainment(log *slog.Logger) *containment {
	c := &containment{tree: shutdown.NewTree(), log: log}
	if err := shutdown.Subreaper(); err != nil {
		log.Debug("not a subreaper; orphans go to init", "err", err)
	}
	cg, err := cgroup.Create()
	if err != nil {
		log.Debug("no cgroup for the child; the process-tree walk alone ends its descendants", "err", err)
	} else {
		c.cg = cg
	}
	return c
}

// pendingContainment is a containment being made beside setup: the
// cgroup's mkdir and the mountinfo read need not come before the child's
// start. Whoever comes first makes it: the background goroutine, or the
// spawn itself when that goroutine has not run yet (on a busy machine a
// new thread can wait a millisecond for a CPU, and waking the spawn from
// it afterwards costs another wake-up).
type pendingContainment struct {
	log  *slog.Logger
	once sync.Once
	c    *containment // set inside once
}

// startContainment begins making the containment in the background.
func startContainment(log *slog.Logger) *pendingContainment {
	p := &pendingContainment{log: log}
	go p.get()
	return p
}

// get makes the containment or waits for the goroutine making it.
func (p *pendingContainment) get() *containment {
	p.once.Do(func() { p.c = newContainment(p.log) })
	return p.c
}

// abandon releases a containment no child ever used.
func (p *pendingContainment) abandon() {
	c := p.get()
	if c.cg != nil {
		_ = c.cg.Remove()
	}
	c.close()
}

// startReaper reaps re-parented orphans until stopReaper; leader is the
// child whose reaping belongs to its Group.
func (c *containment) startReaper(leader int) {
	c.tree.SetLeader(leader)
	c.reaperStop = make(chan struct{})
	c.reaperDone = make(chan struct{})
	go func() {
		defer close(c.reaperDone)
		c.tree.RunReaper(c.reaperStop)
	}()
}

// close stops the reaper (after a last reap) and releases the cgroup's
// fd; endRest has removed the cgroup itself. Only the first call acts.
func (c *containment) close() {
	c.closeOnce.Do(func() {
		if c.reaperStop != nil {
			close(c.reaperStop)
			<-c.reaperDone
			c.tree.ReapOrphans()
		}
		if c.cg != nil {
			c.cg.Close()
		}
	})
}

// cgroupPath is the cgroup's directory, "" without one.
func (c *containment) cgroupPath() string {
	if c.cg == nil {
		return ""
	}
	return c.cg.Path()
}

// living reports whether any descendant still runs.
func (c *containment) living() bool { return len(c.tree.Living()) > 0 }

// reach signals the leader's group through its Group (while the leader
// is unreaped: the zombie keeps the id ours) and every other descendant
// through a pidfd; SIGKILL also goes to the cgroup. With no Group it is
// the rest that may outlive the leader.
type reach struct {
	c *containment
	g *shutdown.Group
}

// Signal reports whether anything was signalled.
func (r reach) Signal(sig syscall.Signal) bool {
	delivered, skip := false, 0
	if r.g != nil && r.g.Signal(sig) {
		delivered, skip = true, r.g.Pgid()
	}
	if r.c.tree.Signal(sig, skip) > 0 {
		delivered = true
	}
	if sig == syscall.SIGKILL && r.c.cg != nil {
		if pop, _ := r.c.cg.Populated(); pop && r.c.cg.Kill() == nil {
			delivered = true
		}
	}
	return delivered
}

// endRest is the last step of a run (spec §8.3): after exit and
// terminate(), wait for the descendants that got SIGTERM to go, within
// the grace; after the grace SIGKILL whatever is left, in rounds, within
// restKillWait; end and remove the cgroup. Survivors are named in an
// error frame and on stderr; pcwrap exits anyway.
func (s *session) endRest() {
	if s.awaitRest() {
		s.killRest()
	}
	if cg := s.contain.cg; cg != nil {
		if err := cg.End(); err != nil {
			s.reportSurvivors(nil, err)
		}
		// What killed wrappers left beside it goes now, when the child
		// no longer waits for it.
		cg.Sweep()
	}
}

// awaitRest waits until no descendant lives (false) or the grace of
// terminate() is over with its SIGKILL sent (true), scanning /proc every
// groupScanInterval: a stop whose descendants die on SIGTERM ends at once.
func (s *session) awaitRest() (graceOver bool) {
	t := time.NewTicker(groupScanInterval)
	defer t.Stop()
	for {
		select {
		case <-s.term.GraceOver():
			return true
		default:
		}
		if !s.contain.living() {
			return false
		}
		select {
		case <-s.term.GraceOver():
			return true
		case <-t.C:
		}
	}
}

// killRest SIGKILLs every living descendant in rounds until none is left
// or restKillWait has passed; survivors are reported.
func (s *session) killRest() {
	c := s.contain
	rest := reach{c: c}
	deadline := time.NewTimer(restKillWait)
	defer deadline.Stop()
	round := time.NewTicker(restKillRound)
	defer round.Stop()
	for {
		living := c.tree.Living()
		if len(living) == 0 {
			return
		}
		rest.Signal(syscall.SIGKILL)
		select {
		case <-deadline.C:
			if living = c.tree.Living(); len(living) > 0 {
				s.reportSurvivors(living, nil)
			}
			return
		case <-round.C:
		}
	}
}

// reportOOM names the OOM killer as the cause of a leader's SIGKILL where
// the cgroup's memory.events counts an oom_kill (only where the memory
// controller is enabled for it): an error frame before the exit frame,
// so the consumer can fail the turn with the reason.
func (s *session) reportOOM(sig string) {
	if sig != "SIGKILL" || s.contain.cg == nil {
		return
	}
	if n, err := s.contain.cg.OOMKills(); err == nil && n > 0 {
		msg := fmt.Sprintf("%s (memory.events oom_kill %d)", frame.OOMKilledPrefix, n)
		fmt.Fprintln(s.cfg.Stderr, msg)
		s.out.Emit(frame.ErrorFrame(msg))
	}
}

// reportSurvivors names what outlived terminate() in an error frame and
// on stderr.
func (s *session) reportSurvivors(living []shutdown.Proc, err error) {
	var msg string
	if err != nil {
		msg = "pcwrap: descendants survived terminate: " + err.Error()
	} else {
		names := make([]string, 0, len(living))
		for i, p := range living {
			if i == maxSurvivorsNamed {
				names = append(names, "…")
				break
			}
			names = append(names, p.String())
		}
		msg = fmt.Sprintf("pcwrap: %d descendants survived terminate after %v: %s", len(living), restKillWait, strings.Join(names, ", "))
	}
	fmt.Fprintln(s.cfg.Stderr, msg)
	s.out.Emit(frame.ErrorFrame(msg))
}

// oomPolicy raises pcwrap's own oom_score_adj to the child's target
// around the spawn, so the child starts with it and there is no window
// in which it runs unadjusted; the returned func lowers it back (allowed
// unprivileged down to the inherited value). A target at or below
// pcwrap's own changes nothing: the child inherits pcwrap's.
func oomPolicy(target int, log *slog.Logger) (restore func()) {
	own, err := readOOMScoreAdj()
	if err != nil {
		log.Debug("read oom_score_adj", "err", err)
		return func() {}
	}
	if target <= own {
		return func() {}
	}
	if err := writeOOMScoreAdj(target); err != nil {
		log.Warn("raise oom_score_adj for the child", "err", err)
		return func() {}
	}
	return func() {
		if err := writeOOMScoreAdj(own); err != nil {
			log.Warn("lower oom_score_adj back", "err", err)
		}
	}
}

// oomScoreAdjSize holds "-1000\n" and more.
const oomScoreAdjSize = 16

// readOOMScoreAdj and writeOOMScoreAdj use bare fds: an os.File would
// try to register the /proc file with the poller first (five syscalls
// that fail), and both run before every child's start.
func readOOMScoreAdj() (int, error) {
	fd, err := unix.Open(oomScoreAdjPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open oom_score_adj: %w", err)
	}
	defer unix.Close(fd)
	var buf [oomScoreAdjSize]byte
	n, err := ignoringEINTR(func() (int, error) { return unix.Read(fd, buf[:]) })
	if err != nil {
		return 0, fmt.Errorf("read oom_score_adj: %w", err)
	}
	return ParseOOMScoreAdj(string(buf[:max(n, 0)]))
}

func writeOOMScoreAdj(v int) error {
	fd, err := unix.Open(oomScoreAdjPath, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open oom_score_adj: %w", err)
	}
	defer unix.Close(fd)
	if _, err := ignoringEINTR(func() (int, error) { return unix.Write(fd, strconv.AppendInt(nil, int64(v), 10)) }); err != nil {
		return fmt.Errorf("write oom_score_adj: %w", err)
	}
	return nil
}

func ignoringEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != unix.EINTR {
			return n, err
		}
	}
}

// nprocPolicy lowers pcwrap's soft RLIMIT_NPROC by nprocHeadroom around
// the spawn, so the child's tree can never take the last slots of the
// uid's limit from pcwrap's own threads; the returned func restores it
// (raising a soft limit up to the hard one needs no privilege). An
// unlimited or tiny limit is left alone. A child may raise its own soft
// limit again; a fork bomb does not.
func nprocPolicy(log *slog.Logger) (restore func()) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY || lim.Cur <= 2*nprocHeadroom {
		return func() {}
	}
	lowered := lim
	lowered.Cur -= nprocHeadroom
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lowered); err != nil {
		log.Debug("lower RLIMIT_NPROC for the child", "err", err)
		return func() {}
	}
	return func() {
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			log.Warn("restore RLIMIT_NPROC", "err", err)
		}
	}
}

// cgroupRefused reports a CLONE_INTO_CGROUP failure worth one retry
// without it (then cgroup.procs): the kernel or a security module may
// refuse the cgroup fd where a plain spawn works.
func cgroupRefused(err error) bool {
	for _, e := range []error{syscall.EPERM, syscall.ENOSYS, syscall.EBUSY, syscall.EOPNOTSUPP, syscall.EINVAL, syscall.EACCES} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
