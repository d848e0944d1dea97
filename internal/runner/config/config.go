package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// Defaults. Each mirrors the spec line named in its comment.
const (
	DefaultListenAddress            = "0.0.0.0"                 // prp.md §1.2 (the reference accepts only this)
	DefaultListenPort               = 43127                     // prp.md §1.2, AU: the Daytona ingress port
	DefaultMaxOutboxBytes           = 64 * 1024                 // prp.md §13 table (R-bin default)
	DefaultP0ReserveBytes           = 32 * 1024                 // prp.md §13 table (R-bin default)
	DefaultMaxFrameBytes            = 1024 * 1024               // prp.md §1.4: default 1 MiB
	DefaultReconnectDelay           = 25 * time.Millisecond     // prp.md §6.1, §12 (the server passes 250)
	DefaultPingInterval             = 20 * time.Second          // prp.md §12, --ping-interval-ms (beyond)
	DefaultSilenceTimeout           = 45 * time.Second          // prp.md §12, --silence-timeout-ms (beyond)
	DefaultSessionOpenResumeTimeout = 30 * time.Second          // acp.md §7: adopt/resume bound
	DefaultSessionOpenColdTimeout   = 30 * time.Second          // acp.md §7: cold bound for codex and other agents
	DefaultSessionOpenColdLong      = 60 * time.Second          // acp.md §2.1, §7: cold bound for claude, pi, opencode
	DefaultCancelGrace              = 5 * time.Second           // acp.md §4.4, §7
	DefaultMaxConcurrentColdStarts  = 4                         // acp.md §4.2 (Paperclip ACPX_MAX_CONCURRENT_SESSION_INITS)
	DefaultLifecycle                = LifecyclePerTurn          // prp.md §13 table
	DefaultLogFormat                = LogFormatJSON             // STYLE.md: JSON handler by default
	DefaultLogLevel                 = slog.LevelInfo            // beyond: the reference logs lifecycle lines at info
	ListenPathPrefix                = "/api/runner/v1/connect/" // prp.md §1.1, §1.2
)

// defaultColdTimeoutAgents are the agents whose cold session.open bound is
// DefaultSessionOpenColdLong (acp.md §2.1 table).
var defaultColdTimeoutAgents = []string{"claude", "opencode", "pi"}

// Bounds on flag values. Each names its source.
const (
	MinMaxFrameBytes     = 1024                       // prp.md §1.4: allowed 1 KiB–16 MiB
	MaxMaxFrameBytes     = 16 * 1024 * 1024           // prp.md §1.4
	maxOutboxBytesLimit  = 1 << 30                    // beyond: the outbox lives in runner-state.json in memory; the newest server passes 16 MiB
	maxReconnectDelay    = 5 * time.Second            // prp.md §6.1: backoff is clamped to 1–5000 ms, a larger base means nothing
	maxDurationFlag      = 24 * time.Hour             // beyond: no runnerd wait is meant to exceed a day (lease TTL max is 24 h, prp.md §5)
	maxServerDuration    = 100 * 365 * 24 * time.Hour // R-bin takes any u64 ms for the server-set lifetime, grace and idle timeout; longer values saturate here
	minPingInterval      = time.Millisecond           // beyond: a zero interval would spin
	maxIdentityBytes     = 1024                       // beyond: the reference sets none; ids are UUIDs or short prefixed names
	maxAgentNameBytes    = 64                         // beyond: agent names are short registry keys (acp.md §2.1)
	maxColdTimeoutAgents = 64                         // beyond: bounds the repeatable --session-open-cold-timeout-agent
	maxColdStartsLimit   = 1024                       // beyond: a gate wider than this is no gate (acp.md §4.2 default 4)
	maxPathBytes         = 4096                       // PATH_MAX on Linux
	maxConnectURLBytes   = 8192                       // beyond: far above any real URL, well below pflag's argv use
)

// Mode is what the command line asks runnerd to do (prp.md §13).
type Mode int

const (
	// ModeBuildMetadata prints the build metadata JSON and exits.
	ModeBuildMetadata Mode = iota + 1
	// ModeDial dials the server (transport modes dial_ws_loopback, dial_wss).
	ModeDial
	// ModeListen accepts the server's connection (transport mode listen_ws).
	ModeListen
)

