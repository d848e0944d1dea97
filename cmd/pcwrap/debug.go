package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/pcrunner/pcrunner/internal/quote"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// Exit codes of the debugging subcommands (spec §10).
const (
	debugOK     = 0
	debugFailed = 1 // I/O error, missing or vanished session dir
	debugUsage  = 2
	debugNoAck  = 3 // pcwrap stop: no shutdownAck, dir removed anyway
)

// maxSendBytes bounds `pcwrap send -`: pcwrap reads each queue file whole
// into memory, so one file must stay well inside a small process's budget.
const maxSendBytes = 16 << 20

const debugHelp = `Host-side debugging for a pcwrap session directory. These commands talk to
a running pcwrap only through files in its session directory (the same
stdin/ queue and events/ files the Paperclip host uses); they never send a
signal and never print or log your input. DIR is the session directory, an
absolute path.

Usage:
  pcwrap send --session-dir DIR [--end] [--wait DURATION] [TEXT | -]
      Queue TEXT (exactly as given, no newline added) for the child's stdin.
      With "-", queue everything read from this command's stdin instead.
      --end then closes the child's stdin; --end alone only closes it.
      A session that is still starting (DIR or DIR/stdin missing) is waited
      for up to --wait (default 5s); one whose pcwrap has exited is an error.
      Put -- before a TEXT that starts with "-".
  pcwrap stop --session-dir DIR
      Close the child's stdin and wait up to 3000 ms for the child to exit
      on its own; then ask pcwrap to shut down (which terminates a child
      still running), wait up to 3000 ms for its acknowledgement, and
      remove DIR (symlinks are not followed).
  pcwrap tail --session-dir DIR [--text]
      Print every event file of DIR/events as one JSON line {"seq":N,...}
      as it arrives, and end after the child's exit frame. --text prints a
      data frame's output as "text" instead of base64 "data". Files are
      left in place for the session's real consumer.

Sequence numbers come from DIR/.pcwrap-stdin-seq, kept under a file lock;
do not mix these commands with another writer on the same session.

Example:
  pcwrap --session-dir /tmp/s -- cat &     # start a session running cat
  pcwrap send --session-dir /tmp/s hello   # cat receives "hello"
  pcwrap tail --session-dir /tmp/s --text &  # {"seq":1,"type":"data","stream":"stdout","text":"hello"}
  pcwrap stop --session-dir /tmp/s         # cat ends; the directory is removed

Exit status:
  0  done (stop: acknowledged and removed; tail: saw the exit frame)
  1  error: I/O failure, missing directory (send: after --wait), a session
     that has ended (send), DIR/events missing or vanished (tail)
  2  usage error
  3  stop only: no acknowledgement within 3000 ms; DIR was removed anyway
`

// runDebug runs a host-side debugging subcommand (pcwrap send|stop|tail,
// spec §10) and returns the process exit status.
func runDebug(name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// main catches SIGINT/SIGTERM for the wrapper; here they end the wait.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return debugMain(ctx, name, args, stdin, stdout, stderr)
}

// debugMain is runDebug with an injected context.
func debugMain(ctx context.Context, name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("pcwrap "+name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below, help on request
	fs.SortFlags = false
	dir := fs.String("session-dir", "", "the session directory (required)")
	var end, text *bool
	var wait *time.Duration
	switch name {
	case "send":
		end = fs.Bool("end", false, "after TEXT (or alone), close the child's stdin")
		wait = fs.Duration("wait", sessiondir.SendWait, "how long to wait for a session that is starting")
	case "tail":
		text = fs.Bool("text", false, "print data frames' output as text, not base64")
	}
	help := fs.BoolP("help", "h", false, "show this help")
	usage := func(msg string) int {
		fmt.Fprintf(stderr, "pcwrap %s: %s\nRun 'pcwrap %s --help' for usage.\n", name, msg, name)
		return debugUsage
	}
	if err := fs.Parse(args); err != nil {
		return usage(err.Error())
	}
	if *help {
		fmt.Fprint(stdout, debugHelp)
		return debugOK
	}
	if *dir == "" {
		return usage("--session-dir is required")
	}
	if !filepath.IsAbs(*dir) {
		// As for the wrapper itself (spec §2.1): a relative dir would name
		// a different session from another working directory.
		return usage("--session-dir must be an absolute path")
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "pcwrap %s: %v\n", name, err)
		return debugFailed
	}
	switch name {
	case "send":
		if *wait < 0 {
			return usage("--wait must not be negative")
		}
		return debugSend(ctx, *dir, fs.Args(), *end, *wait, stdin, usage, fail)
	case "stop":
		if fs.NArg() > 0 {
			return usage(fmt.Sprintf("unexpected argument %s", quote.Text(fs.Arg(0))))
		}
		err := sessiondir.Stop(ctx, *dir, sessiondir.StopOptions{OnNoAck: func() {
			fmt.Fprintln(stderr, "pcwrap stop: the wrapper did not acknowledge shutdown within 3000ms; removing the session directory anyway.")
		}})
		switch {
		case err == nil:
			return debugOK
		case errors.Is(err, sessiondir.ErrShutdownNotAcked):
			return debugNoAck
		}
		return fail(err)
	case "tail":
		if fs.NArg() > 0 {
			return usage(fmt.Sprintf("unexpected argument %s", quote.Text(fs.Arg(0))))
		}
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		opts := sessiondir.TailOptions{EventReaderOptions: sessiondir.EventReaderOptions{Logger: log}, Text: *text}
		if err := sessiondir.Tail(ctx, *dir, stdout, opts); err != nil {
			return fail(err)
		}
		return debugOK
	}
	return usage("unknown subcommand")
}

// debugSend queues one stdin file (TEXT or all of stdin) and/or stdinEnd.
func debugSend(ctx context.Context, dir string, args []string, end bool, wait time.Duration, stdin io.Reader,
	usage func(string) int, fail func(error) int) int {
	if len(args) > 1 {
		return usage(fmt.Sprintf("want one TEXT argument (quote it), got %d", len(args)))
	}
	if len(args) == 0 && !end {
		return usage("nothing to send: give TEXT, - (read stdin) or --end")
	}
	var data []byte
	if len(args) == 1 {
		data = []byte(args[0])
		if args[0] == "-" {
			b, err := io.ReadAll(io.LimitReader(stdin, maxSendBytes+1))
			if err != nil {
				return fail(fmt.Errorf("read stdin: %w", err))
			}
			if len(b) > maxSendBytes {
				return fail(fmt.Errorf("read stdin: more than %d bytes", maxSendBytes))
			}
			data = b
		}
	}
	// Checked before the counter is created: a mistyped DIR must not be
	// left holding a .pcwrap-stdin-seq, nor report the internals of the
	// counter's lock. A pcwrap started in the background a moment ago may
	// not have created DIR yet, hence the wait.
	if err := sessiondir.WaitSendTarget(ctx, dir, wait); err != nil {
		return fail(err)
	}
	c, err := sessiondir.LockSeqCounter(ctx, dir)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	w, err := sessiondir.OpenWriter(dir, c.Next(), sessiondir.WriterOptions{Reserve: c.Store})
	if err != nil {
		return fail(err)
	}
	defer w.Close()
	if len(args) == 1 {
		if _, err := w.Stdin(ctx, data); err != nil {
			return fail(err)
		}
	}
	if end {
		if _, err := w.StdinEnd(ctx); err != nil {
			return fail(err)
		}
	}
	return debugOK
}
