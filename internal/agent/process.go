package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/procsession"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

const (
	// stopCheck is how often a stop re-checks whether pcwrap is gone.
	stopCheck = 20 * time.Millisecond
	// exitFrameSlack is how long past StopWait a stop still waits for the
	// reader to consume pcwrap's exit frame (inotify plus the 100 ms event
	// poll, with margin) before it cancels the reader.
	exitFrameSlack = time.Second
)

// maxDeferredFiles bounds the event files consumed without a commit of
// their own (beyond: 256 × pcwrap's 64 KiB data frames covers a line of
// provider.MaxLineBytes with room to spare).
const maxDeferredFiles = 256

// maxBatchEvents bounds the events one commit takes from a backlog of event
// files (prp.md §8.5: at most 128 executor events per batch).
const maxBatchEvents = 128

// stopMode says what stopAgent reports once the agent is gone.
type stopMode int

const (
	stopRelease stopMode = iota + 1 // emit harness.exited
	stopQuiet                       // a failed session.open: no provider event
)

// Fixed texts of pcwrap error frames that mean an ACP message was lost
// (pcwrap-protocol.md §6.3; acp.md §3.3: fail the session).
var lostInputPrefixes = []string{"Dropped unreadable stdin file", "Advanced past missing stdin files"}

// reasonAgentOOMKilled is the harness.diagnostic reasonCode of an agent the
// OOM killer took, from pcwrap's error frame (beyond): the turn then fails
// through harness.exited with SIGKILL, and this says why.
const reasonAgentOOMKilled = "agent_oom_killed"

// process is one live pcwrap session. Fields are guarded by Manager.mu,
// except the channels.
type process struct {
	uuid     string
	dir      string
	pid      int                 // pcwrap's pid when this process started it (tests, logs)
	wrapper  procsession.Wrapper // recorded: a restart tells a starting pcwrap from a gone one
	w        *sessiondir.Writer
	fs       *sessiondir.DirFS // events/, held by the reader; nil once it closed
	consumed int64             // last event file fed to the client
	// pending names files fed since the last commit: a file whose content
	// produced nothing to send (typically a chunk of a long line) is not
	// committed on its own; the next commit covers it, then it is deleted.
	// Until then a restart re-reads it from the last committed state.
	pending []string
	// bufEvents, bufLines and bufWakes are a batch: what files already
	// fed produced, committed (and written, and woken) by the next commit.
	// A backlog of files present in one listing costs one state write.
	bufEvents []provider.Event
	bufLines  [][]byte
	bufWakes  []func()
	// recorded is the consumed cursor the last prepared batch recorded.
	recorded int64
	// parked is the pending batch of a turn whose end waits for its
	// after-walk; nil when none (workspace.go).
	parked *parkedBatch
	// nextSeq is the stdin sequence after every line a prepared batch
	// holds: the committed next stdin seq includes lines not yet written
	// (acp.md §3.2).
	nextSeq int64

	lost, stopping, quiet bool
	// deadAtAdoption: a restart found pcwrap already gone; the reader
	// consumes what it left and ends the process at once, and nothing
	// adopts it as a live agent (acp.md §3.5).
	deadAtAdoption bool
	frameExceeded  bool // the agent wrote a stdout line over provider.MaxLineBytes
	exitSeen       bool
	exitCode       *int
	signal         string
	tail           provider.StderrTail

	endOnce    sync.Once
	ended      chan struct{} // the agent is gone (exit frame or loss)
	readerDone chan struct{}
	pcwrapDone chan struct{} // our child pcwrap was reaped; nil when adopted
	cancel     context.CancelFunc
}

func (p *process) end() { p.endOnce.Do(func() { close(p.ended) }) }

// alive reports whether pcwrap still runs. Our own child is reaped a
// moment after it dies, and its agent may outlive it holding the session
// lock: until the reaping, its zombie state tells. An adopted pcwrap is
// known by its recorded identity: it may not hold .pcwrap.lock yet when
// runnerd went away right after starting it. A record without one (an
// older runnerd's) falls back to the lock.
func (p *process) alive() bool {
	if p.pcwrapDone != nil {
		select {
		case <-p.pcwrapDone:
			return false
		default:
			return childRunning(p.pid)
		}
	}
	if p.wrapper.Known() {
		return p.wrapper.Running()
	}
	return wrapperAlive(p.dir)
}