func (m Mode) String() string {
	switch m {
	case ModeBuildMetadata:
		return "build_metadata"
	case ModeDial:
		return "dial"
	case ModeListen:
		return "listen"
	}
	return "unknown"
}

// Lifecycle is --lifecycle-mode.
type Lifecycle string

// Lifecycles (prp.md §13; R-bin accepts exactly these).
const (
	LifecyclePerTurn Lifecycle = "per_turn"
	LifecycleWarm    Lifecycle = "warm"
)

// LogFormat is --log-format.
type LogFormat string

// Log formats.
const (
	LogFormatJSON LogFormat = "json"
	LogFormatText LogFormat = "text"
)

// logLevels are the --log-level names, lowest first.
var logLevels = []struct {
	name  string
	level slog.Level
}{{"debug", slog.LevelDebug}, {"info", slog.LevelInfo}, {"warn", slog.LevelWarn}, {"error", slog.LevelError}}

// Config is runnerd's validated command line. ParseArgs fills every field
// (defaults included); code that receives a Config may rely on the
// invariants documented on each field.
type Config struct {
	Mode Mode

	// Dial mode. ConnectURL is ws:// or wss:// with no userinfo, query or
	// fragment; DialHost is the host without brackets, DialPort is non-zero
	// (the scheme's default when the URL has none). DNS resolution, pinning
	// and the loopback rule for ws:// belong to the dialer (prp.md §1.3).
	ConnectURL   *url.URL
	DialHost     string
	DialPort     uint16
	CABundlePath string // only with wss://; the file itself is checked when opened

	// Listen mode. ListenPath == ListenPathPrefix + Identity.RunID.
	ListenAddress netip.Addr
	ListenPort    uint16 // 0 asks the kernel for a port (tests)
	ListenPath    string

	StateDir      string       // absolute, cleaned
	Identity      prp.Identity // the six --*-id flags (prp.md §13)
	RunnerVersion string
	RunnerDigest  string

	MaxOutboxBytes int64 // > P0ReserveBytes
	P0ReserveBytes int64
	MaxFrameBytes  int64 // MinMaxFrameBytes..MaxMaxFrameBytes

	ReconnectDelay    time.Duration
	ReconnectGrace    time.Duration // meaningful only when HasReconnectGrace; at most 100 years
	HasReconnectGrace bool          // --reconnect-grace-ms given; absent = no grace
	MaxLifetime       time.Duration // 0 = unlimited (--max-lifetime-ms or --max-runtime-ms; 0, absent or >= 100 years)

	Lifecycle   Lifecycle
	IdleTimeout time.Duration // > 0 exactly when Lifecycle == LifecycleWarm; at most 100 years

	DiagnosticsDir string // "" = none

	PingInterval   time.Duration
	SilenceTimeout time.Duration // > PingInterval
	LogFormat      LogFormat
	LogLevel       slog.Level // the least severe level logged (--log-level)

	SessionOpenResumeTimeout time.Duration
	SessionOpenColdTimeout   time.Duration            // agents not in ColdTimeoutByAgent
	ColdTimeoutByAgent       map[string]time.Duration // defaults merged with --session-open-cold-timeout-agent
	CancelGrace              time.Duration
	MaxConcurrentColdStarts  int    // <= 0 disables the gate (acp.md §4.2)
	PcwrapPath               string // "" = next to the runnerd executable, else PATH (acp.md §3.1)
	OpenCodeExecutable       string // "" = opencode on PATH (codex.md §6)

	// Ignored lists the accepted-and-ignored flags that were given (sorted,
	// without values), so the runner can log that it ignored them.
	Ignored []string
	// Warnings are one-line notes about accepted but unusual values (a
	// listener other than 0.0.0.0:43127, prp.md §1.2), for the runner to log.
	Warnings []string
}

// ColdTimeout returns the cold session.open bound for agent (acp.md §2.1).
func (c *Config) ColdTimeout(agent string) time.Duration {
	if d, ok := c.ColdTimeoutByAgent[agent]; ok {
		return d
	}
	return c.SessionOpenColdTimeout
}

