// Package agent supervises runnerd's provider session: one agent process
// under pcwrap (acp.md §3–§5). It launches or re-adopts the pcwrap process
// session, writes lines as stdin files, consumes event files exactly once,
// detects channel loss and stops the agent.
//
// Durability contract: every state change is a batch prepared under the
// Manager's lock and handed to the committer (commit.go), which stores the
// Stored record and appends the PRP events in ONE durable write
// (Sink.Commit) without that lock. An event file is deleted only after the
// write that covers it (parse → commit → delete, acp.md §3.3); the record
// (next stdin sequence, request ids) is durable before any line it covers
// is written (acp.md §3.2). A command method returns once its changes are
// durable (Sync).
//
// Drivers (provider.Driver): the Manager knows a provider's wire protocol
// only through its Driver, made by the provider.Registration of
// Binding.Driver in Config.Drivers (the runner lists one per provider)
// over a host (driver.go) that is the driver's only way into the Manager. A driver keeps its durable state in the session's
// provider.Core (Core.Wire: request table, partial line, active turn with
// TurnState.ProviderTurnID; Core.Live: session id) and implements Open
// (handshake through OpenSession.Call), Feed (stdout bytes →
// provider.Inbound: KindResponse, KindRequest, KindUpdate mapped by
// provider.Mapper, KindTurnSettled, KindCancelRequest, and KindEvents for
// events only its protocol has), Prompt, Cancel, KeepsRunning (an
// interrupt leaves the process running) and HandleRequest (provider
// requests before the shared handling; the semantic tool flow is
// Manager.admitCallLocked, answered when the toolWaiter fires). pcwrap
// supervision, hot restart, the commit path, the cold-start gate and
// bounds, loss detection and runtime requests stay shared.
//
// A driver whose provider talks beside the pcwrap stdio (OpenCode: HTTP +
// SSE on loopback, internal/opencode) reads only its listening line
// from stdout, keeps its own durable state in provider.Record.Driver, feeds
// what its channel brings through provider.Host.Deliver (handleInbound and
// the one commit path, its state in the same write), and reopens that
// channel when Start re-adopts the process (provider.Adopter).
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/procsession"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/sandbox"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/terminal"
	"github.com/pcrunner/pcrunner/internal/toolcall"
	"github.com/pcrunner/pcrunner/internal/workspace"
)

// Stored is the durable state of the agent executor, kept as one record in
// runner-state.json. It never holds an environment value.
type Stored struct {
	// Binding is what run.prepare bound; nil before it.
	Binding *Binding `json:"binding,omitempty"`
	// Session is the ACP session record (acp.md §3.4); nil when none.
	Session *provider.Record `json:"session,omitempty"`
	// NextTurn numbers runnerd's providerTurnIds.
	NextTurn uint64 `json:"nextTurn"`
	// Loss is a channel loss latched on an agent that is gone; the next
	// turn.start fails at once with it (acp.md §5.1).
	Loss provider.LossReason `json:"loss,omitempty"`
	// Prompt is the staged prompt of the latest turn.start until its
	// command result is recorded after the prompt's publication: a
	// restart uses it to tell whether the prompt reached the agent
	// (prp.md §7.2 item 8).
	Prompt *PromptDelivery `json:"prompt,omitempty"`
	// Lines are the stdin lines the write that holds them reserved, staged
	// under their temporary names before it and published after it, in
	// order: a restart publishes any still staged, so no reserved number
	// is left a gap that pcwrap reports as lost input. A rewrite of an
	// absent number instead could deliver a line twice (pcwrap deletes a
	// file before delivering it and takes a late number without
	// complaint); a temporary name still present proves it never reached
	// the queue. A later write drops them: its lines come after these.
	Lines []StagedLine `json:"lines,omitempty"`
	// Closed is set by a deliberate stop (an interrupted or stopped turn,
	// turn.stop, session.close, session.destroy): a turn.start before the
	// next session.open is rejected session_not_open, never a loss
	// sequence (tools.md §7).
	Closed bool `json:"closed,omitempty"`
	// TurnIDs are the provider turn ids used so far, oldest first, at most
	// maxUsedTurnIDs: a turn.start turnId never repeats one (tools.md §7).
	TurnIDs []string `json:"turnIds,omitempty"`
	// Tools is the run's semantic tool call table (tools.md §3).
	Tools *toolcall.Table `json:"tools,omitempty"`
	// Bridge is the live tool bridge of the provider session (tools.md §2).
	Bridge *BridgeRecord `json:"bridge,omitempty"`
	// ThreadCatalogDigest is the catalogDigest a Codex thread was started
	// with: thread/resume cannot change dynamicTools, so a resume under
	// another catalog fails tool_catalog_changed (codex.md §3).
	ThreadCatalogDigest string `json:"threadCatalogDigest,omitempty"`
}

// PromptDelivery is a turn.start prompt written as a stdin file under its
// temporary name (Tmp) and reserved as file Seq, with the command it
// answers.
type PromptDelivery struct {
	CommandID string `json:"commandId"`
	Seq       int64  `json:"seq"`
	Tmp       string `json:"tmp"`
	// Answer: the staged line is request.resolve's answer (recorded
	// delivered), which a restart publishes if it is still staged.
	Answer bool `json:"answer,omitempty"`
}

// StagedLine is a stdin line reserved as file Seq and staged under Tmp.
type StagedLine struct {
	Seq int64  `json:"seq"`
	Tmp string `json:"tmp"`
}

// OutcomeStatus is a command status an agent commit records.
type OutcomeStatus string

// Outcome statuses (prp.md §7.2, §7.3).
const (
	outcomeCompleted     OutcomeStatus = "completed"
	outcomeFailed        OutcomeStatus = "failed"
	outcomeIndeterminate OutcomeStatus = "indeterminate"
)

// CodePromptNotDelivered is turn.start's result when a restart finds its
// prompt never reached the agent (prp.md §7.2 item 8).
const CodePromptNotDelivered = "prompt_not_delivered"

// CommandOutcome is a command result a commit records in the same durable
// write as the evidence of the command's effect (prp.md §7.2 item 8).
type CommandOutcome struct {
	CommandID string
	Status    OutcomeStatus
	Result    json.RawMessage
}

// Binding is the provider descriptor bound by run.prepare (prp.md §7.6).
type Binding struct {
	Agent            string                  `json:"agent"`
	Command          string                  `json:"command"`
	Args             []string                `json:"args,omitempty"`
	Cwd              string                  `json:"cwd"`
	PermissionMode   provider.PermissionMode `json:"permissionMode"`
	ProviderVersion  string                  `json:"providerVersion,omitempty"`
	ContractRevision string                  `json:"contractRevision,omitempty"`
	// CriterionIDs are completionContract.criterionIds: one synthesised
	// criterion each when a turn ends without an accepted result (tools.md §4).
	CriterionIDs []string `json:"criterionIds,omitempty"`
	// Model is the descriptor's model (tools.md §5).
	Model string `json:"model,omitempty"`
	// CatalogDigest is authorizedTools' catalogDigest (tools.md §1).
	CatalogDigest string `json:"catalogDigest,omitempty"`
	// CatalogSide, InstructionsSide and RuntimeContextSide name the
	// write-once side files (state.WriteSide) that hold the run's catalog,
	// instructions and runtime context; "" when the run has none. The
	// state keeps only these names (tools.md §1, storage).
	CatalogSide        string `json:"catalogSide,omitempty"`
	InstructionsSide   string `json:"instructionsSide,omitempty"`
	RuntimeContextSide string `json:"runtimeContextSide,omitempty"`
	// Driver names the provider's registration (provider.Registration
	// Driver: "" for ACP).
	Driver string `json:"driver,omitempty"`
	// NoClientFS turns off the fs.readTextFile/writeTextFile advertisement
	// (descriptor provider.clientCapabilities.fs: false, for agents that
	// misbehave with it). Absent means advertised.
	NoClientFS bool `json:"noClientFs,omitempty"`
	// NoClientTerminal turns off the terminal advertisement (descriptor
	// provider.clientCapabilities.terminal: false).
	NoClientTerminal bool `json:"noClientTerminal,omitempty"`
}

