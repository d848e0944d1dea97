package provider

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/mcpbridge"
)

// Driver is the wire protocol of one provider session: the only part of
// the agent supervisor that depends on whether the agent speaks ACP,
// Codex's app-server protocol or another one. Everything else is the
// supervisor's and shared by every driver: pcwrap supervision and hot
// restart, the durable Record with its request table, the one commit
// path, the cold-start gate and bounds, loss detection, runtime requests
// and the semantic tool flow.
//
// A driver keeps its durable state in the host's Core (its Record, request
// table and active turn: Core.Wire), so a restart resumes it with the
// record. It turns the provider's output into the Inbound model the
// supervisor consumes (responses, requests, session updates mapped by
// Mapper, settled turns, and KindEvents for events only that protocol
// has). Its methods run with the host's lock held, except Open.
type Driver interface {
	// Open runs the handshake of a freshly launched process (the
	// initialize exchange and the session call) through o.Call.
	Open(ctx context.Context, o OpenSession) error
	// Feed decodes provider stdout bytes into messages, in order.
	Feed(p []byte) ([]Inbound, error)
	// Prompt encodes the request that starts turn turnID with text and
	// marks the turn active.
	Prompt(turnID, text string) (Call, error)
	// Cancel returns the lines that interrupt the active turn.
	Cancel() ([][]byte, error)
	// KeepsRunning reports whether an interrupted turn leaves the
	// provider process and its session running (Codex: codex.md §3);
	// false stops the agent after every cancel (ACP: acp.md §4.4).
	KeepsRunning() bool
	// HandleRequest answers a provider request before the supervisor's
	// shared handling (ACP permissions, client fs, -32601); handled is
	// false to leave it to that handling.
	HandleRequest(in Inbound) (evs []Event, lines [][]byte, handled bool)
}

// OpenSession is what Driver.Open gets: the bound run's launch and the
// one way to send a request during the handshake.
type OpenSession struct {
	// Cwd, Model and CatalogDigest are the run's binding (session.open).
	Cwd, Model, CatalogDigest string
	Resume                    bool
	// Instructions reads the run's instructions (nil: none); an error
	// means they could not be read.
	Instructions func() (*string, error)
	// Call writes the request mk encodes (after the commit that covers
	// it) and waits for its answer, the agent's end or the open bound.
	Call func(mk func() (Call, error)) (Inbound, error)
}

// Registration is how the runner lists a provider: one value per
// provider package, one line each.
type Registration struct {
	// Kind is the run.prepare descriptor's provider.kind it serves
	// (prp.md §7.6).
	Kind string
	// Driver is the name a binding records for it. It is stored in the
	// state directory, so a provider never renames it.
	Driver string
	// New makes its driver.
	New NewDriver
	// Describe checks and completes a descriptor of Kind (its defaults
	// and refusals, each a Failed error). Nil accepts a descriptor as it
	// is.
	Describe func(s *LaunchSpec) error
	// Executable, when set, runs instead of the command a binding records
	// (a runnerd flag that names the provider's binary).
	Executable string
	// Transport names how runnerd speaks to the agent in harness.starting
	// (workspace.md §8); empty is TransportStdio.
	Transport string
}

// LaunchSpec is the part of run.prepare's provider descriptor that says
// what to launch and how far the agent may act.
type LaunchSpec struct {
	Agent          string
	Command        string
	Args           []string
	PermissionMode string
	// ApprovalPolicy is Codex's descriptor field (codex.md §1); nil when
	// absent.
	ApprovalPolicy *string
}

// NewDriver makes the driver of one session over its host. The runner
// hands the supervisor one per driver kind. It must not use the host: the
// supervisor also makes a driver without a session, to shape a launch or
// check a binding (Launcher, CatalogChecker, EventNamer).
type NewDriver func(h Host) Driver

// Host is what a driver may use of the supervisor that runs it. Methods
// marked "lock held" are called only with the host's lock held: inside a
// Driver method other than Open, or inside WithLock. The others take the
// lock themselves when they need it, so a driver never holds it across
// its own I/O.
type Host interface {
	// Core is the session's durable record and request table. Lock held.
	Core() *Core
	// Mapper maps the session's updates to PRP events. Lock held.
	Mapper() Mapper
	// Binding is the run's binding; false before run.prepare. Lock held.
	Binding() (Binding, bool)
	// Logger is the session's logger.
	Logger() *slog.Logger
	// Clock is the supervisor's clock: every driver timer comes from it.
	Clock() clock.Clock
	// WithLock runs fn with the lock held.
	WithLock(fn func())
	// ProcessEnded is closed when the live provider process is gone; nil
	// when none runs.
	ProcessEnded() <-chan struct{}
	// Go runs fn in a goroutine the supervisor owns and waits for at its
	// shutdown; ctx ends then.
	Go(fn func(ctx context.Context))
	// AfterCommit is Go, with fn starting once the commit in progress is
	// durable: a driver method (lock held) calls it so that what fn sends
	// follows the events that method's caller commits.
	AfterCommit(fn func(ctx context.Context))
	// Deliver hands messages that arrive beside the provider's stdout (an
	// HTTP event stream) to the supervisor's shared handling: if d is
	// still the session's driver and its process lives, record runs (to
	// put the driver's own state in the record), a settled turn is taken
	// off the wire, and the events, lines and record are committed in one
	// durable write. It takes the lock.
	Deliver(d Driver, record func(), in []Inbound) error
	// CommitLocked commits evs with the record, then writes lines to the
	// provider's stdin. Lock held.
	CommitLocked(evs []Event, lines [][]byte) error

	// Catalog is the run's tool catalog; nil before run.prepare. Lock
	// held.
	Catalog() *catalog.Catalog
	// ThreadCatalogDigest is the catalog digest the provider's thread
	// started with (Codex: codex.md §3), kept in the supervisor's durable
	// state. Lock held.
	ThreadCatalogDigest() string
	SetThreadCatalogDigest(digest string)

	// The semantic tool flow (tools.md §3) for a provider that calls its
	// tools as requests on its own channel (Codex's item/tool/call).

	// AdmitCall takes a tool call into the durable call table: a nil
	// ToolWait means res answers it at once. Lock held.
	AdmitCall(call mcpbridge.Call) (w ToolWait, res mcpbridge.Result)
	// ToolWaiting reports whether call callID is waited for already.
	// Lock held.
	ToolWaiting(callID string) bool
	// RearmCall resumes call callID after a restart: res answers it now
	// (its result was recorded meanwhile), w waits for it; neither means
	// the call is gone. Lock held.
	RearmCall(callID string) (w ToolWait, res *mcpbridge.Result)
	// AwaitCall waits, in a goroutine the host owns, for w's result; then,
	// lock held, answer makes the line that answers the provider and it is
	// committed and written. If answer fails (the provider withdrew its
	// request) a result that settled the call is kept for a re-call. At
	// the host's shutdown it gives up: the call stays pending in the
	// durable table.
	AwaitCall(w ToolWait, answer func(res mcpbridge.Result) ([]byte, error))
}