// Environ looks up an environment variable, like os.LookupEnv.
type Environ func(key string) (string, bool)

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
// *UsageError for anything wrong: unknown flags, a flag given twice, a
// missing value, a value out of range, a mode conflict. It reads env only to
// fail safe: the bootstrap ticket must already have been taken out of the
// environment (TakeBootstrapTicket) before arguments are parsed.
func ParseArgs(args []string, env Environ) (Config, error) {
	if env != nil {
		if _, ok := env(BootstrapTicketEnv); ok {
			return Config{}, &UsageError{Code: CodeBootstrapTicketInvalid, Problem: BootstrapTicketEnv + " is still in the environment; it must be taken before argument parsing"}
		}
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
	fs.StringVar(&p.listenAddress, "listen-address", DefaultListenAddress, "listen mode: address to bind")
	fs.Var(&uintFlag{dst: &p.listenPort, max: 65535}, "listen-port", "listen mode: TCP port to bind")
	p.listenPort = DefaultListenPort
	fs.StringVar(&c.ListenPath, "listen-path", "", "listen mode: "+ListenPathPrefix+"<run-id>")

	fs.StringVar(&c.StateDir, "state-dir", "", "durable state directory")
	fs.StringVar(&c.Identity.RunnerInstanceID, "runner-id", "", "runner instance id")
	fs.StringVar(&c.Identity.EnvironmentLeaseID, "environment-lease-id", "", "environment lease id")
	fs.StringVar(&c.Identity.RunID, "run-id", "", "run id")
	fs.StringVar(&c.Identity.NormalizedSessionID, "session-id", "", "normalized session id")
	fs.StringVar(&c.Identity.TurnID, "turn-id", "", "turn id")
	fs.StringVar(&c.Identity.ItemID, "item-id", "", "item id")
	fs.StringVar(&c.RunnerVersion, "runner-version", "", "runner version the server expects")
	fs.StringVar(&c.RunnerDigest, "runner-digest", "", "runner digest the server expects (sha256:<hex>)")

	c.MaxOutboxBytes, c.P0ReserveBytes, c.MaxFrameBytes = DefaultMaxOutboxBytes, DefaultP0ReserveBytes, DefaultMaxFrameBytes
	fs.Var(&bytesFlag{dst: &c.MaxOutboxBytes, min: 1, max: maxOutboxBytesLimit}, "max-outbox-bytes", "outbox hard limit in bytes")
	fs.Var(&bytesFlag{dst: &c.P0ReserveBytes, min: 0, max: maxOutboxBytesLimit}, "p0-reserve-bytes", "outbox bytes reserved for P0 events")
	fs.Var(&bytesFlag{dst: &c.MaxFrameBytes, min: MinMaxFrameBytes, max: MaxMaxFrameBytes}, "max-frame-bytes", "largest WebSocket frame in bytes (1 KiB to 16 MiB)")

	c.ReconnectDelay = DefaultReconnectDelay
	fs.Var(&msFlag{dst: &c.ReconnectDelay, max: maxReconnectDelay}, "reconnect-delay-ms", "reconnect backoff base")
	fs.Var(&msFlag{dst: &c.ReconnectGrace, max: maxServerDuration, saturate: true, set: &c.HasReconnectGrace}, "reconnect-grace-ms", "exit when disconnected longer than this")
	fs.Var(&msFlag{dst: &p.maxLifetime, max: maxServerDuration, saturate: true}, "max-lifetime-ms", "process lifetime; 0 = unlimited")
	fs.Var(&msFlag{dst: &p.maxRuntime, max: maxServerDuration, saturate: true}, "max-runtime-ms", "alias of --max-lifetime-ms")
	fs.StringVar(&p.lifecycle, "lifecycle-mode", string(DefaultLifecycle), "per_turn or warm")
	fs.Var(&msFlag{dst: &c.IdleTimeout, min: time.Millisecond, max: maxServerDuration, saturate: true}, "idle-timeout-ms", "warm lifecycle idle timeout (required for warm)")
	fs.StringVar(&c.DiagnosticsDir, "diagnostics-directory", "", "directory for bounded, redacted runnerd logs")

	c.PingInterval, c.SilenceTimeout = DefaultPingInterval, DefaultSilenceTimeout
	fs.Var(&msFlag{dst: &c.PingInterval, min: minPingInterval, max: maxDurationFlag}, "ping-interval-ms", "send a WebSocket Ping after this long without sending")
	fs.Var(&msFlag{dst: &c.SilenceTimeout, min: minPingInterval, max: maxDurationFlag}, "silence-timeout-ms", "treat the connection as half-open after this long without receiving")
	fs.StringVar(&p.logFormat, "log-format", string(DefaultLogFormat), "json or text")
	fs.StringVar(&p.logLevel, "log-level", "info", "debug, info, warn or error")

	c.SessionOpenResumeTimeout, c.SessionOpenColdTimeout = DefaultSessionOpenResumeTimeout, DefaultSessionOpenColdTimeout
	fs.Var(&msFlag{dst: &c.SessionOpenResumeTimeout, min: time.Millisecond, max: maxDurationFlag}, "session-open-resume-timeout-ms", "session.open bound when adopting or resuming")
	fs.Var(&msFlag{dst: &c.SessionOpenColdTimeout, min: time.Millisecond, max: maxDurationFlag}, "session-open-cold-timeout-ms", "cold session.open bound for agents without their own")
	fs.Var(&p.coldAgents, "session-open-cold-timeout-agent", "AGENT=MS cold session.open bound for one agent (repeatable)")
	c.CancelGrace = DefaultCancelGrace
	fs.Var(&msFlag{dst: &c.CancelGrace, max: maxDurationFlag}, "cancel-grace-ms", "wait this long for a cancelled prompt to settle")
	p.coldStarts = DefaultMaxConcurrentColdStarts
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
			return &UsageError{Flag: "--" + f.Name, Problem: "given more than once"}
		}
		if strings.HasPrefix(value, "--") {
			return &UsageError{Flag: "--" + f.Name, Problem: "missing value (the next argument is a flag)"}
		}
		if err := p.fs.Set(f.Name, value); err != nil {
			var inv *pflag.InvalidValueError
			if errors.As(err, &inv) {
				return &UsageError{Flag: "--" + f.Name, Problem: fmt.Sprintf("invalid value %q: %v", value, inv.Unwrap())}
			}
			return &UsageError{Flag: "--" + f.Name, Problem: err.Error()}
		}
		p.order = append(p.order, f.Name)
		return nil
	})
	switch {
	case err == nil:
	case errors.Is(err, pflag.ErrHelp):
		return pflag.ErrHelp
	default:
		var ue *UsageError
		if errors.As(err, &ue) {
			return ue
		}
		return &UsageError{Problem: err.Error()}
	}
	if rest := p.fs.Args(); len(rest) > 0 {
		return &UsageError{Problem: fmt.Sprintf("unexpected argument %q (every option is a --flag)", rest[0])}
	}
	return nil
}