// Sink is where the agent's state and events become durable.
type Sink interface {
	// Commit stores record (the Stored record, encoded, without its item
	// texts) and texts (ItemText says how), and appends events to the
	// outbox, in order, in one durable write, and has them sent
	// without waiting for the socket. A
	// non-nil outcome is recorded as its command's result in that same
	// write; the command's result has not been sent yet. Only the
	// committer calls it, one write at a time, never under Manager.mu.
	Commit(record json.RawMessage, texts []ItemText, events []provider.Event, outcome *CommandOutcome) error
	// Drained reports whether new provider output may be taken (prp.md
	// §8.5: everything sent is acknowledged). It must not block.
	Drained() bool
	// DrainSignal returns a channel closed the next time Drained may have
	// turned true: the ACK path fires it when it applies an ACK, on its own
	// routine, never behind a command handler. Take the channel before
	// checking Drained, so an ACK between the two is not missed.
	DrainSignal() <-chan struct{}
}

// Config configures a Manager.
type Config struct {
	StateDir string
	// Pcwrap is the pcwrap binary (see FindPcwrap).
	Pcwrap string
	// Drivers lists the providers runnerd runs. The one recorded under
	// the empty driver name (ACP's) also drives a binding whose driver
	// name no entry has.
	Drivers []provider.Registration
	// Environ is runnerd's environment; the agent gets an allowlist of it.
	Environ []string
	Sink    Sink
	Logger  *slog.Logger
	Clock   clock.Clock
	// Stderr receives the literal "stdout frame exceeded" line (acp.md §3.3).
	Stderr io.Writer

	ResumeBound time.Duration
	ColdBound   func(agent string) time.Duration
	CancelGrace time.Duration
	// StopWait bounds a stop: pcwrap's grace plus the kill wait (acp.md §3.6).
	StopWait time.Duration
	Gate     *acpx.ColdStartGate
	// Correlation returns the PRP run identity the semantic tool events
	// name (tools.md §3 item 3).
	Correlation func() toolcall.Correlation
	// WorkspaceWalkTimeout bounds each workspace walk, the baseline before
	// a prompt and the after-walk (--workspace-baseline-timeout-ms,
	// workspace.md §4.1); 0 means workspace.DefaultWalkTimeout.
	WorkspaceWalkTimeout time.Duration
	// WorkspaceMaxPayloadBytes bounds a workspace change set's encoded
	// payload (workspace.md §3.4); 0 means workspace.MaxPayloadBytes.
	WorkspaceMaxPayloadBytes int
	// WorkspacePayloadBound, when set, is the bound now, below
	// WorkspaceMaxPayloadBytes: the runner's follows the connection's
	// frame limit.
	WorkspacePayloadBound func() int
	// Redact is the outbox sanitiser's text rule: diff text passes it,
	// and a file preview it would change is withheld. nil: identity.
	Redact func(string) string
	// MetricInterval is --sandbox-metric-interval-ms: a sandbox.metric
	// every interval while a turn runs (workspace.md §9); 0 disables.
	MetricInterval time.Duration
	// Sampler reads the metrics; nil with an interval: sandbox.NewSampler.
	Sampler *sandbox.Sampler
}

// Poll periods of the event watcher.
const (
	// eventPoll is the safety-net poll of events/ (acp.md §3.3: 100 ms).
	eventPoll = 100 * time.Millisecond
)

// Result codes the executor returns (acp.md §6 classes reuse provider.Class).
const (
	codeCommandExecutionFailed = provider.CodeCommandExecutionFailed
)

// CommandError is a failed command (provider.CommandError): drivers
// return it too, so it is the model's type.
type CommandError = provider.CommandError

func failed(msg string) error { return provider.Failed(msg) }

func classErr(err error) error {
	var f *provider.Failure
	if errors.As(err, &f) {
		return &CommandError{Code: string(f.Class), Message: f.Message}
	}
	var ce *CommandError
	if errors.As(err, &ce) {
		return ce
	}
	return failed("the agent command failed")
}

// Manager is the agent executor of one runnerd (one normalizedSessionId).
// Its methods are called by the runner's command handlers, one at a time;
// the event reader of the live process runs concurrently and takes the same
// lock for each consumed file.
type Manager struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// commits makes the batches prepared under mu durable (commit.go);
	// commitStop ends its routine and commitDone says it has ended;
	// hooks counts the after-commit hooks it started.
	commits    *committer
	commitStop chan struct{}
	commitDone chan struct{}
	stopOnce   sync.Once // closes commitStop: Close may run twice
	hooks      sync.WaitGroup
	// shuttingDown is closed once Shutdown begins: from then on the
	// event reader takes files without waiting for the flow-control gate
	// (awaitDrained). shutdownOnce closes it: Shutdown may run twice.
	shuttingDown chan struct{}
	shutdownOnce sync.Once
	// duringWalk, when set (tests only, before the first turn), runs in
	// each after-walk's window, without mu.
	duringWalk func()

	// mu guards every field below: the runner's calls, the event reader
	// and the drivers (through host) take it.
	mu       sync.Mutex
	st       Stored
	cl       *acpx.Client // nil without a session record
	mapper   provider.Mapper
	proc     *process // live pcwrap session; nil when none
	terms    *terminal.Manager
	waiters  map[int64]chan provider.Inbound
	turnDone chan struct{} // closed when the active turn settles; see turnSettledLocked
	byRun    bool          // the active cancel is run.cancel
	goalCall int64         // the unanswered _session/goal request id (goal.go); 0 when none
	tools    toolState
	// drv is the driver of cl (driverLocked); drvCl the client it wraps.
	drv   provider.Driver
	drvCl *acpx.Client
	// afterCommit and afterWrite wait for the next prepared batch: its
	// after-commit hooks (provider.Host.AfterCommit) and its wake-ups.
	afterCommit []func(context.Context)
	afterWrite  []func()
	// ws is the workspace root and the active turn's tracker (workspace.go).
	ws wsState
	// settleInline is set while the event reader prepares a batch it
	// settles itself once it has released mu (commitFromReaderLocked).
	settleInline bool
	// texts is what the prepared batches handed the Sink of the item
	// texts (itemtext.go).
	texts textLens
}

// NewManager returns a manager resuming st. Call Start to re-adopt a live
// agent, Close to stop the reader (a crash-equivalent for the agent: it
// keeps running).
func NewManager(cfg Config, st Stored) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	if cfg.ResumeBound <= 0 {
		cfg.ResumeBound = acpx.ResumeOpenBound
	}
	if cfg.ColdBound == nil {
		cfg.ColdBound = func(a string) time.Duration { return acpx.OpenBound(a, false) }
	}
	if cfg.CancelGrace <= 0 {
		cfg.CancelGrace = acpx.CancelGrace
	}
	if cfg.StopWait <= 0 {
		cfg.StopWait = acpx.AgentStopWait
	}
	if cfg.Gate == nil {
		cfg.Gate = acpx.NewColdStartGate(acpx.MaxConcurrentColdStarts, cfg.Clock)
	}
	if cfg.WorkspaceWalkTimeout <= 0 {
		cfg.WorkspaceWalkTimeout = workspace.DefaultWalkTimeout
	}
	if cfg.WorkspaceMaxPayloadBytes <= 0 {
		cfg.WorkspaceMaxPayloadBytes = workspace.MaxPayloadBytes
	}
	if cfg.Redact == nil {
		cfg.Redact = func(s string) string { return s }
	}
	if cfg.MetricInterval > 0 && cfg.Sampler == nil {
		cfg.Sampler = sandbox.NewSampler() // runnerd's cgroup as it is at start (§9)
	}
	if st.Tools != nil {
		// The runner revises the results of answers a crash may have cut
		// off, in its own write (runner reviseUnanswered); the Manager's
		// copy only forgets the marks.
		st.Tools.Unanswered()
	}
	m := &Manager{cfg: cfg, log: cfg.Logger.With("component", "agent"), st: st, waiters: map[int64]chan provider.Inbound{},
		shuttingDown: make(chan struct{})}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.commits = newCommitter(m)
	m.commitStop, m.commitDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(m.commitDone)
		m.commits.run(m.commitStop)
	}()
	m.terms = terminal.New(terminal.Config{StateDir: cfg.StateDir, Pcwrap: cfg.Pcwrap,
		Answer: m.answerTerminalWait, Logger: cfg.Logger})
	if st.Session != nil {
		m.cl = acpx.NewClient(*st.Session, acpx.ClientOptions{Logger: m.log})
	}
	m.setMapper()
	m.loadCatalog()
	return m
}

