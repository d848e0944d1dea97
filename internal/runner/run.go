// Package runner is runnerd's control loop: it admits commands, journals
// them, runs their effects and ships events. What runnerd is launched with
// (flags, the bootstrap ticket, exit codes) is internal/runner/config.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

// Run runs the durable runner described by cfg (Mode config.ModeDial or
// config.ModeListen) until ctx is cancelled or the runner stops, and returns
// the process exit status: config.ExitOK on success (revoke and a clean
// per-turn exit included), config.ExitFailure otherwise, after writing the
// failure to os.Stderr as one config.FormatError line (the server reads the
// code from that text). ticket is the bootstrap ticket from
// config.TakeBootstrapTicket; Run owns it and destroys it once a welcome
// delivers the lease token (prp.md §2.4).
//
// A cancelled ctx (SIGTERM, SIGINT) is an orderly stop: the state is saved
// and Run returns config.ExitOK (prp.md §13).
func Run(ctx context.Context, cfg config.Config, ticket *config.BootstrapTicket, logger *slog.Logger) int {
	return runTo(ctx, cfg, ticket, logger, options{ReleaseStartupMemory: debug.FreeOSMemory}, os.Stderr)
}

func runTo(ctx context.Context, cfg config.Config, ticket *config.BootstrapTicket, logger *slog.Logger, opts options, stderr io.Writer) int {
	err := runLoop(ctx, cfg, ticket, logger, opts)
	if err != nil {
		logger.Error("runner stopped", "code", string(config.CodeOf(err)))
		fmt.Fprint(stderr, config.FormatError(err))
	}
	return config.ExitCode(err)
}

// refuseIndexedStore fails when dir holds the reference's indexed store:
// runnerd cannot read it, and starting beside it with a fresh JSON state
// would fork the run's truth (durability.md §7.1: the reference fails closed
// across formats). A missing directory is state.Open's to create.
func refuseIndexedStore(dir string) error {
	_, err := os.Lstat(filepath.Join(dir, config.StorageStateFile))
	switch {
	case err == nil:
		return config.NewError(config.CodeIndexedStateUnsupported,
			"the state directory holds "+config.StorageStateFile+" (the reference's indexed store), which runnerd cannot read; refusing to start", nil)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		return config.NewError(config.CodeRunnerFailed, "check the state directory for "+config.StorageStateFile, err)
	}
}

// options are the control loop's seams for the executor and for tests.
type options struct {
	// Handlers replaces the ACP executor's handlers by command type, so a
	// test can stand in for the far side of the executor; each is built with
	// the loop's emit. Lifecycle commands (runner.*, session.snapshot) are
	// the loop's own and cannot be replaced. Run sets none.
	Handlers map[string]func(emit) handler
	// OnListening, when set, receives the bound listener address in listen
	// mode before the first accept.
	OnListening func(addr string)
	// Clock is the time source of the loop's and the agent's timers; nil
	// means clock.System (which testing/synctest already simulates).
	Clock clock.Clock
	// Transport, in dial mode, carries the upgrade instead of TCP (tests:
	// an in-memory pipe, so they run in testing/synctest).
	Transport http.RoundTripper
	// SendFrameLimit and ReceiveFrameLimit lower runnerd's secure-channel
	// frame bounds (prp.ClientConfig; tests only). Run sets neither.
	SendFrameLimit, ReceiveFrameLimit uint64
	// SendQueue lowers the link's send queue (prp.ClientConfig; tests
	// only). Run sets none.
	SendQueue int
	// Resolver, in dial mode, resolves the --connect-url host instead of
	// the system's (tests). Run sets none.
	Resolver prp.Resolver
	// StoreFault injects state write failures (state.Config.WriteFault;
	// tests only). Run sets none.
	StoreFault func(op string) error
	// OnReadHeld observes the client's reader stopping at the deferral
	// bound (prp.ClientConfig; tests only). Run sets none.
	OnReadHeld func(frames int, bytes int64)
	// ReleaseStartupMemory runs once, when start-up is done and before the
	// client connects or accepts. Run sets debug.FreeOSMemory; tests set
	// none (a forced collection per test would only slow the suites) or a
	// probe.
	ReleaseStartupMemory func()
}