// ToolWait is a tool call waiting for its result (Host.AdmitCall).
type ToolWait interface {
	CallID() string
}

// Steerer is a driver that can steer a running turn (Codex's turn/steer;
// ACP v1 cannot). Lock held.
type Steerer interface {
	Steer(text string) (Call, error)
	// SteerBound bounds the wait for the provider's answer.
	SteerBound() time.Duration
}

// EventNamer is a driver whose PRP events name an adapter and a driver of
// their own; the others name "acpx" and "acpx_runtime" (Mapper).
type EventNamer interface {
	EventNames() (adapter, driver string)
}

// CatalogChecker is a driver whose provider bounds the tool catalog:
// run.prepare refuses a catalog it cannot take rather than failing the
// later session.open. It runs without the lock on a driver that has no
// session yet.
type CatalogChecker interface {
	CheckCatalog(cat *catalog.Catalog) error
}

// Rearmer is a driver whose tool calls are provider requests: at a
// re-adopt it waits again for each open one, returning the answers
// ready now for the caller's commit. Lock held.
type Rearmer interface {
	Rearm() [][]byte
}

// QuestionAnswerer is a driver whose provider asks questions as requests
// (Codex's item/tool/requestUserInput). Lock held.
type QuestionAnswerer interface {
	// IsQuestion reports whether an agent request of method is a question.
	IsQuestion(method string) bool
	// AnswerQuestion is the line that answers question request id.
	AnswerQuestion(id json.RawMessage, answers map[string]any) ([]byte, error)
}

// RuntimeRequester is a driver whose provider makes runtime requests of
// its own (Codex's questions and approvals); they close with the turn.
// Lock held.
type RuntimeRequester interface {
	// OwnsRuntimeRequest reports whether an agent request of method is
	// one of them.
	OwnsRuntimeRequest(method string) bool
}

// Launch is what a driver may shape of its provider's launch.
type Launch struct {
	StateDir string
	// Session is the PRP normalizedSessionId; "" when unknown.
	Session string
	// Environ is runnerd's environment; Env the agent's (an allowlist of
	// Environ) and ChildEnv variables for the agent process only, never
	// for pcwrap.
	Environ  []string
	Env      []string
	ChildEnv map[string]string
}

// Launcher is a driver that shapes its provider's launch. Launch runs
// without the lock, before the process starts, on a driver made for the
// binding's kind that has no session yet (it must not use its host's
// Core); record, when not nil, runs with the lock held on the session's
// Core once the new launch is recorded there, so what it writes is
// durable with the launch.
type Launcher interface {
	Launch(l *Launch) (record func(c *Core), err error)
}

// PermissionResponder is a driver with its own permission-shaped requests
// (Codex's approvals): it answers request id with outcome o in its own
// protocol; ok is false for a request it does not own. Lock held.
type PermissionResponder interface {
	RespondPermission(id json.RawMessage, req AgentRequest, o PermissionOutcome) (line []byte, ok bool, err error)
}

// Binding is what a driver reads of the run's binding (run.prepare).
type Binding struct {
	Model          string
	PermissionMode PermissionMode
	// Instructions reads the run's instructions (nil: none); an error
	// means they could not be read.
	Instructions func() (*string, error)
}

// Adopter is a driver whose provider talks beside the pcwrap stdio and
// must reopen that channel when the supervisor re-adopts a live process.
type Adopter interface {
	// Adopt reopens the channel. Lock held.
	Adopt()
}

// Answerer is a driver that answers a resolved runtime request over its
// own channel instead of a line on the agent's stdin.
type Answerer interface {
	// Answer sends outcome o for agent request id once the commit in
	// progress is durable. Lock held.
	Answer(id json.RawMessage, o PermissionOutcome)
}

// ErrDeadline is a bound's expiry while a driver waits for its provider
// (the open bound of session.open).
var ErrDeadline = errors.New("deadline")
