// Package runner is runnerd: its command line and configuration, the
// bootstrap ticket, build metadata, exit codes, and the control loop that
// admits commands, journals them, runs their effects and ships events.
package runner

import (
	"context"
	"fmt"
	"log/slog"
	"os"
)

// Run runs the durable runner described by cfg (Mode ModeDial or
// ModeListen) until ctx is cancelled or the runner stops, and returns the
// process exit status: ExitOK on success (revoke and a clean per-turn exit
// included), ExitFailure otherwise, after writing the failure to os.Stderr
// as one FormatError line (the server reads the code from that text).
// ticket is the bootstrap ticket from TakeBootstrapTicket; Run owns it and
// destroys it once a welcome delivers the lease token (prp.md §2.4).
//
// Placeholder: the control loop replaces this body.
func Run(ctx context.Context, cfg Config, ticket *BootstrapTicket, logger *slog.Logger) int {
	_ = ctx
	defer ticket.Destroy()
	err := NewError(CodeRunnerFailed, "control loop not implemented yet", nil)
	logger.Error("control loop not implemented yet", "mode", cfg.Mode.String())
	fmt.Fprint(os.Stderr, FormatError(err))
	return ExitCode(err)
}
