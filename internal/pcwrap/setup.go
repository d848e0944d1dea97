package pcwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/shutdown"
	"github.com/pcrunner/pcrunner/internal/stdinpoll"
)

// Bounds of the tuning variables (spec §2.2).
const (
	// maxGraceMS mirrors Node's setTimeout: a delay above 2^31-1 ms is
	// replaced by 1 ms.
	maxGraceMS = 1<<31 - 1
	// maxRetriesCap keeps a huge retry budget in int range (2^31 ticks
	// is over three years of 50 ms ticks: effectively never give up).
	maxRetriesCap = 1 << 31
)

// Fixed messages (spec §2.2, §2.5, §5.1); the CLI prints MsgMissingEnv too.
const (
	MsgMissingEnv = "Missing process session bridge env."
)

// env is a lookup over the process environment given to Run.
type env []string

func (e env) get(k string) string {
	v := ""
	for _, kv := range e {
		if s, ok := strings.CutPrefix(kv, k+"="); ok {
			v = s
		}
	}
	return v
}

// session is one run between setup and drain: the held session dir, the
// output, and terminate().
type session struct {
	cfg  Config
	env  env
	sd   *sessiondir.Dir
	out  *emitter
	term *shutdown.Terminator
	// keepGroup is the keep-group option (sessiondir.EnvKeepGroup).
	keepGroup bool
	// payload is what to spawn (§2.3), read by prepare.
	payload sessiondir.Payload
	// oomScoreAdj is the child's oom_score_adj target (§2.4).
	oomScoreAdj int
	// pending is the containment being made; spawn takes it as contain,
	// which finds and ends the child's descendants (§8.3).
	pending *pendingContainment
	contain *containment

	// feedMu guards feeder: the child's stdin writer exists only after
	// spawn, and terminate() closes it from any goroutine.
	feedMu sync.Mutex
	feeder *stdinpoll.Feeder
}

// setup resolves the output mode and the session dir, opens the dir and
// the output, and builds terminate() (spec §4 steps 1-2). When ok is
// false pcwrap exits with code, everything already reported.
func setup(cfg Config) (s *session, code int, ok bool) {
	e := env(cfg.Environ)
	mode, dir, ok := resolve(cfg, e)
	if !ok {
		return nil, ExitFailure, false
	}
	oomAdj, err := oomTarget(cfg, e)
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "pcwrap: %s: %v\n", EnvOOMScoreAdj, err)
		return nil, ExitFailure, false
	}
	s = &session{cfg: cfg, env: e, oomScoreAdj: oomAdj}
	events := mode == sessiondir.OutputEvents
	if !events {
		s.out = newStdoutEmitter(cfg.Stdout, cfg.Logger)
	}
	sd, err := sessiondir.Open(dir, events)
	if err != nil {
		return nil, s.refuse(dir, events, err), false
	}
	s.sd = sd
	if events {
		s.out = newEventsEmitter(sd.Events, cfg.Logger)
	}
	grace := sessiondir.ParseTuning(e.get(sessiondir.EnvGraceMS), shutdown.DefaultGrace.Milliseconds())
	if grace > maxGraceMS {
		grace = 1
	}
	s.keepGroup = e.get(sessiondir.EnvKeepGroup) == "1"
	s.term = shutdown.New(time.Duration(grace)*time.Millisecond, s.beginShutdown, func() { s.out.Emit(frame.ShutdownAckFrame()) })
	return s, 0, true
}

// resolve picks the output mode and the session dir from the flags, then
// the environment (§2.2); a bad value is reported on stderr.
func resolve(cfg Config, e env) (mode, dir string, ok bool) {
	mode = cfg.Output
	if mode == "" {
		mode = e.get(sessiondir.EnvOutput)
	}
	if mode == "" {
		mode = sessiondir.OutputEvents
	}
	if mode != sessiondir.OutputEvents && mode != sessiondir.OutputStdout {
		fmt.Fprintf(cfg.Stderr, "pcwrap: invalid output mode %s; want events or stdout\n", mode)
		return "", "", false
	}
	dir = cfg.SessionDir
	if dir == "" {
		dir = e.get(sessiondir.EnvDir)
	}
	if dir == "" {
		fmt.Fprintln(cfg.Stderr, MsgMissingEnv)
		return "", "", false
	}
	if !filepath.IsAbs(dir) {
		fmt.Fprintln(cfg.Stderr, "pcwrap: the process session dir must be an absolute path")
		return "", "", false
	}
	return mode, dir, true
}