func (p *parser) changed(name string) bool { return p.seen[name] > 0 }

// validate applies the mode rules and cross-flag rules, then fills the
// derived fields. The steps run in this order because the first failing
// rule is the one reported (config_test.go pins which one wins), and later
// steps read fields earlier ones derive (the mode, the cleaned state dir).
func (p *parser) validate() (Config, error) {
	if p.buildMetadata {
		return p.validateBuildMetadata()
	}
	c := p.cfg
	for _, step := range []func(*Config) error{
		p.validateMode,
		p.validateIdentity,
		p.validateStateDir,
		p.validateTransport,
		p.validateOutbox,
		p.validateLifecycle,
		p.validateLogging,
		p.validateTimeouts,
		p.validateLocalPaths,
	} {
		if err := step(&c); err != nil {
			return Config{}, err
		}
	}
	p.collectIgnored(&c)
	return c, nil
}

// validateBuildMetadata accepts --build-metadata only on its own: it prints
// and exits, so any other flag would be silently dropped.
func (p *parser) validateBuildMetadata() (Config, error) {
	if len(p.order) != 1 {
		return Config{}, &UsageError{Flag: "--build-metadata", Problem: "must be the only argument"}
	}
	return Config{Mode: ModeBuildMetadata}, nil
}

// validateMode picks dial or listen from which transport flags were given.
// With neither, a given fake-harness flag is reported before the generic
// no-mode error, because it says why that flag alone is not a mode.
func (p *parser) validateMode(c *Config) error {
	dial := p.changed("connect-url")
	listen := false
	for _, name := range listenFlags {
		listen = listen || p.changed(name)
	}
	switch {
	case dial && listen:
		return &UsageError{Problem: "give either --connect-url or the --listen-* flags, not both"}
	case !dial && !listen:
		for _, name := range ignoredFlags {
			if p.changed(name) {
				return &UsageError{Flag: "--" + name, Problem: "only accepted with --connect-url or --listen-path (the local fake-harness mode is not implemented)"}
			}
		}
		return &UsageError{Problem: "no mode: give --connect-url (dial) or --listen-path (listen), or --build-metadata; see --help"}
	case dial:
		c.Mode = ModeDial
	default:
		c.Mode = ModeListen
	}
	return nil
}