// startupFailure classifies the agent's end during the handshake (acp.md
// §6). Read only after ended is closed.
func (p *process) startupFailure() error {
	if p.frameExceeded {
		return provider.NewFailure(provider.ClassProviderFrameTooLarge, nil)
	}
	if !p.exitSeen {
		return provider.NewFailure(provider.ClassAgentDisconnected, nil)
	}
	code := -1
	if p.exitCode != nil {
		code = *p.exitCode
	}
	return provider.ClassifyStartupExit(code, p.signal != "", true, p.tail.String() != "")
}

// attachLocked opens the writer and starts the reader of a process
// session. cmd is the pcwrap this process started (nil when re-adopted).
// m.mu held.
func (m *Manager) attachLocked(uuid, dir string, cmd *exec.Cmd, wrapper procsession.Wrapper, nextSeq, consumed uint64) (*process, error) {
	if nextSeq == 0 {
		nextSeq = 1
	}
	w, err := sessiondir.OpenWriter(dir, int64(nextSeq), sessiondir.WriterOptions{})
	if err != nil {
		return nil, fmt.Errorf("attach process session: %w", err)
	}
	fs, err := sessiondir.OpenEventsDir(dir)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("attach process session: %w", err)
	}
	_, secrets := acpx.AgentEnv(m.agentName(), m.cfg.Environ)
	p := &process{
		uuid: uuid, dir: dir, wrapper: wrapper, w: w, consumed: int64(consumed), recorded: int64(consumed), nextSeq: int64(nextSeq),
		ended: make(chan struct{}), readerDone: make(chan struct{}),
		tail: provider.StderrTail{Redactor: provider.NewRedactor(secrets...)},
	}
	if cmd != nil {
		p.pid = cmd.Process.Pid
		p.pcwrapDone = make(chan struct{})
		go func() { // reaps our child; ends when pcwrap does
			_ = cmd.Wait()
			close(p.pcwrapDone)
		}()
	}
	ctx, cancel := context.WithCancel(m.ctx)
	p.cancel = cancel
	p.fs = fs
	m.proc = p
	m.wg.Add(1)
	go m.readLoop(ctx, p, fs)
	return p, nil
}

func (m *Manager) agentName() string {
	if m.st.Binding != nil {
		return m.st.Binding.Agent
	}
	return ""
}

// readLoop consumes the event files of p exactly once, in order, woken by
// inotify and a 100 ms poll (acp.md §3.3), until the agent is gone.
func (m *Manager) readLoop(ctx context.Context, p *process, fs *sessiondir.DirFS) {
	defer m.wg.Done()
	defer close(p.readerDone)
	defer func() {
		m.mu.Lock()
		p.fs = nil
		m.mu.Unlock()
		_ = m.commits.sync() // the batches that delete files through fs
		fs.Close()
	}()
	m.mu.Lock()
	start := p.consumed
	m.mu.Unlock()
	sweepConsumed(fs, start, m)
	// Keep: the reader never deletes; a file is deleted once a commit
	// covers it (removeCovered), so uncommitted files survive a crash.
	lfs := &listingFS{DirFS: fs}
	r := sessiondir.NewEventReader(sessiondir.EventReaderOptions{FS: lfs, Delivered: start, Keep: true, Logger: m.log})
	var wake <-chan struct{}
	if w, err := sessiondir.WatchQueue(false, filepath.Join(p.dir, sessiondir.EventsDir)); err == nil {
		defer w.Close()
		wake = w.C
	}
	tick := m.cfg.Clock.NewTicker(eventPoll)
	defer tick.Stop()
	deliver := func(ev sessiondir.Event) error { return m.deliver(ctx, p, ev, ev.Seq < lfs.last) }
	for {
		stop, err := r.Cycle(deliver)
		if ctx.Err() != nil {
			break
		}
		if err != nil || stop || m.isLost(p) {
			if err != nil && !m.isStopping(p) {
				m.log.Warn("process session unreadable", "err", err)
				m.loseAndCommit(p, provider.LossTransportClosed)
			}
			break
		}
		if m.isDeadAtAdoption(p) {
			// No poll period to wait for: pcwrap was gone before this
			// runnerd started.
			m.wrapperGone(p, r, deliver)
			continue
		}
		select {
		case <-ctx.Done():
		case _, ok := <-wake:
			if !ok {
				wake = nil // the watch ended: the poll alone goes on
			}
		case <-tick.C():
			if !p.alive() {
				m.wrapperGone(p, r, deliver)
			}
		case <-p.pcwrapDone:
		}
	}
	if m.ctx.Err() != nil {
		return // runnerd is going away: the agent stays for re-adoption
	}
	m.finishProcess(p)
}