// refuse reports a failed Open (spec §2.5) and returns the exit status.
func (s *session) refuse(dir string, events bool, err error) int {
	msg := setupMessage(err)
	if !events {
		return s.fail(msg, ExitFailure) // frames on stdout
	}
	if !errors.Is(err, sessiondir.ErrLocked) {
		// A refused stdin/ can still be reported as an event when
		// the session dir itself is sound.
		if ev, eerr := sessiondir.OpenEvents(dir); eerr == nil {
			defer ev.Close()
			s.out = newEventsEmitter(ev, s.cfg.Logger)
			return s.fail(msg, ExitFailure)
		}
	}
	// The session dir itself is refused: stderr, and for a symlink the
	// error event in an events/ that already exists behind it, with
	// nothing else created there (§2.5).
	fmt.Fprintln(s.cfg.Stderr, msg)
	if errors.Is(err, sessiondir.ErrSymlink) {
		if ev, eerr := sessiondir.OpenEventsBehindLink(dir); eerr == nil {
			defer ev.Close()
			out := newEventsEmitter(ev, s.cfg.Logger)
			out.Emit(frame.ErrorFrame(msg))
			out.Close()
		}
	}
	return ExitFailure
}

// fail reports a setup failure before any child exists: error frame
// (or stderr only, without an output), then shutdownAck.
func (s *session) fail(msg string, code int) int {
	if s.out == nil {
		fmt.Fprintln(s.cfg.Stderr, msg)
		return code
	}
	s.out.Emit(frame.ErrorFrame(msg))
	s.out.Emit(frame.ShutdownAckFrame())
	s.out.Close()
	return code
}

// beginShutdown is terminate()'s first step (§8.1 step 1): stop retrying
// output writes and close the child's stdin.
func (s *session) beginShutdown() {
	s.out.failFast()
	s.feedMu.Lock()
	if s.feeder != nil {
		s.feeder.Drop()
	}
	s.feedMu.Unlock()
}

// close releases what setup and spawn hold.
func (s *session) close() {
	s.term.Stop()
	switch {
	case s.contain != nil:
		s.contain.close()
	case s.pending != nil:
		s.pending.abandon() // no child was spawned
	}
	s.sd.Close()
}

// oomTarget is the child's oom_score_adj: the flag, else
// PCWRAP_OOM_SCORE_ADJ, else DefaultOOMScoreAdj.
func oomTarget(cfg Config, e env) (int, error) {
	if cfg.OOMScoreAdj != nil {
		return *cfg.OOMScoreAdj, nil
	}
	v := e.get(EnvOOMScoreAdj)
	if v == "" {
		return DefaultOOMScoreAdj, nil
	}
	return ParseOOMScoreAdj(v)
}

// prepare reads the payload and captures the identity (spec §4 step 3).
// A SIGTERM/SIGINT (or a cancelled ctx) before the spawn acknowledges and
// spawns nothing (§4).
func (s *session) prepare(ctx context.Context) (*sessiondir.Verifier, int, bool) {
	if s.stopRequested(ctx) {
		return nil, s.abort(), false
	}
	if len(s.cfg.Command) > 0 {
		cwd, _ := os.Getwd()
		s.payload = sessiondir.Payload{Command: s.cfg.Command[0], Args: s.cfg.Command[1:], Cwd: cwd}
	} else {
		p, err := readPayload(s.sd, s.env.get(sessiondir.EnvCommandB64))
		if err != nil {
			return nil, s.fail(sessiondir.ErrPayload.Error(), ExitFailure), false
		}
		s.payload = p
	}
	verifier, err := s.sd.Capture()
	if err != nil {
		var pe *sessiondir.ProbeError
		msg := err.Error()
		if errors.As(err, &pe) {
			fmt.Fprintln(s.cfg.Stderr, msg)
		} else {
			fmt.Fprintf(s.cfg.Stderr, "Failed to capture the process session identity: %s. Terminating.\n", strings.TrimSuffix(msg, "."))
		}
		return nil, s.fail(msg, ExitFailure), false
	}
	if s.stopRequested(ctx) {
		return nil, s.abort(), false
	}
	return verifier, 0, true
}

// abort is terminate() before a spawn: shutdownAck only.
func (s *session) abort() int {
	s.term.Terminate()
	s.out.Close()
	return ExitFailure
}

// stopRequested drains pending signals; it reports whether SIGTERM or
// SIGINT arrived or ctx is done.
func (s *session) stopRequested(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	for {
		select {
		case sig := <-s.cfg.Signals:
			if sig == syscall.SIGTERM || sig == syscall.SIGINT {
				return true
			}
		default:
			return false
		}
	}
}

// setupMessage is the frame/stderr text for a failed Open.
func setupMessage(err error) string {
	switch {
	case errors.Is(err, sessiondir.ErrSymlink):
		return sessiondir.ErrSymlink.Error()
	case errors.Is(err, sessiondir.ErrNotDir):
		return sessiondir.ErrNotDir.Error()
	case errors.Is(err, sessiondir.ErrLocked):
		return "pcwrap: " + sessiondir.ErrLocked.Error()
	}
	return "pcwrap: " + err.Error()
}

// readPayload takes the inline payload or, if that is empty, the staged
// command.b64 (always deleted, spec §2.3).
func readPayload(sd *sessiondir.Dir, inline string) (sessiondir.Payload, error) {
	if inline == "" {
		b, _, err := sd.ReadCommandFile()
		if err != nil {
			return sessiondir.Payload{}, err
		}
		inline = string(b)
	}
	return sessiondir.DecodePayload(inline)
}
