package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/pcrunner/pcrunner/internal/quote"
)

// ignoredFlags are the reference's flags that runnerd accepts, each with a
// value, and ignores in durable modes (prp.md §13): the ACPX sidecar and
// OpenCode proxy launch profiles (runnerd has no sidecar) and the local fake
// harness, which the server's launcher passes on every launch.
// --opencode-executable is honoured (kind opencode, codex.md §6); its
// digest is not checked.
var ignoredFlags = []string{
	"acpx-launch-authority-digest",
	"acpx-sidecar-command",
	"acpx-sidecar-command-sha256",
	"acpx-sidecar-script",
	"acpx-sidecar-script-sha256",
	"opencode-proxy-command",
	"opencode-proxy-command-sha256",
	"opencode-proxy-script",
	"opencode-proxy-script-sha256",
	"opencode-executable-sha256",
	"fake-harness",
	"fake-harness-script",
}

// repeatableFlags may be given more than once.
var repeatableFlags = map[string]bool{"session-open-cold-timeout-agent": true}

// listenFlags select listen mode.
var listenFlags = []string{"listen-address", "listen-port", "listen-path"}

// identityFlags are required in durable modes, in R-bin's order.
var identityFlags = []string{
	"state-dir", "runner-id", "environment-lease-id", "run-id", "session-id", "turn-id", "item-id",
	"runner-version", "runner-digest",
}

// ParseArgs parses runnerd's arguments (without the program name) and
// validates them. It returns pflag.ErrHelp for -h/--help, and otherwise a
// *usageError for anything wrong: unknown flags, a flag given twice, a
// missing value, a value out of range, a mode conflict. It reads env only to
// fail safe: the bootstrap ticket must already have been taken out of the
// environment (TakeBootstrapTicket) before arguments are parsed.
func ParseArgs(args []string, env Environ) (Config, error) {
	if env != nil {
		if _, ok := env(BootstrapTicketEnv); ok {
			return Config{}, &usageError{Code: CodeBootstrapTicketInvalid, Problem: BootstrapTicketEnv + " is still in the environment; it must be taken before argument parsing"}
		}
	}
	if len(args) > 0 && args[0] == StorageCommand {
		return parseStorage(args[1:])
	}
	if len(args) > 0 && args[0] == StateCommand {
		return parseStateCommand(args[1:])
	}
	p := newParser()
	if err := p.parse(args); err != nil {
		return Config{}, err
	}
	return p.validate()
}

// parser holds the flag set and the raw values while parsing.
type parser struct {
	fs    *pflag.FlagSet
	cfg   Config
	seen  map[string]int
	order []string

	buildMetadata bool
	connectURL    string
	listenAddress string
	listenPort    uint64
	lifecycle     string
	logFormat     string
	logLevel      string
	maxLifetime   time.Duration
	maxRuntime    time.Duration
	coldAgents    agentTimeouts
	ignored       map[string]*string
	coldStarts    int64
}