// wrapperGone ends a process whose pcwrap no longer runs: take the files
// it left, then it is a loss unless its exit frame was among them or
// runnerd was stopping it.
func (m *Manager) wrapperGone(p *process, r *sessiondir.EventReader, deliver func(sessiondir.Event) error) {
	_, _ = r.Cycle(deliver)
	if !m.isEnded(p) && !m.isStopping(p) {
		m.loseAndCommit(p, provider.LossTransportClosed)
	}
	m.mu.Lock()
	p.lost = true
	p.end()
	m.mu.Unlock()
}

func (m *Manager) isDeadAtAdoption(p *process) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return p.deadAtAdoption
}

// awaitDeadProcess waits, bounded by deadline and ctx, until the reader of
// a process whose pcwrap is gone has consumed what it left and recorded
// the agent ended, so a command never takes a dead agent for a live one
// (acp.md §3.5). It returns at once for a live process or none.
func (m *Manager) awaitDeadProcess(ctx context.Context, deadline <-chan time.Time) {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil || p.alive() {
		return
	}
	select {
	case <-p.readerDone:
	case <-deadline:
	case <-ctx.Done():
	}
}

func (m *Manager) isLost(p *process) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return p.lost
}

func (m *Manager) isStopping(p *process) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return p.stopping
}

func (m *Manager) isEnded(p *process) bool {
	select {
	case <-p.ended:
		return true
	default:
		return false
	}
}

func (m *Manager) loseAndCommit(p *process, reason provider.LossReason) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.commitThenWriteLocked(m.lostLocked(p, reason), nil); err != nil {
		m.log.Error("commit channel loss", "err", err)
	}
}

// deliver handles one event file: parse, map, commit with the consumed
// sequence in one write, then (after return) the reader deletes it.
func (m *Manager) deliver(ctx context.Context, p *process, ev sessiondir.Event, more bool) error {
	if err := ctx.Err(); err != nil {
		return err // stopping: leave the rest unread
	}
	// Room first: the flow control below sees the reader's last batch
	// only once it is durable.
	if err := m.commits.awaitRoom(ctx); err != nil {
		return err
	}
	if err := m.awaitDrained(ctx); err != nil {
		return err
	}
	defer m.commits.drain() // after the unlock below: the batch this file made
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != p {
		return sessiondir.ErrStopReading
	}
	out := m.interpretLocked(p, ev)
	if out.gone || m.proc != p {
		return sessiondir.ErrStopReading
	}
	p.bufferLocked(ev, out)
	if t, _ := m.endingTurnLocked(p.bufEvents); t != nil {
		// This reader takes no further file during the walk.
		err := m.walkEndingTurnLocked(p, t, m.parkPendingLocked(p))
		if m.proc != p {
			return sessiondir.ErrStopReading
		}
		if err != nil {
			return err
		}
		if out.stop {
			return sessiondir.ErrStopReading
		}
		return nil
	}
	if p.mayDeferCommitLocked(out.stop, more) {
		return nil
	}
	if err := m.commitFromReaderLocked(); err != nil {
		return err
	}
	if out.stop {
		return sessiondir.ErrStopReading
	}
	return nil
}

// commitFromReaderLocked prepares the reader's batch for the reader to
// settle itself (deliver drains after it unlocks mu): on the agent's hot
// path the durable write happens on the goroutine that read the file.
func (m *Manager) commitFromReaderLocked() error {
	m.settleInline = true
	defer func() { m.settleInline = false }()
	return m.commitThenWriteLocked(nil, nil)
}

// eventOutcome is what one event file produces: events to commit, stdin
// lines to write after the commit, wakes to run, and whether it was the
// last file (the child exited).
type eventOutcome struct {
	evs   []provider.Event
	lines [][]byte
	wake  []func()
	stop  bool
	// gone: the process or its client changed while a client operation
	// ran without the lock; the file is left unconsumed.
	gone bool
}

