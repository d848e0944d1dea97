package pcwrap

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/cgroup"
	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/shutdown"
	"github.com/pcrunner/pcrunner/internal/stdinpoll"
)

// defaultPath is searched when the child env has no PATH, as execvp does
// (confstr _CS_PATH).
const defaultPath = "/bin:/usr/bin"

// childEnv returns pcwrap's environment overlaid with the payload env,
// minus every PAPERCLIP_PROCESS_SESSION* variable and pcwrap's own
// PCWRAP_OOM_SCORE_ADJ (spec §2.4). Entries
// execve cannot carry (a NUL, an empty name or '=' in the name) are
// skipped.
func childEnv(base []string, overlay [][2]string) []string {
	var keys []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			keys = append(keys, k)
		}
		vals[k] = v
	}
	for _, kv := range base {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			set(k, v)
		}
	}
	for _, kv := range overlay {
		set(kv[0], kv[1])
	}
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		v := vals[k]
		if k == "" || strings.HasPrefix(k, sessiondir.EnvPrefix) || k == EnvOOMScoreAdj || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			continue
		}
		env = append(env, k+"="+v)
	}
	return env
}

// lookPath resolves a bare command name against the CHILD's PATH (spec
// §2.4), not pcwrap's; relative PATH entries are relative to the child's
// cwd. A name with a slash is used as is. The error is the errno execvp
// would report: ENOENT when nothing matched, EACCES when only a
// non-executable file did.
func lookPath(command string, env []string, cwd string) (string, error) {
	if strings.Contains(command, "/") {
		return command, nil
	}
	path, found := defaultPath, false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path, found = v, true
		}
	}
	_ = found
	denied := false
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, command)
		abs := p
		if !filepath.IsAbs(p) {
			abs = filepath.Join(cwd, p)
		}
		st, err := os.Stat(abs)
		if err != nil || st.IsDir() {
			continue
		}
		if unix.Access(abs, unix.X_OK) != nil {
			denied = true
			continue
		}
		return abs, nil
	}
	if denied {
		return "", syscall.EACCES
	}
	return "", syscall.ENOENT
}

// spawnReason is the errno's text for the stderr line of a failed spawn,
// without the path os/exec prefixes.
func spawnReason(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e.Error()
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err.Error()
	}
	return err.Error()
}

// spawnErrno names the errno of a failed spawn for `spawn <cmd> <ERRNO>`.
func spawnErrno(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		return "ENOENT"
	}
	return "UNKNOWN"
}

// child is a spawned child with the parent ends of its pipes.
type child struct {
	group          *shutdown.Group
	feeder         *stdinpoll.Feeder
	stdout, stderr *os.File
}

// spawn starts the payload's command (spec §2.4) inside the containment
// (subreaper, cgroup, OOM policy, NPROC headroom; §8.3) and hands its group to
// terminate(). A failed spawn is reported as error, exit 127 and
// shutdownAck (§2.5).
func (s *session) spawn() (*child, int, bool) {
	p := s.payload
	cwd := p.Cwd
	if cwd == "" {
		cwd, _ = os.Getwd()
	}
	ch, err := startChild(p.Command, p.Args, cwd, childEnv(s.cfg.Environ, p.Env), s.enter, s.cfg.Logger)
	if err != nil {
		if s.contain != nil {
			s.contain.close()
			if cg := s.contain.cg; cg != nil {
				_ = cg.Remove()
			}
		} // else close abandons the pending one
		code := exitSpawn
		fmt.Fprintf(s.cfg.Stderr, "pcwrap: cannot spawn %s: %s (%s)\n", p.Command, spawnReason(err), spawnErrno(err))
		s.out.Emit(frame.ErrorFrame(fmt.Sprintf("spawn %s %s", p.Command, spawnErrno(err))))
		s.out.Emit(frame.ExitFrame(&code, ""))
		s.out.Emit(frame.ShutdownAckFrame())
		s.out.Close()
		return nil, exitSpawn, false
	}
	s.contain.startReaper(ch.group.Pgid())
	s.feedMu.Lock()
	s.feeder = ch.feeder
	s.feedMu.Unlock()
	s.term.Attach(reach{c: s.contain, g: ch.group})
	return ch, 0, true
}

// enter takes the containment for the spawn once everything else is
// ready, so that its making (beside setup) has the longest start: it
// waits for it, raises oom_score_adj and lowers RLIMIT_NPROC for the
// child to inherit. The child is started inside cg when there is one;
// leave restores pcwrap's own values once it runs.
func (s *session) enter() (cg *cgroup.Cgroup, leave func()) {
	s.contain = s.pending.get()
	restoreOOM := oomPolicy(s.oomScoreAdj, s.cfg.Logger)
	restoreNproc := nprocPolicy(s.cfg.Logger)
	return s.contain.cg, func() {
		restoreNproc()
		restoreOOM()
	}
}

// startChild starts command (resolved through the child's PATH) with
// three pipes, no shell, in its own process group (spec §2.4), inside
// the containment enter gives, called right before the clone: in its
// cgroup when there is one through CLONE_INTO_CGROUP, so its first forks
// land inside, else (refused) a plain spawn moved in through
// cgroup.procs.
func startChild(command string, args []string, cwd string, cenv []string, enter func() (*cgroup.Cgroup, func()), log *slog.Logger) (*child, error) {
	path, err := lookPath(command, cenv, cwd)
	if err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	newCmd := func() *exec.Cmd {
		return &exec.Cmd{
			Path:   path,
			Args:   append([]string{command}, args...),
			Env:    cenv,
			Dir:    cwd,
			Stdin:  inR,
			Stdout: outW,
			Stderr: errW,
		}
	}
	cg, leave := enter()
	var g *shutdown.Group
	if cg != nil {
		cmd := newCmd()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.FD()}
		g, err = shutdown.Start(cmd)
		if err != nil && cgroupRefused(err) {
			log.Debug("spawn into the cgroup refused; moving the child in after the spawn", "err", err)
			if g, err = shutdown.Start(newCmd()); err == nil {
				if aerr := cg.AddProc(g.Pgid()); aerr != nil {
					log.Debug("move the child into its cgroup", "err", aerr)
				}
			}
		}
	} else {
		g, err = shutdown.Start(newCmd())
	}
	leave()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, err
	}
	return &child{group: g, feeder: stdinpoll.NewFeeder(inW, nil), stdout: outR, stderr: errR}, nil
}