// validateIdentity requires every identity flag, each bounded text.
func (p *parser) validateIdentity(*Config) error {
	for _, name := range identityFlags {
		if !p.changed(name) {
			return &UsageError{Flag: "--" + name, Problem: "required"}
		}
		f := p.fs.Lookup(name)
		if err := checkText(f.Value.String(), maxIdentityBytes); err != nil {
			return &UsageError{Flag: "--" + name, Problem: err.Error()}
		}
	}
	return nil
}

// validateStateDir requires a usable absolute --state-dir and cleans it.
func (p *parser) validateStateDir(c *Config) error {
	if len(c.StateDir) > maxPathBytes || strings.ContainsRune(c.StateDir, 0) {
		return &UsageError{Flag: "--state-dir", Problem: "not a usable path"}
	}
	if !filepath.IsAbs(c.StateDir) {
		// Agents' pcwrap sessions live under it and outlive this process: a
		// path that depends on the working directory could name another
		// directory for them or for the next runnerd.
		return &UsageError{Flag: "--state-dir", Problem: fmt.Sprintf("must be an absolute path, got %q", c.StateDir)}
	}
	c.StateDir = filepath.Clean(c.StateDir)
	return nil
}

// validateTransport checks the chosen mode's flags, then --ca-bundle-path,
// which only a wss:// dial uses.
func (p *parser) validateTransport(c *Config) error {
	if c.Mode == ModeDial {
		if err := p.validateDial(c); err != nil {
			return err
		}
	} else {
		if err := p.validateListen(c); err != nil {
			return err
		}
	}
	if p.changed("ca-bundle-path") {
		if c.Mode != ModeDial || c.ConnectURL.Scheme != "wss" {
			return &UsageError{Flag: "--ca-bundle-path", Problem: "accepted only with a wss:// --connect-url"}
		}
		if err := checkPath(c.CABundlePath); err != nil {
			return &UsageError{Flag: "--ca-bundle-path", Problem: err.Error()}
		}
	}
	return nil
}

// validateOutbox keeps the P0 reserve inside the outbox budget.
func (p *parser) validateOutbox(c *Config) error {
	if c.P0ReserveBytes >= c.MaxOutboxBytes {
		return &UsageError{Flag: "--p0-reserve-bytes", Problem: fmt.Sprintf("must be below --max-outbox-bytes (%d >= %d)", c.P0ReserveBytes, c.MaxOutboxBytes)}
	}
	return nil
}

// validateLifecycle derives the lifetime bound (--max-runtime-ms is its
// alias) and checks that --idle-timeout-ms goes with warm only.
func (p *parser) validateLifecycle(c *Config) error {
	c.MaxLifetime = p.maxLifetime
	if p.changed("max-runtime-ms") {
		if p.changed("max-lifetime-ms") && p.maxRuntime != p.maxLifetime {
			return &UsageError{Flag: "--max-runtime-ms", Problem: "differs from --max-lifetime-ms (give one of them)"}
		}
		c.MaxLifetime = p.maxRuntime
	}
	if c.MaxLifetime >= maxServerDuration {
		c.MaxLifetime = 0 // a century or more is unlimited
	}

	switch Lifecycle(p.lifecycle) {
	case LifecyclePerTurn:
		if p.changed("idle-timeout-ms") {
			return &UsageError{Flag: "--idle-timeout-ms", Problem: "not accepted with --lifecycle-mode per_turn"}
		}
	case LifecycleWarm:
		if !p.changed("idle-timeout-ms") {
			return &UsageError{Flag: "--idle-timeout-ms", Problem: "required with --lifecycle-mode warm"}
		}
	default:
		return &UsageError{Flag: "--lifecycle-mode", Problem: fmt.Sprintf("must be per_turn or warm, got %q", p.lifecycle)}
	}
	c.Lifecycle = Lifecycle(p.lifecycle)
	return nil
}