func newParser() *parser {
	p := &parser{seen: map[string]int{}, ignored: map[string]*string{}}
	c := &p.cfg
	fs := pflag.NewFlagSet("paperclip-runnerd", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Usage = func() {}
	p.fs = fs

	fs.Var(&presenceFlag{dst: &p.buildMetadata}, "build-metadata", "print build metadata JSON and exit")
	fs.Lookup("build-metadata").NoOptDefVal = "true"

	fs.StringVar(&p.connectURL, "connect-url", "", "dial the server at this ws:// or wss:// URL")
	fs.StringVar(&c.CABundlePath, "ca-bundle-path", "", "extra PEM roots for wss:// (private regular file, at most 4 MiB)")
	fs.StringVar(&p.listenAddress, "listen-address", defaultListenAddress, "listen mode: address to bind")
	fs.Var(&uintFlag{dst: &p.listenPort, max: 65535}, "listen-port", "listen mode: TCP port to bind")
	p.listenPort = defaultListenPort
	fs.StringVar(&c.ListenPath, "listen-path", "", "listen mode: "+listenPathPrefix+"<run-id>")

	fs.StringVar(&c.StateDir, "state-dir", "", "durable state directory")
	fs.Var(&presenceFlag{dst: &c.IndexedState}, "indexed-state", "the server's core keeps indexed state; runnerd keeps runner-state.json")
	fs.Lookup("indexed-state").NoOptDefVal = "true"
	fs.StringVar(&c.Identity.RunnerInstanceID, "runner-id", "", "runner instance id")
	fs.StringVar(&c.Identity.EnvironmentLeaseID, "environment-lease-id", "", "environment lease id")
	fs.StringVar(&c.Identity.RunID, "run-id", "", "run id")
	fs.StringVar(&c.Identity.NormalizedSessionID, "session-id", "", "normalized session id")
	fs.StringVar(&c.Identity.TurnID, "turn-id", "", "turn id")
	fs.StringVar(&c.Identity.ItemID, "item-id", "", "item id")
	fs.StringVar(&c.RunnerVersion, "runner-version", "", "runner version the server expects")
	fs.StringVar(&c.RunnerDigest, "runner-digest", "", "runner digest the server expects (sha256:<hex>)")

	c.MaxOutboxBytes, c.P0ReserveBytes, c.MaxFrameBytes = defaultMaxOutboxBytes, defaultP0ReserveBytes, defaultMaxFrameBytes
	fs.Var(&bytesFlag{dst: &c.MaxOutboxBytes, min: 1, max: maxOutboxBytesLimit}, "max-outbox-bytes", "outbox hard limit in bytes")
	fs.Var(&bytesFlag{dst: &c.P0ReserveBytes, min: 0, max: maxOutboxBytesLimit}, "p0-reserve-bytes", "outbox bytes reserved for P0 events")
	fs.Var(&bytesFlag{dst: &c.MaxFrameBytes, min: minMaxFrameBytes, max: maxMaxFrameBytes}, "max-frame-bytes", "largest WebSocket frame in bytes (1 KiB to 16 MiB)")

	c.ReconnectDelay = defaultReconnectDelay
	fs.Var(&msFlag{dst: &c.ReconnectDelay, max: maxReconnectDelay}, "reconnect-delay-ms", "reconnect backoff base")
	fs.Var(&msFlag{dst: &c.ReconnectGrace, max: maxServerDuration, saturate: true, set: &c.HasReconnectGrace}, "reconnect-grace-ms", "exit when disconnected longer than this")
	fs.Var(&msFlag{dst: &p.maxLifetime, max: maxServerDuration, saturate: true}, "max-lifetime-ms", "process lifetime; 0 = unlimited")
	fs.Var(&msFlag{dst: &p.maxRuntime, max: maxServerDuration, saturate: true}, "max-runtime-ms", "alias of --max-lifetime-ms")
	fs.StringVar(&p.lifecycle, "lifecycle-mode", string(defaultLifecycle), "per_turn or warm")
	fs.Var(&msFlag{dst: &c.IdleTimeout, min: time.Millisecond, max: maxServerDuration, saturate: true}, "idle-timeout-ms", "warm lifecycle idle timeout (required for warm)")
	fs.StringVar(&c.DiagnosticsDir, "diagnostics-directory", "", "directory for bounded, redacted runnerd logs")

	c.PingInterval, c.SilenceTimeout = defaultPingInterval, defaultSilenceTimeout
	fs.Var(&msFlag{dst: &c.PingInterval, min: minPingInterval, max: maxDurationFlag}, "ping-interval-ms", "send a WebSocket Ping after this long without sending")
	fs.Var(&msFlag{dst: &c.SilenceTimeout, min: minPingInterval, max: maxDurationFlag}, "silence-timeout-ms", "treat the connection as half-open after this long without receiving")
	fs.StringVar(&p.logFormat, "log-format", string(defaultLogFormat), "json or text")
	fs.StringVar(&p.logLevel, "log-level", "info", "debug, info, warn or error")

	c.SessionOpenResumeTimeout, c.SessionOpenColdTimeout = defaultSessionOpenResumeTimeout, defaultSessionOpenColdTimeout
	fs.Var(&msFlag{dst: &c.SessionOpenResumeTimeout, min: time.Millisecond, max: maxDurationFlag}, "session-open-resume-timeout-ms", "session.open bound when adopting or resuming")
	fs.Var(&msFlag{dst: &c.SessionOpenColdTimeout, min: time.Millisecond, max: maxDurationFlag}, "session-open-cold-timeout-ms", "cold session.open bound for agents without their own")
	fs.Var(&p.coldAgents, "session-open-cold-timeout-agent", "AGENT=MS cold session.open bound for one agent (repeatable)")
	c.CancelGrace = defaultCancelGrace
	fs.Var(&msFlag{dst: &c.CancelGrace, max: maxDurationFlag}, "cancel-grace-ms", "wait this long for a cancelled prompt to settle")
	c.WorkspaceWalkTimeout = defaultWorkspaceWalkTimeout
	fs.Var(&msFlag{dst: &c.WorkspaceWalkTimeout, min: time.Millisecond, max: maxDurationFlag}, "workspace-baseline-timeout-ms", "bound each workspace walk of a turn (before and after it)")
	c.SandboxMetricInterval = defaultSandboxMetricInterval
	fs.Var(&msFlag{dst: &c.SandboxMetricInterval, max: maxDurationFlag}, "sandbox-metric-interval-ms", "a sandbox.metric this often while a turn runs; 0 disables")
	p.coldStarts = defaultMaxConcurrentColdStarts
	fs.Var(&intFlag{dst: &p.coldStarts, min: -maxColdStartsLimit, max: maxColdStartsLimit}, "max-concurrent-cold-starts", "cold starts at once; <= 0 disables the gate")
	fs.StringVar(&c.PcwrapPath, "pcwrap-path", "", "pcwrap binary (default: next to runnerd, else PATH)")
	fs.StringVar(&c.OpenCodeExecutable, "opencode-executable", "", "opencode binary for kind opencode (default: opencode on PATH)")

	for _, name := range ignoredFlags {
		v := new(string)
		p.ignored[name] = v
		fs.StringVar(v, name, "", "accepted and ignored (reference compatibility)")
	}
	return p
}

// parse runs pflag, counting each flag so that a repeated flag is an error
// instead of pflag's silent last-wins.
func (p *parser) parse(args []string) error {
	err := p.fs.ParseAll(args, func(f *pflag.Flag, value string) error {
		p.seen[f.Name]++
		if p.seen[f.Name] > 1 && !repeatableFlags[f.Name] {
			return &usageError{Flag: "--" + f.Name, Problem: "given more than once"}
		}
		if strings.HasPrefix(value, "--") {
			return &usageError{Flag: "--" + f.Name, Problem: "missing value (the next argument is a flag)"}
		}
		if err := p.fs.Set(f.Name, value); err != nil {
			var inv *pflag.InvalidValueError
			if errors.As(err, &inv) {
				return &usageError{Flag: "--" + f.Name, Problem: fmt.Sprintf("invalid value %s: %v", quote.Text(value), inv.Unwrap())}
			}
			return &usageError{Flag: "--" + f.Name, Problem: err.Error()}
		}
		p.order = append(p.order, f.Name)
		return nil
	})
	switch {
	case err == nil:
	case errors.Is(err, pflag.ErrHelp):
		return pflag.ErrHelp
	default:
		var ue *usageError
		if errors.As(err, &ue) {
			return ue
		}
		return &usageError{Problem: err.Error()}
	}
	if rest := p.fs.Args(); len(rest) > 0 {
		return &usageError{Problem: fmt.Sprintf("unexpected argument %s (every option is a --flag)", quote.Text(rest[0]))}
	}
	return nil
}

func (p *parser) changed(name string) bool { return p.seen[name] > 0 }