// interpretLocked maps one pcwrap frame to its outcome. Stderr goes to the
// tail only; stdout feeds the ACP client while the channel is sound.
func (m *Manager) interpretLocked(p *process, ev sessiondir.Event) eventOutcome {
	var out eventOutcome
	switch ev.Frame.Type {
	case frame.FrameData:
		if ev.Frame.Stream == frame.StreamStderr {
			_, _ = p.tail.Write(ev.Frame.Data)
			break
		}
		if p.lost || m.cl == nil {
			break
		}
		m.feedLocked(p, ev.Frame.Data, &out)
	case frame.FrameExit:
		p.exitSeen, p.exitCode, p.signal = true, ev.Frame.Code, ev.Frame.Signal
		out.evs = append(out.evs, m.exitedLocked(p)...)
		out.stop = true
	case frame.FrameError:
		if p.stopping {
			break
		}
		out.evs = m.pcwrapErrorLocked(p, ev.Frame.Message)
	}
	return out
}

// feedLocked hands stdout bytes to the ACP client and maps every complete
// message; a framing fault loses the channel after the messages before it.
//
// A client operation runs with m.mu released (runClientOpLocked); if p
// stops being the live process meanwhile, or its channel is lost, the
// rest of the data is dropped (out.gone: the file stays unconsumed).
func (m *Manager) feedLocked(p *process, data []byte, out *eventOutcome) {
	msgs, ferr := m.driverLocked().Feed(data)
	for _, in := range msgs {
		e, l, w, op := m.handleInbound(p, in)
		if op != nil {
			var ok bool
			if l, ok = m.runClientOpLocked(p, op); !ok || p.lost {
				out.gone = !ok
				return
			}
		}
		out.evs, out.lines = append(out.evs, e...), append(out.lines, l...)
		if w != nil {
			out.wake = append(out.wake, w)
		}
	}
	if ferr != nil {
		if errors.Is(ferr, provider.ErrFrameExceeded) {
			p.frameExceeded = true
			fmt.Fprintln(m.cfg.Stderr, provider.ErrFrameExceeded.Error())
		}
		out.evs = append(out.evs, m.lostLocked(p, provider.LossReasonOf(ferr))...)
	}
}

// pcwrapErrorLocked reports a pcwrap error frame as a diagnostic, and as a
// channel loss when its message says stdin input was lost.
func (m *Manager) pcwrapErrorLocked(p *process, message string) []provider.Event {
	code := "pcwrap_error"
	if strings.HasPrefix(message, frame.OOMKilledPrefix) {
		code = reasonAgentOOMKilled
	}
	evs := []provider.Event{{EventType: prp.EventHarnessDiagnostic, Priority: provider.P1,
		Payload: map[string]any{"reasonCode": code}}}
	for _, pre := range lostInputPrefixes {
		if strings.HasPrefix(message, pre) {
			evs = append(evs, m.lostLocked(p, provider.LossOther)...)
		}
	}
	return evs
}

// bufferLocked records ev as consumed and adds its outcome to the batch the
// next commit takes.
func (p *process) bufferLocked(ev sessiondir.Event, out eventOutcome) {
	p.consumed = ev.Seq
	p.pending = append(p.pending, ev.Name)
	if p.lost {
		out.lines = nil // nothing more reaches a lost agent
	}
	p.bufEvents = append(p.bufEvents, out.evs...)
	p.bufLines = append(p.bufLines, out.lines...)
	p.bufWakes = append(p.bufWakes, out.wake...)
}

// mayDeferCommitLocked reports whether the commit can wait for a later file.
// Defer the commit while more files of this listing wait (a backlog is one
// write) or while nothing needs sending (a long line costs one write, not
// one per 64 KiB chunk): re-reading uncommitted files after a crash yields
// the same state, and none is deleted before its commit.
func (p *process) mayDeferCommitLocked(stop, more bool) bool {
	quiet := len(p.bufEvents) == 0 && len(p.bufLines) == 0 && len(p.bufWakes) == 0
	return !stop && !p.lost && len(p.pending) < maxDeferredFiles && len(p.bufEvents) < maxBatchEvents &&
		len(p.bufWakes) == 0 && (quiet || more)
}

