// Command runnerd (installed as paperclip-runnerd) is the in-sandbox
// Paperclip runner daemon. See paperclip-runnerd --help,
// internal/runner/config (how it is launched) and internal/runner (its
// control loop).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/pcrunner/pcrunner/internal/logging"
	"github.com/pcrunner/pcrunner/internal/runner"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

func main() {
	// The bootstrap ticket leaves the environment before anything else runs,
	// argument parsing included (prp.md §13).
	ticket, ticketErr := config.TakeBootstrapTicket()
	stop := startProfile()
	code := run(os.Args[1:], ticket, ticketErr, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// testHook, set only in builds with the testhooks tag, runs after the
// command line is accepted and before runner.Run; done=true ends the process
// with code instead of running the runner.
var testHook func(stdout, stderr io.Writer) (code int, done bool)

func run(args []string, ticket *config.BootstrapTicket, ticketErr error, stdout, stderr io.Writer) int {
	cfg, err := config.ParseArgs(args, os.LookupEnv)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprint(stdout, config.Help)
		return config.ExitOK
	case err != nil:
		return fail(stderr, err)
	case cfg.Mode == config.ModeBuildMetadata:
		if _, err := stdout.Write(config.MarshalMetadata()); err != nil {
			return fail(stderr, config.NewError(config.CodeRunnerFailed, "write build metadata", err))
		}
		return config.ExitOK
	case cfg.Mode == config.ModeStorage:
		// Every storage operation belongs to the reference's indexed store,
		// which runnerd does not keep (durability.md §7.3, §8.1).
		return fail(stderr, config.StorageUnsupported(cfg.StorageOperation))
	case cfg.Mode == config.ModeStateDump:
		if err := state.Dump(cfg.StateDir, stdout); err != nil {
			return fail(stderr, config.NewError(config.CodeRunnerFailed, "state dump", err))
		}
		return config.ExitOK
	case ticketErr != nil:
		return fail(stderr, ticketErr)
	case !ticket.Present():
		return fail(stderr, config.NewError(config.CodeBootstrapTicketMissing, config.BootstrapTicketEnv+" is required in dial and listen mode", nil))
	}

	if cfg.DiagnosticsDir != "" {
		// From here on runnerd's output goes only to the bounded, redacted
		// diagnostics files (prp.md §13).
		diag, err := config.OpenDiagnostics(cfg.DiagnosticsDir, os.Environ())
		if err != nil {
			return fail(stderr, err)
		}
		defer diag.Close()
		stdout, stderr = diag.Stdout(), diag.Stderr()
	}
	logger := newLogger(cfg.LogFormat, cfg.LogLevel, stderr).With("component", "runnerd")
	for _, w := range cfg.Warnings {
		logger.Warn(w)
	}
	if len(cfg.Ignored) > 0 {
		logger.Info("ignoring flags runnerd does not use", "flags", cfg.Ignored)
	}
	if testHook != nil {
		if code, done := testHook(stdout, stderr); done {
			return code
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return runner.Run(ctx, cfg, ticket, logger)
}

func fail(stderr io.Writer, err error) int {
	fmt.Fprint(stderr, config.FormatError(err))
	return config.ExitCode(err)
}

// newLogger builds runnerd's logger. The packages below add their own
// component to it (state, agent, acpx, prp); logging joins them into one
// key ("runnerd.agent.acpx").
func newLogger(format config.LogFormat, level slog.Level, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == config.LogFormatText {
		return logging.New(slog.NewTextHandler(w, opts))
	}
	return logging.New(slog.NewJSONHandler(w, opts))
}