// runLoop is Run without the stderr line: it returns nil for every clean
// stop (revoke, terminal command, a stopped or revoked state, ctx's end)
// and a coded *config.Error otherwise.
func runLoop(ctx context.Context, cfg config.Config, ticket *config.BootstrapTicket, logger *slog.Logger, opts options) error {
	defer ticket.Destroy()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := refuseIndexedStore(cfg.StateDir); err != nil {
		return err
	}
	// The dial target is resolved and checked before any state exists: a
	// ws:// name that is not loopback, or one that does not resolve, leaves
	// nothing behind for the next start to "recover".
	var dialer *prp.Dialer
	if cfg.Mode == config.ModeDial {
		d, err := prp.NewDialer(ctx, prp.DialerConfig{
			URL: cfg.ConnectURL.String(), CABundlePath: cfg.CABundlePath, Transport: opts.Transport,
			Resolver: opts.Resolver,
		})
		switch {
		case errors.Is(err, prp.ErrNonLoopback):
			return config.NewError(config.CodeConnectURLInvalid, "--connect-url", err)
		case err != nil:
			return config.NewError(config.CodeRunnerFailed, "prepare dialer", err)
		}
		defer d.CloseIdle()
		dialer = d
	}
	frames := newFrameLimit(int(cfg.MaxFrameBytes))
	st, err := state.Open(state.Config{
		Dir: cfg.StateDir, Identity: cfg.Identity,
		MaxOutboxBytes: int(cfg.MaxOutboxBytes), P0ReserveBytes: int(cfg.P0ReserveBytes),
		MaxFrameBytes: int(cfg.MaxFrameBytes), FrameLimit: frames.get, Logger: logger, Clock: opts.Clock,
		WriteFault: opts.StoreFault,
	})
	switch {
	case errors.Is(err, state.ErrExitNow):
		logger.Info("runner state is final; exiting", "reason", err.Error())
		return nil
	case err != nil:
		return config.NewError(config.CodeRunnerFailed, "open runner state", err)
	}
	defer func() {
		if cerr := st.Close(); cerr != nil {
			logger.Error("close runner state", "err", cerr)
		}
	}()

	r := newLoop(cfg, st, logger, opts)
	r.frames = frames
	r.transport = opts.Transport
	ax, err := newAgentExec(r)
	if err != nil {
		return config.NewError(config.CodeRunnerFailed, "load agent record", err)
	}
	r.attachExecutor(ax, opts)
	if !ticket.Present() {
		return config.ErrBootstrapTicketMissing // a restart needs a fresh ticket too: leases live in memory only
	}
	secret := ticket.Reveal()
	defer clear(secret)
	ccfg := prp.ClientConfig{
		Identity:      cfg.Identity,
		RunnerVersion: cfg.RunnerVersion, RunnerDigest: cfg.RunnerDigest,
		Ticket:        string(secret), // prp keeps it in memory until the welcome
		MaxFrameBytes: int(cfg.MaxFrameBytes), PingInterval: cfg.PingInterval,
		SilenceTimeout: cfg.SilenceTimeout, ReconnectDelay: cfg.ReconnectDelay,
		IndexedState:   cfg.IndexedState,
		SendFrameLimit: opts.SendFrameLimit, ReceiveFrameLimit: opts.ReceiveFrameLimit,
		SendQueue: opts.SendQueue,
		Resume:    r.resume, Pong: r.pong,
		OnAuthenticated: func(ctx context.Context, c *prp.Conn, w *prp.Welcome) error {
			if w.Bootstrapped {
				ticket.Destroy() // prp.md §2.4: the lease replaces it
			}
			return r.onAuthenticated(ctx, c, w)
		},
		OnControl: r.onControl,
		OnLost:    r.onLost,
		OnEnding:  r.onEnding,
		// durability.md §6.2 item 4: no reconnect while a write waits for
		// disk space (the lease's expiry ends the wait instead).
		HoldReconnect: func() bool { return r.store.Summary().DiskFull },
		// §6.2 item 2: frames wait, bounded, behind a write waiting for
		// disk space.
		Deferral:   r.deferral,
		OnReadHeld: r.readHeld(opts.OnReadHeld),

		OnCommandArrived: r.onCommandArrived,
		Logger:           logger,
		Clock:            r.clk,
	}
	if cfg.HasReconnectGrace {
		ccfg.ReconnectGrace = cfg.ReconnectGrace
	}
	if cfg.MaxLifetime > 0 {
		ccfg.Deadline = r.started.Add(cfg.MaxLifetime)
	}
	switch cfg.Mode {
	case config.ModeDial:
		ccfg.Dialer = dialer
	case config.ModeListen:
		ln, err := prp.Listen(prp.ListenConfig{
			Address: cfg.ListenAddress.String(), Port: int(cfg.ListenPort), Path: cfg.ListenPath,
			MaxFrameBytes: int(cfg.MaxFrameBytes), Logger: logger,
		})
		if err != nil {
			return config.NewError(config.CodeIngressBindConflict, "listen", err)
		}
		defer ln.Close()
		logger.Info("listening", "address", ln.Addr().String(), "path", cfg.ListenPath)
		if opts.OnListening != nil {
			opts.OnListening(ln.Addr().String())
		}
		ccfg.Listener = ln
		r.listener = ln
	default:
		return config.NewError(config.CodeRunnerFailed, "mode "+cfg.Mode.String()+" has no control loop", nil)
	}
	if opts.ReleaseStartupMemory != nil {
		// Start-up (package initialisation, opening or migrating the store,
		// loading the agent record) leaves garbage no collection has
		// reclaimed yet, and an idle runner allocates too little to start
		// one for minutes, so those pages stay resident. One collection
		// that returns the free pages to the kernel costs a few
		// milliseconds here, once, ahead of the first connection rather
		// than inside the connected, idle runner's time (after the
		// listening line, so start-to-listening is not delayed).
		opts.ReleaseStartupMemory()
	}
	client, err := prp.NewClient(ccfg)
	if err != nil {
		return config.NewError(config.CodeRunnerFailed, "start client", err)
	}
	return r.run(ctx, client)
}