// awaitDrained is PRP flow control (prp.md §8.5): provider output is taken
// only once everything sent is acknowledged. It wakes on the sink's drain
// signal, which the ACK path fires on a routine no command handler blocks
// (prp.Client's ack routine), so a handler waiting on the agent never holds
// the gate shut. Once Shutdown begins the gate stays open (Shutdown says
// why).
func (m *Manager) awaitDrained(ctx context.Context) error {
	for {
		sig := m.cfg.Sink.DrainSignal()
		if m.cfg.Sink.Drained() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.shuttingDown:
			return nil
		case <-sig:
		}
	}
}

// handleInbound maps one agent message to events, answer lines and a
// waiter wake-up (run after the commit), or to a client operation the
// caller runs without m.mu (runClientOpLocked). m.mu held.
func (m *Manager) handleInbound(p *process, in provider.Inbound) ([]provider.Event, [][]byte, func(), *clientOp) {
	switch in.Kind {
	case provider.KindResponse:
		id, _ := strconv.ParseInt(string(in.ID), 10, 64)
		if ch, ok := m.waiters[id]; ok {
			delete(m.waiters, id)
			return nil, nil, func() { ch <- in }, nil
		}
	case provider.KindRequest:
		if evs, lines, ok := m.driverLocked().HandleRequest(in); ok {
			// Commit the file that carried the request now, with what the
			// driver linked to it, so a restart never reads it again after
			// its answer (a quiet file's commit may otherwise wait).
			return evs, lines, func() {}, nil
		}
		if in.Method == provider.MethodRequestPermission && in.Permission != nil {
			e, l, w := m.permissionLocked(in)
			return e, l, w, nil
		}
		if l, op, ok := m.clientFSLocked(in); ok {
			return nil, l, nil, op
		}
		if l, op, ok := m.terminalLocked(in); ok {
			return nil, l, nil, op
		}
		// Not advertised, or no terminal capability (acp.md §2.2).
		if l, err := m.cl.RespondError(in.ID, provider.CodeMethodNotFound, "method not found"); err == nil {
			return nil, [][]byte{l}, nil, nil
		}
	case provider.KindRequestResolved:
		// The provider closed its own request: its runtime request is
		// cancelled, nothing is answered (codex.md §4).
		var evs []provider.Event
		if r, ok := m.cl.AgentRequest(in.ID); ok && r.RuntimeRequestID != "" {
			evs = m.mapper.RequestClosed(provider.RuntimeRequestOf(r), provider.RequestCancelled, reasonProviderResolved)
		}
		m.cl.ForgetAgentRequest(in.ID)
		return evs, nil, nil, nil
	case provider.KindCancelRequest:
		evs := m.withdrawnLocked(in.ID)
		if l, err := m.cl.RespondError(in.ID, provider.CodeRequestCancelled, "request cancelled"); err == nil {
			return evs, [][]byte{l}, nil, nil
		}
		return evs, nil, nil, nil
	case provider.KindUpdate:
		evs, goalOnly := m.goalUpdateLocked(*in.Update)
		if !goalOnly {
			evs = append(m.mapper.Update(m.cl.Map(), in.TurnID, *in.Update), evs...)
			evs = append(evs, m.workspaceUpdateLocked(in.TurnID, *in.Update)...)
		}
		return evs, nil, nil, nil
	case provider.KindEvents:
		return in.Events, nil, nil, nil
	case provider.KindTurnSettled:
		// A runtime request still open when its turn completes expires
		// (tools.md §7); the agent gets a cancelled answer.
		evs, lines := m.closeRequestsLocked(provider.RequestExpired, reasonTurnCompleted, answerRequests)
		evs = append(evs, m.mapper.Settle(m.cl.Map(), provider.SettlementOf(*in.Outcome, m.byRun))...)
		m.closeTurnLocked()
		return evs, lines, nil, nil
	}
	return nil, nil, nil, nil
}

// exitedLocked maps pcwrap's exit frame (acp.md §5). m.mu held.
func (m *Manager) exitedLocked(p *process) []provider.Event {
	defer p.end()
	wasLost := p.lost
	p.lost = true
	var evs []provider.Event
	switch {
	case p.quiet:
	case p.stopping && m.cl != nil && m.cl.ActiveTurn() != "":
		evs = append([]provider.Event{exitedEvent(p)}, m.endTurnLocked(p)...)
	case p.stopping, wasLost:
		evs = []provider.Event{exitedEvent(p)}
	case m.cl == nil || m.cl.Record().ACPSessionID == "":
		// The handshake fails with a startup class; no provider event.
	default:
		turn := m.cl.ActiveTurn()
		evs, _ = m.closeRequestsLocked(provider.RequestExpired, reasonAgentLost, forgetRequests)
		m.cl.AbandonTurn()
		_ = m.cl.EndOfStream()
		evs = append(evs, m.mapper.AgentExited(m.cl.Map(), turn, p.exitCode, p.signal)...)
		if turn == "" {
			m.st.Loss = provider.LossProviderExit
		}
		m.closeTurnLocked()
	}
	return evs
}

