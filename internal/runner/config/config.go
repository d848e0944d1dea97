package config

import (
	"log/slog"
	"net/netip"
	"net/url"
	"time"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// Defaults. Each mirrors the spec line named in its comment.
const (
	defaultListenAddress            = "0.0.0.0"                 // prp.md §1.2 (the reference accepts only this)
	defaultListenPort               = 43127                     // prp.md §1.2, AU: the Daytona ingress port
	defaultMaxOutboxBytes           = 64 * 1024                 // prp.md §13 table (R-bin default)
	defaultP0ReserveBytes           = 32 * 1024                 // prp.md §13 table (R-bin default)
	defaultMaxFrameBytes            = 1024 * 1024               // prp.md §1.4: default 1 MiB
	defaultReconnectDelay           = 25 * time.Millisecond     // prp.md §6.1, §12 (the server passes 250)
	defaultPingInterval             = 20 * time.Second          // prp.md §12, --ping-interval-ms (beyond)
	defaultSilenceTimeout           = 45 * time.Second          // prp.md §12, --silence-timeout-ms (beyond)
	defaultSessionOpenResumeTimeout = 30 * time.Second          // acp.md §7: adopt/resume bound
	defaultSessionOpenColdTimeout   = 30 * time.Second          // acp.md §7: cold bound for codex and other agents
	defaultSessionOpenColdLong      = 60 * time.Second          // acp.md §2.1, §7: cold bound for claude, pi, opencode
	defaultCancelGrace              = 5 * time.Second           // acp.md §4.4, §7
	defaultWorkspaceWalkTimeout     = time.Second               // workspace.md §4.1 (LS uses 100 ms)
	defaultSandboxMetricInterval    = time.Minute               // workspace.md §9 (beyond: no reference emitter)
	defaultMaxConcurrentColdStarts  = 4                         // acp.md §4.2 (Paperclip ACPX_MAX_CONCURRENT_SESSION_INITS)
	defaultLifecycle                = LifecyclePerTurn          // prp.md §13 table
	defaultLogFormat                = LogFormatJSON             // STYLE.md: JSON handler by default
	defaultLogLevel                 = slog.LevelInfo            // beyond: the reference logs lifecycle lines at info
	listenPathPrefix                = "/api/runner/v1/connect/" // prp.md §1.1, §1.2
)

// defaultColdTimeoutAgents are the agents whose cold session.open bound is
// defaultSessionOpenColdLong (acp.md §2.1 table).
var defaultColdTimeoutAgents = []string{"claude", "opencode", "pi"}

// Bounds on flag values. Each names its source.
const (
	minMaxFrameBytes     = 1024                       // prp.md §1.4: allowed 1 KiB–16 MiB
	maxMaxFrameBytes     = 16 * 1024 * 1024           // prp.md §1.4
	maxOutboxBytesLimit  = 1 << 30                    // beyond: the outbox is held in memory as well as in the store; the newest server passes 16 MiB
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
	// ModeStorage runs one `storage <operation>` (durability.md §8.1): no
	// ticket, no network, no state directory.
	ModeStorage
	// ModeStateDump prints the state in StateDir (`state dump`): no
	// ticket, no network, nothing written.
	ModeStateDump
)

func (m Mode) String() string {
	switch m {
	case ModeBuildMetadata:
		return "build_metadata"
	case ModeDial:
		return "dial"
	case ModeListen:
		return "listen"
	case ModeStorage:
		return "storage"
	case ModeStateDump:
		return "state_dump"
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

	// StorageOperation is the operation of ModeStorage (lower-case words
	// joined by '-', at most maxStorageOperationBytes).
	StorageOperation string

	// Dial mode. ConnectURL is ws:// or wss:// with no userinfo, query or
	// fragment; DialHost is the host without brackets, DialPort is non-zero
	// (the scheme's default when the URL has none). DNS resolution, pinning
	// and the loopback rule for ws:// belong to the dialer (prp.md §1.3).
	ConnectURL   *url.URL
	DialHost     string
	DialPort     uint16
	CABundlePath string // only with wss://; the file itself is checked when opened

	// Listen mode. ListenPath == listenPathPrefix + Identity.RunID.
	ListenAddress netip.Addr
	ListenPort    uint16 // 0 asks the kernel for a port (tests)
	ListenPath    string

	StateDir string // absolute, cleaned
	// IndexedState is --indexed-state: the server's core keeps an indexed
	// authority store. runnerd keeps runner-state.json all the same
	// (durability.md §7.1) and requires the challenge's capability fields
	// (§1.2).
	IndexedState  bool
	Identity      prp.Identity // the six --*-id flags (prp.md §13)
	RunnerVersion string
	RunnerDigest  string

	MaxOutboxBytes int64 // > P0ReserveBytes
	P0ReserveBytes int64
	MaxFrameBytes  int64 // minMaxFrameBytes..MaxMaxFrameBytes

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
	// WorkspaceWalkTimeout bounds each workspace walk of a turn, the
	// baseline before the prompt and the walk after it (workspace.md §4.1).
	WorkspaceWalkTimeout time.Duration
	// SandboxMetricInterval is the period of sandbox.metric while a turn
	// runs (workspace.md §9); 0 disables it.
	SandboxMetricInterval   time.Duration
	MaxConcurrentColdStarts int    // <= 0 disables the gate (acp.md §4.2)
	PcwrapPath              string // "" = next to the runnerd executable, else PATH (acp.md §3.1)
	OpenCodeExecutable      string // "" = opencode on PATH (codex.md §6)

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