// validateLogging reads --log-format and --log-level.
func (p *parser) validateLogging(c *Config) error {
	switch LogFormat(p.logFormat) {
	case LogFormatJSON, LogFormatText:
		c.LogFormat = LogFormat(p.logFormat)
	default:
		return &UsageError{Flag: "--log-format", Problem: fmt.Sprintf("must be json or text, got %q", p.logFormat)}
	}

	c.LogLevel = DefaultLogLevel
	if p.changed("log-level") {
		lv, ok := parseLogLevel(p.logLevel)
		if !ok {
			return &UsageError{Flag: "--log-level", Problem: fmt.Sprintf("must be debug, info, warn or error, got %q", p.logLevel)}
		}
		c.LogLevel = lv
	}
	return nil
}

// validateTimeouts checks the liveness pair and fills the per-agent cold
// session.open timeouts: the built-in long ones first, then the flags'.
func (p *parser) validateTimeouts(c *Config) error {
	if c.SilenceTimeout <= c.PingInterval {
		return &UsageError{Flag: "--silence-timeout-ms", Problem: "must exceed --ping-interval-ms, or a quiet but live connection would look dead"}
	}

	c.ColdTimeoutByAgent = map[string]time.Duration{}
	for _, a := range defaultColdTimeoutAgents {
		c.ColdTimeoutByAgent[a] = DefaultSessionOpenColdLong
	}
	for _, e := range p.coldAgents.entries {
		c.ColdTimeoutByAgent[e.agent] = e.timeout
	}
	c.MaxConcurrentColdStarts = int(p.coldStarts)
	return nil
}

// validateLocalPaths checks the optional local paths (diagnostics, pcwrap,
// opencode).
func (p *parser) validateLocalPaths(c *Config) error {
	for _, path := range []struct{ flag, value string }{{"--diagnostics-directory", c.DiagnosticsDir}, {"--pcwrap-path", c.PcwrapPath}, {"--opencode-executable", c.OpenCodeExecutable}} {
		if path.value == "" {
			continue
		}
		if err := checkPath(path.value); err != nil {
			return &UsageError{Flag: path.flag, Problem: err.Error()}
		}
	}
	return nil
}

// collectIgnored lists, sorted, the accepted-but-ignored flags that were
// given, so the runner can warn about them.
func (p *parser) collectIgnored(c *Config) {
	for _, name := range ignoredFlags {
		if p.changed(name) {
			c.Ignored = append(c.Ignored, "--"+name)
		}
	}
	sort.Strings(c.Ignored)
}

// validateDial checks --connect-url's syntax (prp.md §1.3): ws:// or wss://;
// no userinfo, query, fragment, backslash, whitespace or control characters;
// no '%' in the authority; IPv6 bracketed; a non-zero port.
func (p *parser) validateDial(c *Config) error {
	bad := func(problem string) error { return &UsageError{Flag: "--connect-url", Problem: problem} }
	raw := p.connectURL
	if len(raw) > maxConnectURLBytes {
		return bad("too long")
	}
	for _, r := range raw {
		if r == '\\' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return bad("must not contain whitespace, control characters or backslashes")
		}
	}
	if !utf8.ValidString(raw) {
		return bad("not valid UTF-8")
	}
	var scheme string
	switch {
	case strings.HasPrefix(raw, "ws://"):
		scheme = "ws"
	case strings.HasPrefix(raw, "wss://"):
		scheme = "wss"
	default:
		return bad("must start with ws:// or wss://")
	}
	rest := raw[len(scheme)+3:]
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	if strings.ContainsAny(rest, "?#") {
		return bad("must not have a query or fragment")
	}
	if strings.Contains(authority, "@") {
		return bad("must not carry userinfo")
	}
	if strings.Contains(authority, "%") {
		return bad("must not percent-encode the host")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("not a URL")
	}
	host := u.Hostname()
	if host == "" {
		return bad("has no host")
	}
	if strings.Contains(host, ":") && !strings.HasPrefix(authority, "[") {
		return bad("IPv6 hosts must be bracketed")
	}
	port := uint64(80)
	if scheme == "wss" {
		port = 443
	}
	if ps := u.Port(); ps != "" {
		n, err := strconv.ParseUint(ps, 10, 16)
		if err != nil || n == 0 {
			return bad("port must be 1-65535")
		}
		port = n
	} else if strings.HasSuffix(authority, ":") {
		return bad("empty port")
	}
	c.ConnectURL, c.DialHost, c.DialPort = u, host, uint16(port)
	return nil
}