func (m *Manager) setMapper() {
	b := m.st.Binding
	if b == nil {
		m.mapper = provider.Mapper{}
		return
	}
	_, secrets := acpx.AgentEnv(b.Agent, m.cfg.Environ)
	m.mapper = provider.Mapper{Redactor: provider.NewRedactor(secrets...), OpenSecret: state.OpenSecretStart,
		Provider: b.Agent, Cwd: b.Cwd, ContractRevision: b.ContractRevision, CriterionIDs: b.CriterionIDs}
	if d, ok := m.newDriver(b.Driver).(provider.EventNamer); ok {
		m.mapper.Adapter, m.mapper.Driver = d.EventNames()
	}
}

// Start re-adopts the recorded process session after a restart (acp.md
// §3.5): a live pcwrap keeps its agent and its waiting event files are
// consumed exactly once; a dead one has its files consumed, and the agent
// is marked gone.
func (m *Manager) Start() error {
	root := m.restartRoot()
	m.mu.Lock()
	err := m.startLocked()
	if err == nil {
		err = m.resumeWorkspaceLocked(root)
	}
	if err == nil && m.cl != nil && m.cl.ActiveTurn() != "" && m.proc != nil && !m.proc.lost {
		m.sampleTurnLocked(m.cl.ActiveTurn()) // a re-adopted turn is sampled too
	}
	m.mu.Unlock()
	if err != nil {
		return err
	}
	return m.commits.sync()
}

// startLocked is Start with m.mu held.
func (m *Manager) startLocked() error {
	recorded := ""
	if m.cl != nil && m.cl.Record().Process != nil {
		recorded = m.cl.Record().Process.UUID
	}
	m.terms.Sweep(func(id string) bool { return id == recorded })
	if m.cl == nil {
		return nil
	}
	// The terminals a previous runnerd left keep answering (tools.md §8).
	if err := m.terms.Adopt(); err != nil {
		m.log.Warn("adopt terminals", "err", err)
	}
	rec := m.cl.Record()
	if rec.Process == nil || rec.Process.UUID == "" {
		m.terms.ReleaseAll() // their agent is gone: so is their session
		return nil
	}
	dir := sessionPath(m.cfg.StateDir, rec.Process.UUID)
	pr := m.st.Prompt
	m.st.Prompt = nil
	wrapper := procsession.Wrapper{Pid: rec.Process.WrapperPID, Start: rec.Process.WrapperStart}
	p, err := m.attachLocked(rec.Process.UUID, dir, nil, wrapper, rec.Process.NextStdinSeq, rec.Process.ConsumedEventSeq)
	if err != nil {
		// The directory is gone or unusable: the agent is lost, and
		// whether a staged prompt reached it cannot be known.
		m.log.Warn("recorded process session is unusable; marking the agent gone", "err", err)
		m.terms.ReleaseAll()
		evs := m.goneLocked(provider.LossTransportClosed)
		var out *CommandOutcome
		if pr != nil {
			out = &CommandOutcome{CommandID: pr.CommandID, Status: outcomeIndeterminate,
				Result: codeResult(codeExecutionIndeterminate, "the agent's process session is gone; whether the prompt reached it is unknown")}
		}
		return m.persistLocked(evs, out)
	}
	// Before anything else is written: the recorded lines come first.
	recoverLines(p, m.st.Lines, m.log)
	live := p.alive()
	m.log.Info("re-adopting process session", "uuid", p.uuid, "live", live)
	// A dead pcwrap's files are consumed exactly once, then the agent is
	// recorded gone; a session runnerd had closed ends as a stop, not a loss.
	p.deadAtAdoption = !live
	p.stopping = m.st.Closed
	if a, ok := m.driverLocked().(provider.Adopter); ok {
		a.Adopt() // a driver with a channel beside stdio reopens it
	}
	if rec := m.cl.Record(); live && rec.ACPSessionID != "" {
		// After the store's runner.reconciled (enqueued when it opened).
		ev := provider.SessionReconciled(rec.ACPSessionID, m.cl.ActiveTurn(), provider.ReconciledAdopted)
		if err := m.persistLocked([]provider.Event{ev}, nil); err != nil {
			return err
		}
	}
	if evs := m.restartBridgeLocked(p); len(evs) > 0 || m.st.Tools != nil {
		if err := m.persistLocked(evs, nil); err != nil {
			return err
		}
	}
	if d, ok := m.driverLocked().(provider.Rearmer); ok && m.st.Tools != nil {
		if lines := d.Rearm(); len(lines) > 0 || len(m.tools.waiters) > 0 {
			if err := m.commitThenWriteLocked(nil, lines); err != nil && !errors.Is(err, provider.ErrWrite) {
				return err
			}
		}
	}
	if pr == nil {
		return nil
	}
	return m.recoverPromptLocked(p, *pr)
}

// recoverLines publishes, in order, the recorded lines that runnerd went
// away before publishing (their temporary file is still there) under the
// numbers the record reserved for them; a line whose temporary name is
// gone was published, and is not written again. Lines are published in
// order, so the still-staged ones are the last.
func recoverLines(p *process, lines []StagedLine, log *slog.Logger) {
	var w *sessiondir.Writer
	defer func() {
		if w != nil {
			_ = w.Close()
		}
	}()
	for _, sl := range lines {
		s := sessiondir.Staged(sl)
		loc, err := p.w.Locate(s)
		if err != nil {
			log.Warn("cannot tell whether a recorded stdin line was queued", "seq", s.Seq, "err", err)
			return
		}
		if loc != sessiondir.Unpublished {
			continue
		}
		if w == nil {
			if w, err = sessiondir.OpenWriter(p.dir, s.Seq, sessiondir.WriterOptions{}); err != nil {
				log.Warn("cannot publish a recorded stdin line", "seq", s.Seq, "err", err)
				return
			}
		}
		if _, err := w.Publish(s); err != nil {
			log.Warn("cannot publish a recorded stdin line", "seq", s.Seq, "err", err)
			return
		}
	}
}

// recoverPromptLocked settles a turn.start whose prompt was staged when
// runnerd went away (prp.md §7.2 item 8): published (final name present,
// or both names gone) → the recorded completed result stands; temporary
// file present → the prompt never reached the agent: remove it, end the
// turn, and record failed {code: prompt_not_delivered}. m.mu held.
func (m *Manager) recoverPromptLocked(p *process, pr PromptDelivery) error {
	staged := sessiondir.Staged{Seq: pr.Seq, Tmp: pr.Tmp}
	loc, err := p.w.Locate(staged)
	var out *CommandOutcome
	var evs []provider.Event
	switch {
	case err != nil:
		m.log.Warn("cannot tell whether the prompt was queued", "err", err)
		out = &CommandOutcome{CommandID: pr.CommandID, Status: outcomeIndeterminate,
			Result: codeResult(codeExecutionIndeterminate, "whether the prompt reached the agent is unknown")}
	case loc == sessiondir.Unpublished && pr.Answer:
		// request.resolve recorded its answer delivered: deliver it now,
		// under the number reserved for it.
		w, werr := sessiondir.OpenWriter(p.dir, pr.Seq, sessiondir.WriterOptions{})
		if werr == nil {
			_, werr = w.Publish(staged)
		}
		if werr != nil {
			if w != nil {
				_ = w.Close()
			}
			m.log.Warn("cannot publish the staged answer", "err", werr)
			out = &CommandOutcome{CommandID: pr.CommandID, Status: outcomeIndeterminate,
				Result: codeResult(codeExecutionIndeterminate, "whether the answer reached the agent is unknown")}
			break
		}
		_ = p.w.Close()
		p.w = w
	case loc == sessiondir.Unpublished:
		// Its number never reached the queue: the next line takes it.
		w, werr := sessiondir.OpenWriter(p.dir, pr.Seq, sessiondir.WriterOptions{})
		if werr != nil {
			return fmt.Errorf("reopen stdin writer: %w", werr)
		}
		_ = p.w.Discard(staged)
		_ = p.w.Close()
		p.w, p.nextSeq = w, pr.Seq
		if turn := m.cl.ActiveTurn(); turn != "" {
			m.cl.AbandonTurn()
			evs = m.mapper.ChannelLost(m.cl.Map(), turn, provider.LossWriteError)
		}
		out = &CommandOutcome{CommandID: pr.CommandID, Status: outcomeFailed,
			Result: codeResult(CodePromptNotDelivered, "the prompt never reached the agent")}
	}
	return m.persistLocked(evs, out)
}