func exitedEvent(p *process) provider.Event {
	pl := map[string]any{"exitCode": nil}
	if p.exitCode != nil {
		pl["exitCode"] = *p.exitCode
	}
	if p.signal != "" {
		pl["signal"] = p.signal
	}
	return provider.Event{EventType: prp.EventHarnessExited, Priority: provider.P0, Payload: pl}
}

// lostLocked latches a channel loss (acp.md §5.1): an active turn ends at
// once with harness.diagnostic{lossReason}, turn.failed, at most one
// run.result.proposed (tools.md §4) and one run.terminal, and the reader's finish stops
// the agent. Ending at once keeps well inside the 30 s loss deadline: every
// loss reason leaves a channel that can no longer carry the prompt's
// answer (the process or directory is gone, a write failed, or the stdout
// stream is broken for good). A loss between turns fails the next turn.
// m.mu held.
func (m *Manager) lostLocked(p *process, reason provider.LossReason) []provider.Event {
	if p.lost {
		return nil
	}
	p.lost = true
	defer p.end()
	if m.cl == nil || p.stopping {
		return nil
	}
	m.cl.LatchLoss(reason)
	evs, _ := m.closeRequestsLocked(provider.RequestExpired, reasonAgentLost, forgetRequests)
	if t := m.cl.ActiveTurn(); t != "" {
		m.cl.AbandonTurn()
		m.closeTurnLocked()
		return append(evs, m.mapper.ChannelLost(m.cl.Map(), t, reason)...)
	}
	if m.cl.Record().ACPSessionID != "" {
		m.st.Loss = reason
	}
	return evs
}

// goneLocked marks a recorded agent gone without a live process. m.mu held.
func (m *Manager) goneLocked(reason provider.LossReason) []provider.Event {
	evs, _ := m.closeRequestsLocked(provider.RequestExpired, reasonAgentLost, forgetRequests)
	if t := m.cl.ActiveTurn(); t != "" {
		m.cl.AbandonTurn()
		evs = append(evs, m.mapper.ChannelLost(m.cl.Map(), t, reason)...)
	} else if m.cl.Record().ACPSessionID != "" {
		m.st.Loss = reason
	}
	m.cl.ResetProcess()
	m.proc = nil
	return evs
}

// finishProcess ends a process session whose agent is gone or stopping:
// ask pcwrap to stop if it still runs, wait for it (bounded), apply the
// .pcwrap.child rule when pcwrap died without an exit frame, remove the
// session directory and forget the process.
func (m *Manager) finishProcess(p *process) {
	_ = m.commits.sync() // the lines prepared for p go first; its writer closes below
	ctx := context.Background()
	m.mu.Lock()
	exit := p.exitSeen
	m.mu.Unlock()
	if p.alive() && !exit {
		_, _ = p.w.StdinEnd(ctx)
		_, _ = p.w.Shutdown(ctx)
	}
	m.waitGone(p)
	// pcwrap kills the group only while the leader is unreaped; a member
	// that outlived its leader (scenario 17), or a group whose pcwrap died
	// without an exit frame (acp.md §5.1), gets the guarded SIGKILL of the
	// .pcwrap.child rule: only members not older than the recorded start.
	if !p.alive() {
		if killed, err := killOrphanGroup(p.dir); killed {
			m.log.Warn("killed what was left of the agent's process group", "exitFrame", exit)
		} else if err != nil && !exit {
			m.log.Info("no agent group to clean up", "err", err)
		}
	}
	_ = p.w.Close()
	if err := os.RemoveAll(p.dir); err != nil {
		m.log.Warn("remove process session dir", "err", err)
	}
	m.terms.ReleaseAll() // the session ended: its terminals are killed, then released (tools.md §8)
	removeStderrFile(m.cfg.StateDir, p.uuid)
	m.closeBridgeOf(p) // the provider session ends with its agent
	m.mu.Lock()
	defer m.mu.Unlock()
	p.end()
	if m.proc != p {
		return
	}
	// A turn the agent never settled (the stop outlived its wait) still
	// ends, never silently.
	evs := append(p.bufEvents, m.endTurnLocked(p)...) // the pending batch first
	wakes := p.bufWakes
	p.bufEvents, p.bufLines, p.bufWakes = nil, nil, nil // no line reaches a gone agent
	defer func() {
		for _, w := range wakes {
			w()
		}
	}()
	m.proc = nil
	m.commits.forget(p)
	if m.cl != nil {
		m.cl.ResetProcess()
	}
	if err := m.commitThenWriteLocked(evs, nil); err != nil {
		m.log.Error("commit agent gone", "err", err)
	}
}

