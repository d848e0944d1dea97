package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/pcwrap"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// Exit statuses of the CLI itself (spec §2.5); the wrapper's own
// (pcwrap.ExitFailure and its spawn-failure status) and a child's exit code pass
// through unchanged.
const (
	exitFailure = pcwrap.ExitFailure
	exitUsage   = 2 // bad flags
)

// options are the parsed command-line flags.
type options struct {
	sessionDir string   // --session-dir (overrides the env)
	output     string   // --output ("" = from the env)
	command    []string // after "--": the child, instead of the payload
	oomAdj     *int     // --oom-score-adj (nil = from the env)
}

// isTerminal reports whether w is a terminal (TCGETS succeeds on it).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

const usage = `pcwrap: run one child process joined to a process-session directory.

Usage:
  pcwrap [--output=events|stdout]
      Production mode. Everything comes from the environment:
        PAPERCLIP_PROCESS_SESSION_DIR          absolute session dir (required)
        PAPERCLIP_PROCESS_SESSION_COMMAND_B64  base64 JSON {command,args,cwd,env};
                                               if empty, <dir>/command.b64 is read
                                               and deleted
        PAPERCLIP_PROCESS_SESSION_STDIN_MAX_RETRIES   retry budget in 50 ms ticks (100)
        PAPERCLIP_PROCESS_SESSION_TERMINATE_GRACE_MS  SIGTERM->SIGKILL grace (3000)
        PAPERCLIP_PROCESS_SESSION_OUTPUT       events (default) or stdout
        PCWRAP_OOM_SCORE_ADJ                   the child's oom_score_adj, at least
                                               pcwrap's own (500); not passed on
        PAPERCLIP_PROCESS_SESSION_KEEP_GROUP_ON_EXIT  1: when the child exits,
                                               report its exit and leave the rest
                                               of its process group running until
                                               shutdown (client terminals); else
                                               the group is killed (agents)

  pcwrap --session-dir DIR [--output=events|stdout] [-- CMD ARGS...]
      Local debugging: DIR replaces PAPERCLIP_PROCESS_SESSION_DIR. With
      "-- CMD ARGS...", pcwrap runs CMD in its own cwd and environment and
      reads no payload.

  pcwrap send|stop|tail --session-dir DIR ...
      Host-side helpers: write stdin files, stop a session, print events.
      Run "pcwrap send --help" for details.

Input: the child's stdin is fed from DIR/stdin/000000000001.json, ...
({"type":"stdin","data":"<base64>"}, {"type":"stdinEnd"}, {"type":"shutdown"}).
Output: frames (data, exit, error, shutdownAck) as files DIR/events/*.json
(events mode) or as JSON lines with "seq" on stdout (stdout mode).

Exit status: the child's exit code; 1 if the child was killed by a signal,
pcwrap could not set up the session, or a setting has a bad value (e.g.
--output=xml, spec §2.2); 2 for an unknown flag, a stray argument or a
relative --session-dir; 127 if the child could not be spawned.

Flags:
`

// parseFlags parses the production/debug command line. It returns ok
// false with the exit code when pcwrap should exit at once (--help: 0,
// bad flags: 2, a bare pcwrap typed on a terminal: 1).
func parseFlags(args []string, stdout, stderr io.Writer) (options, int, bool) {
	var o options
	fs := pflag.NewFlagSet("pcwrap", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.sessionDir, "session-dir", "", "session directory (absolute); overrides PAPERCLIP_PROCESS_SESSION_DIR")
	fs.StringVar(&o.output, "output", "", "output mode: events (files in DIR/events) or stdout (JSON lines)")
	oomAdj := fs.String("oom-score-adj", "", "the child's oom_score_adj (-1000..1000, at least pcwrap's own); overrides PCWRAP_OOM_SCORE_ADJ")
	help := fs.BoolP("help", "h", false, "show this help")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "pcwrap: %v\nRun 'pcwrap --help' for usage.\n", err)
		return o, exitUsage, false
	}
	if *help {
		fmt.Fprint(stdout, usage+fs.FlagUsages())
		return o, 0, false
	}
	if fs.Changed("oom-score-adj") {
		v, err := pcwrap.ParseOOMScoreAdj(*oomAdj)
		if err != nil {
			fmt.Fprintf(stderr, "pcwrap: --oom-score-adj: %v\nRun 'pcwrap --help' for usage.\n", err)
			return o, exitUsage, false
		}
		o.oomAdj = &v
	}
	if len(args) == 0 && os.Getenv(sessiondir.EnvDir) == "" && os.Getenv(sessiondir.EnvOutput) == "" && isTerminal(stderr) {
		// Someone typed a bare "pcwrap": the spec's line (§2.1), then
		// where the help is. The host never runs pcwrap on a terminal, so
		// its stderr keeps exactly the line run prints.
		fmt.Fprintf(stderr, "%s\npcwrap: set %s to an absolute session directory, or run pcwrap --session-dir DIR -- CMD.\nRun 'pcwrap --help' for usage.\n", pcwrap.MsgMissingEnv, sessiondir.EnvDir)
		return o, exitFailure, false
	}
	if o.sessionDir != "" && !filepath.IsAbs(o.sessionDir) {
		// A usage error, as for send, stop and tail: the flag is typed by
		// hand. (A relative PAPERCLIP_PROCESS_SESSION_DIR stays the
		// setup failure, exit 1, that spec §2.1 gives.)
		fmt.Fprint(stderr, "pcwrap: --session-dir must be an absolute path\nRun 'pcwrap --help' for usage.\n")
		return o, exitUsage, false
	}
	rest := fs.Args()
	if dash := fs.ArgsLenAtDash(); dash >= 0 {
		if dash > 0 {
			fmt.Fprintf(stderr, "pcwrap: unexpected argument %q before --\nRun 'pcwrap --help' for usage.\n", rest[0])
			return o, exitUsage, false
		}
		if len(rest) == 0 {
			fmt.Fprint(stderr, "pcwrap: no command after --\nRun 'pcwrap --help' for usage.\n")
			return o, exitUsage, false
		}
		if o.sessionDir == "" {
			fmt.Fprint(stderr, "pcwrap: -- CMD needs --session-dir\nRun 'pcwrap --help' for usage.\n")
			return o, exitUsage, false
		}
		o.command = rest
	} else if len(rest) > 0 {
		fmt.Fprintf(stderr, "pcwrap: unexpected argument %q\nRun 'pcwrap --help' for usage.\n", rest[0])
		return o, exitUsage, false
	}
	return o, 0, true
}