// SettlePrompt forgets the staged prompt of commandID: call it in the write
// that records the command's result after the executor returned, when the
// proof is no longer needed. It reports whether st changed.
func (st *Stored) SettlePrompt(commandID string) bool {
	if st.Prompt == nil || st.Prompt.CommandID != commandID {
		return false
	}
	st.Prompt = nil
	return true
}

// codeResult is a {code, message} command result.
func codeResult(code, message string) json.RawMessage {
	return jsonenc.MustMarshalEscaped(map[string]string{"code": code, "message": message})
}

// codeExecutionIndeterminate is the result code of an effect that may have
// half-happened (prp.md §7.2 step 7).
const codeExecutionIndeterminate = "execution_indeterminate"

// Close stops the reader goroutines without touching the agents: a
// restarted runnerd re-adopts them. Use Shutdown to stop the agents.
func (m *Manager) Close() {
	m.mu.Lock()
	srv := m.tools.srv // the record keeps it for the next life
	m.tools.srv = nil
	m.mu.Unlock()
	closeBridge(m, srv)
	m.cancel()
	m.wg.Wait()
	m.stopOnce.Do(func() { close(m.commitStop) }) // after the readers: the committer settles what they prepared
	<-m.commitDone
	m.hooks.Wait()
	m.terms.Close()
}

// Sync waits until every change prepared so far is durable and its
// effects are done, and returns the failure of a commit, if any. A
// command's result may be recorded only after it: the result must not
// outrun its evidence. Never call it with m.mu held.
func (m *Manager) Sync() error { return m.commits.sync() }

// durable is a command's answer once every change prepared so far is
// durable: the runner records the result in a later write, which must not
// outrun its evidence.
func (m *Manager) durable(out json.RawMessage, err error) (json.RawMessage, error) {
	if serr := m.Sync(); serr != nil {
		return nil, serr
	}
	return out, err
}

// wakeAfterCommitLocked runs fn once the next prepared batch is durable
// (an answer the agent may see only then). m.mu held.
func (m *Manager) wakeAfterCommitLocked(fn func()) {
	m.afterWrite = append(m.afterWrite, fn)
}

// Shutdown stops the live agent (orderly runnerd stop, acp.md §3.6), then
// closes the manager. The stop consumes what the agent leaves up to its
// exit frame without waiting for the flow-control gate: runnerd stops its
// agent once the link has ended, or, for a terminal command, on the
// routine that applies ACKs, so no ACK would open the gate before the
// stop wait ran out, and the exit frame would go unread. What the
// stop takes is bounded by the stop wait and by the outbox's own bounds;
// it is sent on the next connection.
func (m *Manager) Shutdown(ctx context.Context) {
	m.shutdownOnce.Do(func() { close(m.shuttingDown) })
	m.stopAgent(ctx, stopRelease)
	m.Close()
}

// persistLocked prepares the stored record (with the live process fields)
// and events, with outcome, as one batch. m.mu held.
func (m *Manager) persistLocked(events []provider.Event, outcome *CommandOutcome) error {
	return m.prepareLocked(events, nil, outcome, nil, nil, false)
}

// commitThenWriteLocked is the agent's one durability step: it prepares a
// batch for the committer (commit.go) and returns without waiting for the
// disk. The batch holds, for ONE durable write, the record (whose next
// stdin sequence already counts every line below) and the events, after
// whatever a pending batch of consumed event files produced; once that
// write is durable the committer deletes the files it covers, writes the
// lines in order as stdin files, and runs the waiter wake-ups. So a line
// exists only after the record that covers it (acp.md §3.2), and an event
// file is gone only after the commit that consumed it (§3.3). A failed
// stdin write latches write_error and commits the loss. It returns the
// latched failure of an earlier commit, if any. m.mu held.
func (m *Manager) commitThenWriteLocked(events []provider.Event, lines [][]byte) error {
	return m.commitThenWriteEffectLocked(events, lines, nil)
}

// commandEffect is the command whose completed result a commit records
// with the evidence of its effect (prp.md §7.2 item 8), and, for
// turn.start, its prompt line (nil for other commands, and for a turn
// failed at once by a latched loss).
type commandEffect struct {
	commandID string
	result    json.RawMessage
	prompt    []byte
	// answer marks prompt as request.resolve's answer to an agent request
	// rather than a turn.start prompt: a restart that finds it staged
	// publishes it, since its result already says delivered.
	answer bool
}

// commitThenWriteEffectLocked is commitThenWriteLocked that also records
// effect's completed result in the same write (prp.md §7.2 item 8). A
// turn.start prompt is written last: the committer first writes it
// completely under its temporary name; the write then records that name
// with its sequence reservation and the command's completed result; the
// prompt is published (renamed) after the other lines. A restart that
// finds the temporary name knows the prompt never reached the agent.
func (m *Manager) commitThenWriteEffectLocked(events []provider.Event, lines [][]byte, effect *commandEffect) error {
	var outcome *CommandOutcome
	var prompt []byte
	answer := false
	if effect != nil {
		outcome = &CommandOutcome{CommandID: effect.commandID, Status: outcomeCompleted, Result: effect.result}
		prompt, answer = effect.prompt, effect.answer
	}
	return m.prepareLocked(events, lines, outcome, prompt, nil, answer)
}

// prepareLocked queues one batch (commit.go): the pending batch of consumed
// event files first, in stream order, then events, lines and prompt; a
// lost agent gets no line. discard is a staged prompt to remove once the
// write is durable. It never blocks. m.mu held.
func (m *Manager) prepareLocked(events []provider.Event, lines [][]byte, outcome *CommandOutcome, prompt []byte, discard *sessiondir.Staged, answer bool) error {
	if err := m.commits.err(); err != nil {
		return err
	}
	p := m.proc
	b := &batch{outcome: outcome, discard: discard, after: m.afterCommit, wakes: m.afterWrite, done: make(chan struct{})}
	m.afterCommit, m.afterWrite = nil, nil
	if p != nil {
		events = append(p.bufEvents, events...)
		lines = append(p.bufLines, lines...)
		b.wakes = append(p.bufWakes, b.wakes...)
		p.bufEvents, p.bufLines, p.bufWakes = nil, nil, nil
		if p.lost {
			lines, prompt = nil, nil // nothing more reaches a lost agent
		}
	}
	if p == nil && (len(lines) > 0 || prompt != nil) {
		for _, w := range b.wakes {
			w()
		}
		return failed("no agent is running")
	}
	// A turn that ends here without the reader's after-walk (cancel,
	// loss, exit) gets the workspace events it can have without I/O.
	b.events = m.workspaceFallbackLocked(events)
	if p != nil {
		b.proc, b.w, b.fs = p, p.w, p.fs
		if p.fs != nil { // a closed reader's files wait for the next start's sweep
			b.remove = p.pending
		}
		p.pending = nil
		b.lines = lines
		for i := range lines {
			sl, err := sessiondir.NewStaged(p.nextSeq + int64(i))
			if err != nil {
				return fmt.Errorf("reserve stdin line: %w", err)
			}
			b.staged = append(b.staged, sl)
		}
		if prompt != nil {
			b.prompt = &promptLine{commandID: outcome.CommandID, line: prompt, seq: p.nextSeq + int64(len(lines)), answer: answer}
			p.nextSeq++
		}
		p.nextSeq += int64(len(lines))
	}
	st := m.st
	st.Session = nil
	st.Lines = nil
	for _, sl := range b.staged {
		st.Lines = append(st.Lines, StagedLine(sl))
	}
	if m.cl != nil {
		rec := m.cl.Record()
		if p != nil {
			rec.Process.UUID = p.uuid
			// The lines this write covers are written after it.
			rec.Process.NextStdinSeq = uint64(p.nextSeq)
			rec.Process.ConsumedEventSeq = uint64(p.consumed)
			rec.Process.WrapperPID, rec.Process.WrapperStart = p.wrapper.Pid, p.wrapper.Start
			p.recorded = p.consumed
		} else {
			rec.Process = nil
		}
		st.Session = &rec
	}
	m.st = st
	// The texts leave the encoded copy only: m.st keeps them, as the
	// client's own state does. A batch without a session lists none, so
	// the Sink drops them all and the next one starts from scratch.
	enc := st
	var texts []ItemText
	lens := textLens{}
	if enc.Session != nil {
		s := *enc.Session
		texts, s.Process, lens = m.texts.takeTexts(s.Process)
		enc.Session = &s
	}
	// Encoded now: the Manager goes on changing its own state.
	record, err := jsonenc.Marshal(enc)
	if err != nil {
		return fmt.Errorf("encode agent state: %w", err)
	}
	b.record, b.texts, m.texts = record, texts, lens
	m.commits.push(b, m.settleInline)
	return nil
}

