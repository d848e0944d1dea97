// Package pcwrap is the process-session wrapper (spec pcwrap-protocol.md):
// it runs exactly one child process and joins it to a session directory.
// Stdin arrives as sequence-numbered JSON files, output and exit leave as
// frames. Run is its whole life, in four stages, each in the file named
// for it: setup (§2, §4 steps 1-3), spawn (§2.4), supervise (§6, §7,
// §8.2) and drain (§8.1). With PAPERCLIP_PROCESS_SESSION_KEEP_GROUP_ON_EXIT=1
// (client terminals) keep replaces drain when the leader exits by itself:
// the exit is reported and the rest of the group runs on until shutdown.
package pcwrap

import (
	"context"
	"io"
	"log/slog"
	"os"
)

// Exit statuses of pcwrap itself (spec §2.5); a child's own exit code
// passes through unchanged.
const (
	ExitFailure = 1   // setup failure, payload, refusal, child killed by a signal
	exitSpawn   = 127 // the child could not be spawned
)

// Config is one run of the wrapper. Environ, Stdout, Stderr and Logger
// are required; the rest may be zero.
type Config struct {
	// SessionDir replaces PAPERCLIP_PROCESS_SESSION_DIR when set
	// (--session-dir).
	SessionDir string
	// Output replaces PAPERCLIP_PROCESS_SESSION_OUTPUT when set (--output).
	Output string
	// Command, when set, is the child's argv (debug mode "-- CMD ARGS"):
	// it runs in pcwrap's cwd and no payload is read.
	Command []string
	// Environ is pcwrap's environment ("K=V"), read for the launch
	// contract (§2.2) and overlaid for the child (§2.4).
	Environ []string
	// Signals carries the signals delivered to pcwrap (§8.2); the caller
	// catches SIGHUP, SIGINT, SIGTERM and SIGPIPE into it.
	Signals <-chan os.Signal
	// OOMScoreAdj replaces PCWRAP_OOM_SCORE_ADJ when set (--oom-score-adj):
	// the child's oom_score_adj, at least pcwrap's own.
	OOMScoreAdj *int
	Stdout      io.Writer
	Stderr      io.Writer
	Logger      *slog.Logger
}

// Run is pcwrap's whole life: set up the session (spec §4), spawn the
// child, pump output and read the stdin queue while supervising it, and
// end per §8. It returns the exit status of §2.5. A cancelled ctx asks
// for terminate(), as SIGTERM does; Run still returns only once the child
// is gone and the output is flushed.
func Run(ctx context.Context, cfg Config) int {
	// The containment (§8.3) is made beside setup and the identity
	// capture; the spawn waits for it.
	pend := startContainment(cfg.Logger)
	s, code, ok := setup(cfg)
	if !ok {
		pend.abandon()
		return code
	}
	s.pending = pend
	defer s.close()
	// Identity capture precedes the spawn and the reader (§4 step 3).
	verifier, code, ok := s.prepare(ctx)
	if !ok {
		return code
	}
	ch, code, ok := s.spawn()
	if !ok {
		return code
	}
	sup := s.start(ch, verifier)
	s.supervise(ctx, ch)
	if s.keepGroup {
		if code, done := s.keep(ctx, ch, sup); done {
			return code
		}
	}
	return s.drain(ch, sup)
}