// endTurnLocked ends the active turn of an agent that is being stopped or
// is gone: interrupted when runnerd stopped it (session.close, an orderly
// runnerd stop), else the transport_closed loss sequence. m.mu held.
func (m *Manager) endTurnLocked(p *process) []provider.Event {
	if m.cl == nil || m.cl.ActiveTurn() == "" {
		return nil
	}
	turn := m.cl.ActiveTurn()
	defer m.closeTurnLocked()
	if !p.stopping {
		m.cl.AbandonTurn()
		return m.mapper.ChannelLost(m.cl.Map(), turn, provider.LossTransportClosed)
	}
	out := m.cl.AbandonTurn()
	s := provider.SettlementOf(*out, false)
	s.Ending, s.Class, s.Reason = provider.EndInterrupted, "", "agent_stopped"
	return m.mapper.Settle(m.cl.Map(), s)
}

// waitGone waits, bounded by StopWait, until pcwrap no longer runs.
func (m *Manager) waitGone(p *process) {
	t := m.cfg.Clock.NewTimer(m.cfg.StopWait)
	defer t.Stop()
	tick := m.cfg.Clock.NewTicker(stopCheck)
	defer tick.Stop()
	for p.alive() {
		select {
		case <-t.C():
			m.log.Warn("pcwrap did not exit within the stop wait; removing its session directory")
			return
		case <-p.pcwrapDone:
		case <-tick.C():
		}
	}
}

// stopAgent stops the live agent (acp.md §3.6): stdinEnd, shutdown, wait
// for the exit frame up to StopWait, remove the session directory. runnerd
// sends no signal. It reports whether the exit frame was consumed.
func (m *Manager) stopAgent(ctx context.Context, mode stopMode) bool {
	m.mu.Lock()
	p := m.proc
	if p == nil {
		m.mu.Unlock()
		return true
	}
	p.stopping = true
	p.quiet = mode == stopQuiet
	ended := m.isEnded(p)
	m.mu.Unlock()
	if !ended {
		_ = m.commits.sync() // stdinEnd follows every line already prepared
		_, _ = p.w.StdinEnd(ctx)
		_, _ = p.w.Shutdown(ctx)
	}
	t := m.cfg.Clock.NewTimer(m.cfg.StopWait + exitFrameSlack)
	select {
	case <-p.readerDone:
	case <-t.C():
		p.cancel() // the reader finishes the process on its way out
		<-p.readerDone
	}
	t.Stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	return p.exitSeen
}

// sweepConsumed deletes files at or below the committed sequence: a crash
// between a commit and the deletion left them (acp.md §3.3: deleted unread).
func sweepConsumed(fs *sessiondir.DirFS, upTo int64, m *Manager) {
	names, err := fs.List()
	if err != nil {
		return
	}
	for _, n := range names {
		if seq, ok := sessiondir.ParseSeq(n); ok && seq > 0 && seq <= upTo {
			if err := fs.Remove(n); err != nil {
				m.log.Warn("remove consumed event file", "file", n, "err", err)
			}
		}
	}
}

// listingFS remembers the highest sequence of the latest listing, so the
// reader knows whether more files of a backlog follow the one it delivers.
// Used from the reader goroutine only.
type listingFS struct {
	*sessiondir.DirFS
	last int64
}

// List implements sessiondir.EventFS.
func (l *listingFS) List() ([]string, error) {
	names, err := l.DirFS.List()
	l.last = 0
	for _, n := range names {
		if seq, ok := sessiondir.ParseSeq(n); ok && seq > l.last {
			l.last = seq
		}
	}
	return names, err
}