// Prepare binds the provider descriptor (run.prepare, prp.md §7.6).
// It returns once what it changed is durable (Sync).
func (m *Manager) Prepare(payload json.RawMessage) (json.RawMessage, error) {
	return m.durable(m.prepare(payload))
}

// prepare is Prepare without the wait for durability.
func (m *Manager) prepare(payload json.RawMessage) (json.RawMessage, error) {
	b, err := parseDescriptor(payload, m.cfg.Drivers)
	if err != nil {
		return nil, err
	}
	rc, err := parseRunContext(payload)
	if err != nil {
		return nil, err
	}
	if err := storeRunContext(m.cfg.StateDir, b, rc); err != nil {
		m.log.Error("store run context", "err", err)
		return nil, failed("the run's instructions or runtime context could not be stored")
	}
	cat, err := prepareCatalog(m.cfg.StateDir, payload, b)
	if err != nil {
		return nil, err
	}
	if d, ok := m.newDriver(b.Driver).(provider.CatalogChecker); ok {
		if err := d.CheckCatalog(cat); err != nil {
			return nil, err
		}
	}
	_, rootErr := workspace.Open(b.Cwd, m.cfg.StateDir)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st.Binding = b
	m.setCatalogLocked(cat)
	m.setMapper()
	if err := m.commitThenWriteLocked(m.workspaceReadyLocked(b.Cwd, rootErr), nil); err != nil {
		return nil, err
	}
	return jsonenc.MustMarshalEscaped(map[string]any{"agent": b.Agent, "prepared": true}), nil
}

// Attached reports the bound root to the run a warm run.attach rotated
// to, under its identity (workspace.md §6, §8): the preparing phase and
// workspace.ready again, or the workspace_unavailable diagnostic. It does
// not wait for durability.
func (m *Manager) Attached() error {
	m.mu.Lock()
	b := m.st.Binding
	m.mu.Unlock()
	if b == nil {
		return nil
	}
	_, rootErr := workspace.Open(b.Cwd, m.cfg.StateDir)
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.ws.readied, b.Cwd) // a new run: its task page starts empty
	return m.commitThenWriteLocked(m.workspaceReadyLocked(b.Cwd, rootErr), nil)
}