// validateListen checks the listener flags (prp.md §1.2). Path problems carry
// runner_ingress_bind_conflict, the code the server looks for.
func (p *parser) validateListen(c *Config) error {
	addr, err := netip.ParseAddr(p.listenAddress)
	if err != nil || addr.Zone() != "" {
		return &UsageError{Code: CodeIngressBindConflict, Flag: "--listen-address", Problem: fmt.Sprintf("must be an IP address, got %q", p.listenAddress)}
	}
	c.ListenAddress, c.ListenPort = addr, uint16(p.listenPort)
	if !p.changed("listen-path") {
		return &UsageError{Code: CodeIngressBindConflict, Flag: "--listen-path", Problem: "required in listen mode"}
	}
	if err := ValidateListenPath(c.ListenPath, c.Identity.RunID); err != nil {
		return &UsageError{Code: CodeIngressBindConflict, Flag: "--listen-path", Problem: err.Error()}
	}
	if c.ListenAddress.String() != DefaultListenAddress || c.ListenPort != DefaultListenPort {
		c.Warnings = append(c.Warnings, fmt.Sprintf("listening on %s instead of %s:%d: the reference server's ingress reaches only the default",
			netip.AddrPortFrom(c.ListenAddress, c.ListenPort), DefaultListenAddress, DefaultListenPort))
	}
	return nil
}

// ValidateListenPath checks that path is exactly ListenPathPrefix+runID and
// that runID is a plain path segment: non-empty, no '/', '?', '#', '\', '%',
// whitespace or control characters (prp.md §1.2, scenario 3). A warm
// run.attach's new path meets the same rule in prp.ValidateListenPath.
func ValidateListenPath(path, runID string) error {
	if err := ValidateRunIDSegment(runID); err != nil {
		return err
	}
	if path != ListenPathPrefix+runID {
		return fmt.Errorf("must be exactly %s<run-id> for --run-id", ListenPathPrefix)
	}
	return nil
}

// ValidateRunIDSegment checks that runID can be the last segment of the
// listener path.
func ValidateRunIDSegment(runID string) error {
	if runID == "" {
		return errors.New("run id is empty")
	}
	for _, r := range runID {
		if r == '/' || r == '?' || r == '#' || r == '\\' || r == '%' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return errors.New("run id must be one path segment without '/', '?', '#', '\\', '%', whitespace or control characters")
		}
	}
	if !utf8.ValidString(runID) {
		return errors.New("run id is not valid UTF-8")
	}
	return nil
}

// parseLogLevel reads a --log-level name (exact, lower-case, as documented).
func parseLogLevel(s string) (slog.Level, bool) {
	for _, l := range logLevels {
		if l.name == s {
			return l.level, true
		}
	}
	return 0, false
}

// checkText accepts non-empty UTF-8 without control characters, at most
// limit bytes.
func checkText(s string, limit int) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case len(s) > limit:
		return fmt.Errorf("longer than %d bytes", limit)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return errors.New("must not contain control characters")
		}
	}
	return nil
}

func checkPath(s string) error {
	if s == "" || len(s) > maxPathBytes || strings.ContainsRune(s, 0) {
		return errors.New("not a usable path")
	}
	return nil
}

// parseDecimal parses a plain non-negative base-10 integer: no sign, no
// 0x/0o prefixes, no underscores (strconv base 0 would read "010" as 8).
func parseDecimal(s string) (uint64, error) {
	if s == "" {
		return 0, errors.New("empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("not a non-negative decimal integer")
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errors.New("out of range")
	}
	return n, nil
}

// msFlag is a duration flag given in decimal milliseconds. With saturate, a
// value above max becomes max instead of an error (for server-set outer
// bounds, where the reference accepts any u64).
type msFlag struct {
	dst      *time.Duration
	min, max time.Duration
	set      *bool
	saturate bool
}

func (f *msFlag) Set(s string) error {
	n, err := parseDecimal(s)
	if err != nil {
		return err
	}
	if f.saturate && n > uint64(f.max/time.Millisecond) {
		n = uint64(f.max / time.Millisecond)
	}
	if n > uint64(f.max/time.Millisecond) || time.Duration(n)*time.Millisecond < f.min {
		return fmt.Errorf("must be between %d and %d ms", f.min/time.Millisecond, f.max/time.Millisecond)
	}
	*f.dst = time.Duration(n) * time.Millisecond
	if f.set != nil {
		*f.set = true
	}
	return nil
}

func (f *msFlag) String() string {
	if f.dst == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*f.dst/time.Millisecond), 10)
}

