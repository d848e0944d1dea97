// Command pcwrap runs one child process and joins it to a process-session
// directory: stdin arrives as sequence-numbered JSON files, output and exit
// leave as frames (spec pcwrap-protocol.md). It is a drop-in for the
// Paperclip reference's Node process-session wrapper.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/pcrunner/pcrunner/internal/logging"
	"github.com/pcrunner/pcrunner/internal/pcwrap"
)

// procs is how many goroutines of pcwrap run Go code at once (see main).
const procs = 1

// The garbage collector keeps its defaults (no GOGC, no
// debug.SetMemoryLimit). pcwrap recycles its payload and frame buffers, so
// a 32 MiB round trip allocates a few MB in total and the heap stays at
// the runtime's 4 MiB minimum goal (gctrace: 4-5 collections). Peak RSS
// is set by the buffers in flight (emitter queue, stdin feeder queue),
// which are bounded instead. A memory limit below that working set would
// only make the collector run back to back: GOMEMLIMIT=6MiB saved ~2 MiB
// of RSS but cost 30-40% of MB per CPU-second in scripts/bench-pcwrap.
//
// One P (procs) unless GOMAXPROCS is set: pcwrap moves bytes between
// files, pipes and its stdout, and each stdin file passes through several
// goroutines in turn (the watch's, the reader, the feeder); with a second
// P idle, each hand-off woke another thread to run it. On one P the
// goroutine that is handed the work runs next on the same thread.
// Medians of alternating runs of scripts/bench-pcwrap: wake-ups per
// 64 KiB stdin file 11 -> 5, CPU per small stdin file 114 -> 74 us. The
// feeder's writer then runs only when the reader pauses, so its bounded
// queue fills more often; the Feeder keeps a free buffer for every queued
// chunk (stdinpoll's freeBufs), else that churn grows the heap. A
// goroutine blocked in a syscall (the wait for the child) still loses the
// P to the others, as on more Ps.
func main() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(procs)
	}
	// Caught, never ignored (spec §8.2): a caught signal reverts to the
	// default across exec, so the child starts with default dispositions
	// even under nohup; a caught SIGPIPE turns a broken stdout into EPIPE.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)

	if len(os.Args) > 1 {
		switch name := os.Args[1]; name {
		case "send", "stop", "tail":
			os.Exit(runDebug(name, os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
		}
	}
	opts, code, ok := parseFlags(os.Args[1:], os.Stdout, os.Stderr)
	if !ok {
		os.Exit(code)
	}
	startProfile()
	log := logging.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "pcwrap")
	exit(pcwrap.Run(context.Background(), pcwrap.Config{
		SessionDir:  opts.sessionDir,
		Output:      opts.output,
		Command:     opts.command,
		Environ:     os.Environ(),
		Signals:     sigs,
		OOMScoreAdj: opts.oomAdj,
		Stdout:      os.Stdout,
		Stderr:      os.Stderr,
		Logger:      log,
	}))
}