// parseDescriptor reads run.prepare's provider descriptor (prp.md §7.6,
// acp.md §2.1) for one of drivers. Sidecar-only fields are accepted and
// ignored.
func parseDescriptor(payload json.RawMessage, drivers []provider.Registration) (*Binding, error) {
	var p struct {
		Provider struct {
			Kind            string   `json:"kind"`
			Agent           string   `json:"agent"`
			Command         string   `json:"command"`
			Args            []string `json:"args"`
			Cwd             string   `json:"cwd"`
			PermissionMode  string   `json:"permissionMode"`
			ProviderVersion string   `json:"providerVersion"`
			Model           *string  `json:"model"`
			// ApprovalPolicy is the codex descriptor's (codex.md §1).
			ApprovalPolicy *string `json:"approvalPolicy"`
			// ClientCapabilities switches off what runnerd advertises:
			// {"fs": false} (a runnerd extension of the descriptor).
			ClientCapabilities struct {
				FS       json.RawMessage `json:"fs"`
				Terminal json.RawMessage `json:"terminal"`
			} `json:"clientCapabilities"`
		} `json:"provider"`
		CompletionContract struct {
			Revision     string   `json:"revision"`
			CriterionIDs []string `json:"criterionIds"`
		} `json:"completionContract"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, failed("run.prepare payload is malformed")
	}
	d := p.Provider
	reg, ok := registrationOf(drivers, func(r provider.Registration) bool { return r.Kind == d.Kind })
	if !ok {
		return nil, failed("provider descriptor kind " + kindName(d.Kind) + " is not supported by this runner")
	}
	spec := provider.LaunchSpec{Agent: d.Agent, Command: d.Command, Args: d.Args,
		PermissionMode: d.PermissionMode, ApprovalPolicy: d.ApprovalPolicy}
	if reg.Describe != nil {
		if err := reg.Describe(&spec); err != nil {
			return nil, err
		}
	}
	b := &Binding{Agent: spec.Agent, Command: spec.Command, Args: spec.Args, Cwd: d.Cwd,
		ProviderVersion: d.ProviderVersion, ContractRevision: p.CompletionContract.Revision,
		CriterionIDs: p.CompletionContract.CriterionIDs, Driver: reg.Driver}
	if b.Cwd == "" {
		b.Cwd = "/"
	}
	if !filepath.IsAbs(b.Cwd) {
		return nil, failed("provider descriptor cwd is not absolute")
	}
	mode, err := provider.ParsePermissionMode(spec.PermissionMode)
	if err != nil {
		return nil, failed("provider descriptor permissionMode is not supported")
	}
	b.PermissionMode = mode
	switch fs := string(d.ClientCapabilities.FS); fs {
	case "", "null", "true":
	case "false":
		b.NoClientFS = true
	default:
		return nil, failed("provider descriptor clientCapabilities.fs is not a boolean")
	}
	switch tc := string(d.ClientCapabilities.Terminal); tc {
	case "", "null", "true":
	case "false":
		b.NoClientTerminal = true
	default:
		return nil, failed("provider descriptor clientCapabilities.terminal is not a boolean")
	}
	if b.Model, err = parseModel(d.Model); err != nil {
		return nil, err
	}
	return b, nil
}

// kindName quotes a descriptor kind for an error message: a kind that is
// not a plain identifier is peer text and is not repeated.
func kindName(k string) string {
	if k == "" {
		return "(absent)"
	}
	if len(k) > 64 {
		return "(unrecognised)"
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return "(unrecognised)"
		}
	}
	return `"` + k + `"`
}

// errDeadline is the open bound firing.
var errDeadline = provider.ErrDeadline

// Open runs session.open commandID (acp.md §4.1): adopt a live agent,
// resume a reusable record, or start cold. The write that records the
// session also records the completed result (prp.md §7.2 item 8).
// It returns once what it changed is durable (Sync).
func (m *Manager) Open(ctx context.Context, commandID string) (json.RawMessage, error) {
	return m.durable(m.openSession(ctx, commandID))
}

// openSession is Open without the wait for durability.
func (m *Manager) openSession(ctx context.Context, commandID string) (json.RawMessage, error) {
	m.mu.Lock()
	b := m.st.Binding
	if b == nil {
		m.mu.Unlock()
		return nil, failed("run.prepare has not bound a provider")
	}
	m.mu.Unlock()
	// A process whose pcwrap is gone is never adopted: its reader records
	// it ended first (acp.md §3.5, §4.1).
	adoptBound := m.cfg.Clock.NewTimer(m.cfg.ResumeBound)
	m.awaitDeadProcess(ctx, adoptBound.C())
	adoptBound.Stop()
	m.mu.Lock()
	// 1. Adopt.
	if p := m.proc; p != nil && !p.lost && !p.deadAtAdoption && m.cl != nil && m.cl.Record().ACPSessionID != "" {
		rec := m.cl.Record()
		evs := m.mapper.SessionAdopted(rec, provider.Descriptor{Agent: b.Agent, ProviderVersion: b.ProviderVersion})
		m.st.Closed = false
		evs = append(evs, m.openGoalEventsLocked()...)
		result := m.openResultLocked(true, rec, b)
		err := m.commitThenWriteEffectLocked(evs, nil, &commandEffect{commandID: commandID, result: result})
		m.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return result, nil
	}
	resume := m.cl != nil && m.cl.Record().Reusable(b.Cwd, b.Command, b.Args)
	stale := m.proc != nil
	m.mu.Unlock()
	if stale {
		// A live agent without a usable session (its handshake was cut
		// short by a restart, or it is lost): stop it before a new one.
		m.stopAgent(ctx, stopQuiet)
	}
	m.mu.Lock()
	if !resume {
		m.cl = nil // a never-prompted or reset record is discarded, never loaded
	}
	m.mu.Unlock()

	bound := m.cfg.ResumeBound
	if !resume {
		release, _, err := m.cfg.Gate.Acquire(ctx)
		if err != nil {
			return nil, failed("session.open was cancelled while waiting for a cold-start slot")
		}
		defer release()
		bound = m.cfg.ColdBound(b.Agent)
	}
	t := m.cfg.Clock.NewTimer(bound)
	defer t.Stop()
	err := m.open(ctx, t.C(), b, resume)
	if err == nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		rec := m.cl.Record()
		m.st.Loss = ""
		m.st.Closed = false
		evs := m.mapper.SessionOpened(rec, resume, provider.Descriptor{Agent: b.Agent, ProviderVersion: b.ProviderVersion})
		evs = append(evs, provider.PhaseChanged(provider.PhaseExecuting))
		evs = append(evs, m.openGoalEventsLocked()...)
		evs = append(evs, m.toolDiagnosticsLocked()...)
		evs = append(evs, instructionsDiagnostics(b)...)
		result := m.openResultLocked(resume, rec, b)
		if err := m.commitThenWriteEffectLocked(evs, nil, &commandEffect{commandID: commandID, result: result}); err != nil {
			return nil, err
		}
		return result, nil
	}
	// Failure: stop the agent, emit no provider event, start clean next time.
	m.stopAgent(context.WithoutCancel(ctx), stopQuiet)
	m.mu.Lock()
	if m.cl != nil && (errors.Is(err, errDeadline) || !resume) {
		m.cl.MarkReset()
	}
	cerr := m.commitThenWriteLocked(nil, nil)
	m.mu.Unlock()
	if cerr != nil {
		return nil, cerr
	}
	if errors.Is(err, errDeadline) {
		f := provider.HandshakeTimeout(b.Command, bound.Milliseconds())
		return nil, &CommandError{Code: string(f.Class), Message: f.Message}
	}
	return nil, classErr(err)
}

// open spawns the agent and runs the handshake.
func (m *Manager) open(ctx context.Context, deadline <-chan time.Time, b *Binding, resume bool) error {
	meta, err := sessionMeta(m.cfg.StateDir, b)
	if err != nil {
		m.log.Error("session meta unavailable", "err", err)
		return failed("the run's instructions could not be read")
	}
	reg, _ := m.registration(b.Driver)
	m.mu.Lock()
	err = m.commitThenWriteLocked([]provider.Event{provider.HarnessStarting(b.Driver, reg.Transport, b.Agent)}, nil)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	env, _ := acpx.AgentEnv(b.Agent, m.cfg.Environ)
	env = modelEnv(b.Agent, b.Model, env)
	ls := provider.Launch{StateDir: m.cfg.StateDir, Session: m.sessionName(), Environ: m.cfg.Environ, Env: env}
	var record func(*provider.Core)
	if d, ok := m.newDriver(b.Driver).(provider.Launcher); ok {
		if record, err = d.Launch(&ls); err != nil {
			return provider.NewFailure(provider.ClassAgentSpawnFailed, err)
		}
	}
	env, childEnv := ls.Env, ls.ChildEnv
	argv := append([]string{b.Command}, b.Args...)
	if reg.Executable != "" {
		argv[0] = reg.Executable
	}
	l, err := launch(launchSpec{stateDir: m.cfg.StateDir, pcwrap: m.cfg.Pcwrap, argv: argv, cwd: b.Cwd, env: env, childEnv: childEnv})
	if err != nil {
		m.log.Error("agent launch failed", "err", err)
		return provider.NewFailure(provider.ClassAgentSpawnFailed, err)
	}
	m.mu.Lock()
	resumed := ""
	if m.cl == nil {
		m.cl = acpx.NewClient(provider.Record{}, acpx.ClientOptions{Logger: m.log})
	} else {
		resumed = m.cl.Record().ACPSessionID
		m.cl.ResetProcess()
	}
	m.cl.SetLaunch(b.Agent, b.Command, b.Args, b.Cwd)
	if record != nil {
		record(m.cl.Core) // durable with the launch
	}
	m.advertiseLocked(b, resume)
	m.cl.SetSessionMeta(meta)
	_, err = m.attachLocked(l.uuid, l.dir, l.cmd, l.wrapper, 1, 0)
	if err == nil {
		// Durable with the launch, before the handshake's first request.
		err = m.commitThenWriteLocked([]provider.Event{provider.SessionStarting(resume, resumed)}, nil)
	}
	m.mu.Unlock()
	if err != nil {
		_ = l.cmd.Process.Kill() // never started its agent session: nothing to hand over
		return err
	}
	m.mu.Lock()
	d := m.driverLocked()
	m.mu.Unlock()
	return d.Open(ctx, provider.OpenSession{Cwd: b.Cwd, Model: b.Model, CatalogDigest: b.CatalogDigest, Resume: resume,
		Instructions: func() (*string, error) { return readInstructions(m.cfg.StateDir, b) },
		Call:         m.openCall(ctx, deadline)})
}

// call sends one request and waits for its answer, the agent's exit, the
// deadline or ctx.
func (m *Manager) call(ctx context.Context, deadline <-chan time.Time, mk func(*acpx.Client) (provider.Call, error)) (provider.Inbound, error) {
	m.mu.Lock()
	p := m.proc
	if p == nil {
		m.mu.Unlock()
		return provider.Inbound{}, provider.NewFailure(provider.ClassAgentDisconnected, nil)
	}
	if p.lost {
		// Gone before the request was written: the same answer as when it
		// ends while the request waits. A spawn failure's exit frame can
		// be read before the first request (it was agent_disconnected
		// about once in 50 runs of TestACP07 instead of agent_spawn_failed).
		// lost implies ended is closed, both under m.mu.
		m.mu.Unlock()
		return provider.Inbound{}, p.startupFailure()
	}
	call, err := mk(m.cl)
	if err != nil {
		m.mu.Unlock()
		return provider.Inbound{}, err
	}
	ch := make(chan provider.Inbound, 1)
	m.waiters[call.ID] = ch
	err = m.commitThenWriteLocked(nil, [][]byte{call.Line})
	m.mu.Unlock()
	if err != nil {
		return provider.Inbound{}, provider.NewFailure(provider.ClassAgentDisconnected, err)
	}
	defer func() {
		m.mu.Lock()
		delete(m.waiters, call.ID)
		m.mu.Unlock()
	}()
	select {
	case in := <-ch:
		return in, in.Err
	case <-p.ended:
		return provider.Inbound{}, p.startupFailure()
	case <-deadline:
		return provider.Inbound{}, errDeadline
	case <-ctx.Done():
		return provider.Inbound{}, fmt.Errorf("await agent answer: %w", ctx.Err())
	}
}

// StartTurn runs turn.start commandID (acp.md §4.3): the command completes
// once the prompt is durably queued; turn.started carries the
// providerTurnId. The write that records the prompt's reservation and
// turn.started also records the completed result (prp.md §7.2 item 8).
// It returns once what it changed is durable (Sync).
func (m *Manager) StartTurn(commandID string, payload json.RawMessage) (json.RawMessage, error) {
	// The workspace baseline is taken before the prompt, bounded, without
	// the lock (workspace.md §4.1).
	out, prompt, err := m.startTurn(commandID, payload, m.baseline())
	if out, err = m.durable(out, err); err != nil || prompt == nil {
		return out, err
	}
	if err := prompt.waitChain(); err != nil {
		return nil, err
	}
	if prompt.writeErr == nil {
		return out, nil
	}
	// The prompt never reached the agent: its loss sequence follows, and
	// the answer says so.
	var accepted map[string]any
	if json.Unmarshal(out, &accepted) != nil {
		return out, nil
	}
	accepted["lossReason"] = string(provider.LossWriteError)
	return jsonenc.MustMarshalEscaped(accepted), nil
}

// startTurn is StartTurn without the wait for durability; it returns the
// batch that writes the prompt, if any.
func (m *Manager) startTurn(commandID string, payload json.RawMessage, base *baselineResult) (json.RawMessage, *batch, error) {
	var p struct {
		Text   string  `json:"text"`
		TurnID *string `json:"turnId"`
	}
	if err := json.Unmarshal(payload, &p); err != nil || strings.TrimSpace(p.Text) == "" {
		return nil, nil, failed("turn.start needs a non-empty text")
	}
	if p.TurnID != nil && !turnIDPattern.MatchString(*p.TurnID) {
		return nil, nil, rejected(CodeInvalidTurnID, "turn.start turnId does not match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cl == nil || m.cl.Record().ACPSessionID == "" || m.st.Closed {
		// After a deliberate stop the session is closed, not lost: a clear
		// refusal, never a loss sequence (tools.md §7).
		return nil, nil, rejected(CodeSessionNotOpen, "no open session; run session.open first")
	}
	if m.cl.ActiveTurn() != "" || m.ws.settling != "" {
		return nil, nil, failed("a turn is already active")
	}
	next := m.st.NextTurn
	var turnID string
	if p.TurnID != nil {
		if m.usedTurnLocked(*p.TurnID) {
			return nil, nil, rejected(CodeInvalidTurnID, "turn.start turnId was already used in this session")
		}
		turnID = *p.TurnID
	} else {
		turnID = m.nextTurnIDLocked()
	}
	loss := m.st.Loss
	if m.proc == nil && loss == "" {
		loss = provider.LossProviderExit // the agent is gone: nothing can answer
	}
	var call provider.Call
	var err error
	if loss == "" {
		call, err = m.driverLocked().Prompt(turnID, p.Text)
		var lost *provider.LostError
		if errors.As(err, &lost) {
			loss, err = lost.Reason, nil
		}
		if err != nil {
			m.st.NextTurn = next
			return nil, nil, failed("the turn could not be started")
		}
	}
	m.recordTurnLocked(turnID)
	// turn.submitted carries no prompt text (workspace.md §8); its batch
	// is durable before the prompt is written.
	evs := append([]provider.Event{provider.TurnSubmitted(turnID)}, m.mapper.TurnStarted(m.cl.Map(), turnID)...)
	evs = append(evs, m.startWorkspaceLocked(turnID, base)...)
	accepted := map[string]any{"status": "accepted", "providerTurnId": turnID}
	if loss != "" {
		// A loss latched between turns fails this one at once (acp.md §5.1).
		evs = append(evs, m.mapper.ChannelLost(m.cl.Map(), turnID, loss)...)
		m.st.Loss = ""
		accepted["lossReason"] = string(loss)
		result := jsonenc.MustMarshalEscaped(accepted)
		if err := m.commitThenWriteEffectLocked(evs, nil, &commandEffect{commandID: commandID, result: result}); err != nil {
			return nil, nil, err
		}
		return result, nil, nil
	}
	m.byRun = false
	result := jsonenc.MustMarshalEscaped(accepted)
	if err := m.commitThenWriteEffectLocked(evs, nil, &commandEffect{commandID: commandID, result: result, prompt: call.Line}); err != nil {
		return nil, nil, err
	}
	m.sampleTurnLocked(turnID)
	return result, m.commits.newest(), nil
}

// steer is turn.steer: ACP v1 cannot steer (acp.md §4.3).
func (m *Manager) steer() (json.RawMessage, error) {
	return nil, failed("ACP v1 agents cannot steer a running turn")
}

// CancelKind selects the cancel command.
type CancelKind int

// Cancel commands (acp.md §4.4).
const (
	Interrupt CancelKind = iota + 1 // turn.interrupt
	StopTurn                        // turn.stop
	RunCancel                       // run.cancel
)

// Cancel runs turn.interrupt, turn.stop or run.cancel (acp.md §4.4):
// session/cancel, cancelled answers to pending permissions, wait up to the
// cancel grace, then stop the agent and set resetOnNextEnsure.
// It returns once what it changed is durable (Sync).
func (m *Manager) Cancel(ctx context.Context, kind CancelKind) (json.RawMessage, error) {
	return m.durable(m.cancelTurn(ctx, kind))
}

// cancelTurn is Cancel without the wait for durability.
func (m *Manager) cancelTurn(ctx context.Context, kind CancelKind) (json.RawMessage, error) {
	reason := cancelReason(kind)
	m.mu.Lock()
	m.cancelBaselineLocked()
	if m.cl == nil || m.cl.ActiveTurn() == "" {
		if kind != StopTurn {
			m.mu.Unlock()
			return jsonenc.MustMarshalEscaped(map[string]any{"status": "already_settled", "reason": reason}), nil
		}
		// turn.stop proves the provider is gone even between turns, and
		// closes the session (tools.md §7).
		res := map[string]any{"status": "stopped", "reason": reason}
		if t := m.lastTurnLocked(); t != "" {
			res["providerTurnId"] = t
		}
		evs, _ := m.closeRequestsLocked(provider.RequestCancelled, "stopped", forgetRequests)
		m.st.Closed = m.cl != nil
		err := m.commitThenWriteLocked(evs, nil)
		m.mu.Unlock()
		if err != nil {
			return nil, err
		}
		res["providerExitConfirmed"] = m.stopAgent(ctx, stopRelease)
		return jsonenc.MustMarshalEscaped(res), nil
	}
	turnID := m.cl.ActiveTurn()
	m.byRun = kind == RunCancel
	m.stopToolCallsLocked() // tools.md §3 item 6
	// Pending runtime requests are cancelled; the agent gets
	// {outcome:"cancelled"} from Client.Cancel (acp.md §4.4 step 2).
	evs, _ := m.closeRequestsLocked(provider.RequestCancelled, "interrupted", keepRequests)
	lines, err := m.driverLocked().Cancel()
	if err != nil {
		m.mu.Unlock()
		return nil, failed("the turn could not be cancelled")
	}
	// A driver whose provider survives an interrupt (Codex: codex.md §3)
	// keeps its session unless the turn does not settle within the grace.
	keep := m.driverLocked().KeepsRunning() && kind != StopTurn
	if !keep {
		m.cl.MarkReset()
		// The agent is stopped below: the session is closed until the next
		// session.open (acp.md §4.4 step 4, tools.md §7).
		m.st.Closed = true
	}
	done := m.turnSettledLocked()
	werr := m.commitThenWriteLocked(evs, lines)
	m.mu.Unlock()
	if werr != nil && !errors.Is(werr, provider.ErrWrite) {
		return nil, werr
	}
	if done != nil {
		t := m.cfg.Clock.NewTimer(m.cfg.CancelGrace)
		select {
		case <-done:
		case <-t.C():
			m.log.Warn("cancelled prompt did not settle within the grace; stopping the agent")
		case <-ctx.Done():
		}
		t.Stop()
	}
	// Settle locally if the agent did not (the grace expired).
	m.mu.Lock()
	if keep && m.cl.ActiveTurn() != turnID {
		m.mu.Unlock()
		return jsonenc.MustMarshalEscaped(map[string]any{"status": "interrupt_requested", "providerTurnId": turnID, "reason": reason}), nil
	}
	if keep {
		m.cl.MarkReset()
		m.st.Closed = true
	}
	if m.cl.ActiveTurn() == turnID {
		out := m.cl.AbandonTurn()
		evs := m.mapper.Settle(m.cl.Map(), provider.SettlementOf(*out, kind == RunCancel))
		m.closeTurnLocked()
		if err := m.commitThenWriteLocked(evs, nil); err != nil {
			m.mu.Unlock()
			return nil, err
		}
	}
	m.mu.Unlock()
	confirmed := m.stopAgent(ctx, stopRelease)
	res := map[string]any{"status": "interrupt_requested", "providerTurnId": turnID, "reason": reason}
	if kind == StopTurn {
		res["status"], res["providerExitConfirmed"] = "stopped", confirmed
	}
	return jsonenc.MustMarshalEscaped(res), nil
}

// CloseSession is session.close: stop the agent, keep the record
// resumable (acpx "release").
// It returns once what it changed is durable (Sync).
func (m *Manager) CloseSession(ctx context.Context) (json.RawMessage, error) {
	return m.durable(m.closeSession(ctx))
}

// closeSession is CloseSession without the wait for durability.
func (m *Manager) closeSession(ctx context.Context) (json.RawMessage, error) {
	m.mu.Lock()
	m.stopToolCallsLocked() // tools.md §3 item 6; this commit records them detached
	evs, _ := m.closeRequestsLocked(provider.RequestCancelled, "session_closed", forgetRequests)
	m.st.Closed = m.cl != nil
	err := m.commitThenWriteLocked(evs, nil)
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	m.stopAgent(ctx, stopRelease)
	return jsonenc.MustMarshalEscaped(map[string]any{"closed": true}), nil
}

// SettleDeadProcess waits, bounded by the resume bound, until a recorded
// agent whose pcwrap is gone has been recorded ended (its files consumed
// once), so a command finished after a restart (the runner's recovery of
// an idempotent command, evidence.go) sees the agent as it really is
// (acp.md §3.5). It returns at once for a live agent or none.
func (m *Manager) SettleDeadProcess(ctx context.Context) {
	t := m.cfg.Clock.NewTimer(m.cfg.ResumeBound)
	defer t.Stop()
	m.awaitDeadProcess(ctx, t.C())
}

// Destroy is session.destroy: session/close if advertised, stop, discard.
// It returns once what it changed is durable (Sync).
func (m *Manager) Destroy(ctx context.Context) (json.RawMessage, error) {
	return m.durable(m.destroy(ctx))
}

// destroy is Destroy without the wait for durability.
func (m *Manager) destroy(ctx context.Context) (json.RawMessage, error) {
	m.mu.Lock()
	canClose := m.proc != nil && !m.proc.lost && m.cl != nil && m.cl.Record().ACPSessionID != "" &&
		m.cl.Capabilities().SessionCapabilities.Close != nil && m.cl.ActiveTurn() == ""
	m.mu.Unlock()
	if canClose {
		t := m.cfg.Clock.NewTimer(m.cfg.StopWait)
		_, _ = m.call(ctx, t.C(), (*acpx.Client).CloseSession) // -32002 and errors are ignored
		t.Stop()
	}
	m.stopAgent(ctx, stopRelease)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cl = nil
	m.st.Loss = ""
	m.st.Closed = true
	if err := m.commitThenWriteLocked([]provider.Event{{EventType: prp.EventSessionClosed, Priority: provider.P0,
		Payload: map[string]any{"reason": "destroyed"}}}, nil); err != nil {
		return nil, err
	}
	return jsonenc.MustMarshalEscaped(map[string]any{"destroyed": true}), nil
}

// Resolve is request.resolve commandID (tools.md §6, §7): it answers the
// agent request behind a pending runtime_request.created, either by
// resolution.action (accept, accept_for_session, decline, cancel: the ACP
// option of that kind) or by a raw response (an optionId, answers, or
// outcome cancelled). The write that records the answer also records the
// completed result {status:"delivered", requestId} (prp.md §7.2 item 8).
// It returns once what it changed is durable (Sync).
func (m *Manager) Resolve(commandID string, payload json.RawMessage) (json.RawMessage, error) {
	return m.durable(m.resolve(commandID, payload))
}

// resolve is Resolve without the wait for durability.
func (m *Manager) resolve(commandID string, payload json.RawMessage) (json.RawMessage, error) {
	var p struct {
		RequestID  string `json:"requestId"`
		TurnID     string `json:"turnId"`
		Resolution *struct {
			Action string `json:"action"`
		} `json:"resolution"`
		Response struct {
			OptionID string `json:"optionId"`
			Outcome  string `json:"outcome"`
			Answers  []struct {
				OptionID string `json:"optionId"`
				Value    string `json:"value"`
			} `json:"answers"`
		} `json:"response"`
	}
	if err := json.Unmarshal(payload, &p); err != nil || p.RequestID == "" {
		return nil, failed("request.resolve needs a requestId")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cl == nil || m.proc == nil || m.proc.lost {
		return nil, failed("no agent request is pending")
	}
	id, req, ok := m.cl.RuntimeRequestFor(p.RequestID)
	if !ok {
		return nil, failed("no agent request is pending under that requestId")
	}
	if d, ok := m.driverLocked().(provider.QuestionAnswerer); ok && d.IsQuestion(req.Method) {
		return m.answerQuestionLocked(commandID, id, req, payload)
	}
	rr := provider.RuntimeRequestOf(req)
	var o provider.PermissionOutcome
	var action string
	if p.Resolution != nil && p.Resolution.Action != "" {
		action = p.Resolution.Action
		if o, ok = provider.ActionOutcome(rr.Choices, action); !ok {
			return nil, failed("request.resolve action is not one of the request's choices")
		}
	} else {
		o = provider.PermissionOutcome{Outcome: "cancelled"}
		opt := p.Response.OptionID
		if opt == "" && len(p.Response.Answers) > 0 {
			opt = p.Response.Answers[0].OptionID
			if opt == "" {
				opt = p.Response.Answers[0].Value
			}
		}
		if act, isAction := rr.Choices[opt]; isAction && opt != provider.ActionCancel {
			opt = act // a choice key given as the option
		}
		if opt != "" && opt != provider.ActionCancel && p.Response.Outcome != "cancelled" {
			o = provider.PermissionOutcome{Outcome: "selected", OptionID: opt}
		}
		action = provider.ActionOf(rr.Choices, o)
	}
	line, err := m.respondPermissionLocked(id, req, o)
	if err != nil {
		return nil, failed("no agent request is pending under that requestId")
	}
	if a, ok := m.driverLocked().(provider.Answerer); ok {
		a.Answer(id, o) // over its own channel, after this commit
		line = nil
	}
	evs := m.mapper.RequestResolved(rr, action)
	result := jsonenc.MustMarshalEscaped(map[string]any{"status": "delivered", "requestId": p.RequestID})
	// The answer is staged before the write that records it delivered, and
	// published after: a restart between the two publishes it.
	if err := m.commitThenWriteEffectLocked(evs, nil, &commandEffect{commandID: commandID, result: result, prompt: line, answer: line != nil}); err != nil {
		return nil, err
	}
	return result, nil
}

// Snapshot reports session.snapshot's fields.
func (m *Manager) Snapshot() (activeTurn string, warm bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cl == nil {
		return "", false
	}
	t := m.cl.ActiveTurn()
	if t == "" {
		// A turn whose end waits for its workspace walk has not ended on
		// the wire: nothing may suspend or rotate the runner before it.
		t = m.ws.settling
	}
	return t, t == "" && m.proc != nil && !m.proc.lost && len(m.cl.PendingPermissions()) == 0
}

// turnSettledLocked returns a channel closed when the active turn settles.
// It is made on demand, so a turn re-adopted after a restart (acp.md
// §3.5) is waited for exactly like one this process started (§4.4 step
// 3). m.mu held, with a turn active.
func (m *Manager) turnSettledLocked() <-chan struct{} {
	if m.turnDone == nil {
		m.turnDone = make(chan struct{})
	}
	return m.turnDone
}

// closeTurnLocked wakes a cancel waiting for the turn to settle.
func (m *Manager) closeTurnLocked() {
	if m.turnDone != nil {
		close(m.turnDone)
		m.turnDone = nil
	}
}

// removeStderrFile removes <uuid>.stderr: it may hold agent output.
func removeStderrFile(stateDir, uuid string) {
	_ = os.Remove(filepath.Join(stateDir, processSessionsDir, uuid+".stderr"))
}