// idleWithoutServer ends a warm runner whose idle timeout passed before any
// server authenticated in this process (a listen-mode runnerd nobody
// dialled, a dial-mode one whose server never answered), and reports
// whether it did. The automatic suspend would wait for the ACK of
// runner.suspending, which no server is there to send, and, with no lease
// and no grace running yet, nothing else would ever end the process. So it
// stops as on SIGTERM instead: state left as found (not "suspending", which
// the next runnerd would have to finish), agents stopped, exit 0, as
// --idle-timeout-ms promises (prp.md §13).
func (r *loop) idleWithoutServer() bool {
	if r.send.connectionCount() > 0 {
		return false
	}
	r.log.Info("warm runner idle and no server has connected; exiting", "idleTimeout", r.cfg.IdleTimeout.String())
	r.finish(errCleanStop)
	return true
}

// exitFor maps the client's terminal condition to the runner's outcome,
// recording the recoverable failure the spec names (prp.md §5, §6.1).
func (r *loop) exitFor(ctx context.Context, err error) error {
	if stop := r.stopErr(); stop != nil {
		if errors.Is(stop, errCleanStop) {
			return nil
		}
		return stop
	}
	record := func(code config.Code) {
		uerr := r.update(func(tx *state.Tx) error {
			tx.SetRecoverableFailure(string(code))
			return tx.SetLifecycle(state.RecoverableFailure)
		})
		if uerr != nil {
			r.log.Error("record recoverable failure", "err", uerr)
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, prp.ErrRevoked):
		// prp.md §5: persist revoked with the honoured epoch, shut the
		// executor down, exit 0.
		var rev *prp.RevokedError
		if !errors.As(err, &rev) {
			return config.NewError(config.CodeRunnerFailed, "revoke without its epoch", err)
		}
		uerr := r.update(func(tx *state.Tx) error {
			return tx.Revoke(uint64(max(rev.Epoch, 0)), uint64(max(rev.LeaseEpoch, 0)))
		})
		switch {
		case errors.Is(uerr, state.ErrWriteAborted):
			// Revoked while a write waited for disk space: the core no
			// longer honours this lease, so the agents stop and the
			// process exits without the revoked lifecycle on disk.
			r.log.Warn("lease revoked while the disk is full; revoked lifecycle not persisted", "err", uerr)
			return nil
		case errors.Is(uerr, state.ErrRevokeNotAdvancing):
			// Below an epoch this state already honoured: a replayed revoke.
			return config.NewError(config.CodeRunnerFailed, "protocol error: revoke did not advance the stored revocation epoch", nil)
		case uerr != nil:
			return config.NewError(config.CodeRunnerFailed, "persist revoked lifecycle", uerr)
		}
		r.log.Info("lease revoked; exiting")
		return nil
	case errors.Is(err, prp.ErrRevokeEpoch):
		return config.NewError(config.CodeRunnerFailed, "protocol error: revoke did not advance the revocation epoch", nil)
	case errors.Is(err, prp.ErrLeaseExpired):
		record(config.CodeLeaseExpired)
		return config.NewError(config.CodeLeaseExpired, "connection lease expired; a fresh bootstrap ticket is required", nil)
	case errors.Is(err, prp.ErrReconnectGraceExceeded):
		record(config.CodeReconnectGraceExceeded)
		return config.NewError(config.CodeReconnectGraceExceeded, "disconnected longer than --reconnect-grace-ms", nil)
	case errors.Is(err, prp.ErrReconnectDeadlineExceeded):
		record(config.CodeReconnectDeadlineExceeded)
		return config.NewError(config.CodeReconnectDeadlineExceeded, "lifetime ended while reconnecting", nil)
	case errors.Is(err, prp.ErrTicketConsumed):
		return config.ErrBootstrapFailedClosed
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		r.log.Info("signal received; orderly stop")
		return nil
	}
	return config.NewError(config.CodeRunnerFailed, "control loop", err)
}