func (f *msFlag) Type() string { return "ms" }

// bytesFlag is a byte count in decimal.
type bytesFlag struct {
	dst      *int64
	min, max int64
}

func (f *bytesFlag) Set(s string) error {
	n, err := parseDecimal(s)
	if err != nil {
		return err
	}
	if n > uint64(f.max) || int64(n) < f.min {
		return fmt.Errorf("must be between %d and %d", f.min, f.max)
	}
	*f.dst = int64(n)
	return nil
}

func (f *bytesFlag) String() string {
	if f.dst == nil {
		return "0"
	}
	return strconv.FormatInt(*f.dst, 10)
}

func (f *bytesFlag) Type() string { return "bytes" }

// uintFlag is a bounded unsigned decimal.
type uintFlag struct {
	dst *uint64
	max uint64
}

func (f *uintFlag) Set(s string) error {
	n, err := parseDecimal(s)
	if err != nil {
		return err
	}
	if n > f.max {
		return fmt.Errorf("must be at most %d", f.max)
	}
	*f.dst = n
	return nil
}

func (f *uintFlag) String() string {
	if f.dst == nil {
		return "0"
	}
	return strconv.FormatUint(*f.dst, 10)
}

func (f *uintFlag) Type() string { return "uint" }

// intFlag is a bounded signed decimal.
type intFlag struct {
	dst      *int64
	min, max int64
}

func (f *intFlag) Set(s string) error {
	neg := strings.HasPrefix(s, "-")
	n, err := parseDecimal(strings.TrimPrefix(s, "-"))
	if err != nil {
		return errors.New("not a decimal integer")
	}
	if n > uint64(f.max) {
		return fmt.Errorf("must be between %d and %d", f.min, f.max)
	}
	v := int64(n)
	if neg {
		v = -v
	}
	if v < f.min {
		return fmt.Errorf("must be between %d and %d", f.min, f.max)
	}
	*f.dst = v
	return nil
}

func (f *intFlag) String() string {
	if f.dst == nil {
		return "0"
	}
	return strconv.FormatInt(*f.dst, 10)
}

func (f *intFlag) Type() string { return "int" }

// presenceFlag is a switch that takes no value.
type presenceFlag struct{ dst *bool }

func (f *presenceFlag) Set(s string) error {
	if s != "true" {
		return errors.New("takes no value")
	}
	*f.dst = true
	return nil
}

func (f *presenceFlag) String() string { return "false" }
func (f *presenceFlag) Type() string   { return "" }

// agentTimeouts collects --session-open-cold-timeout-agent AGENT=MS.
type agentTimeouts struct {
	entries []agentTimeout
}

type agentTimeout struct {
	agent   string
	timeout time.Duration
}

func (a *agentTimeouts) Set(s string) error {
	agent, ms, ok := strings.Cut(s, "=")
	if !ok {
		return errors.New("want AGENT=MS")
	}
	if agent == "" || len(agent) > maxAgentNameBytes {
		return fmt.Errorf("agent name must be 1-%d bytes", maxAgentNameBytes)
	}
	for i := 0; i < len(agent); i++ {
		ch := agent[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_' || ch == '.') {
			return errors.New("agent name may hold only a-z, 0-9, '-', '_' and '.'")
		}
	}
	var d time.Duration
	if err := (&msFlag{dst: &d, min: time.Millisecond, max: maxDurationFlag}).Set(ms); err != nil {
		return err
	}
	for _, e := range a.entries {
		if e.agent == agent {
			return fmt.Errorf("agent %q given more than once", agent)
		}
	}
	if len(a.entries) >= maxColdTimeoutAgents {
		return fmt.Errorf("more than %d agents", maxColdTimeoutAgents)
	}
	a.entries = append(a.entries, agentTimeout{agent, d})
	return nil
}

func (a *agentTimeouts) String() string {
	parts := make([]string, 0, len(a.entries))
	for _, e := range a.entries {
		parts = append(parts, e.agent+"="+strconv.FormatInt(int64(e.timeout/time.Millisecond), 10))
	}
	return strings.Join(parts, ",")
}

func (a *agentTimeouts) Type() string { return "AGENT=MS" }
