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
	"syscall"

	"github.com/pcrunner/pcrunner/internal/logging"
	"github.com/pcrunner/pcrunner/internal/pcwrap"
)

// The garbage collector keeps its defaults (no GOGC, no
// debug.SetMemoryLimit). pcwrap recycles its payload and frame buffers, so
// a 32 MiB round trip allocates a few MB in total and the heap stays at
// the runtime's 4 MiB minimum goal (gctrace: 4-5 collections). Peak RSS
// is set by the buffers in flight (emitter queue, stdin feeder queue),
// which are bounded instead. A memory limit below that working set would
// only make the collector run back to back: GOMEMLIMIT=6MiB saved ~2 MiB
// of RSS but cost 30-40% of MB per CPU-second in scripts/bench-pcwrap.
func main() {
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
