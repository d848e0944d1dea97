package agent

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/workspace"
)

// Diagnostic codes of the workspace (workspace.md §2, §3.4, §4).
const (
	diagWorkspaceUnavailable = "workspace_unavailable"
	diagWalkCapped           = "workspace_walk_capped"
	diagBaselineIncomplete   = "workspace_baseline_incomplete"
	diagEventTooLarge        = "workspace_event_too_large"
)

// frameOverheadBytes is the room kept in a frame for the envelope around
// a workspace payload (ids, type, timestamps: well under 1 KiB).
const frameOverheadBytes = 1024

// wsState is the workspace side of the session (Manager.mu guards it).
type wsState struct {
	// cwd is the descriptor cwd root was opened for; root is nil when it
	// was unavailable (reported once per cwd).
	cwd      string
	root     *workspace.Root
	reported bool
	// turn is the active turn's tracker; nil between turns, for a turn
	// without a root, and once its end events were prepared.
	turn *wsTurn
	// cancelBaseline cancels a running baseline walk (turn.interrupt).
	cancelBaseline context.CancelFunc
	// last is the newest complete snapshot of root: the next baseline's
	// stat cache, so a turn that touches nothing reads no file.
	last *workspace.Snapshot
	// settling is the turn whose end events wait for its after-walk
	// (the lock is released meanwhile); Snapshot still reports it active.
	settling string
	// readied are the cwds workspace.ready was sent for by this process
	// (§6: once per runnerd process and root).
	readied map[string]bool
}

// wsTurn tracks one provider turn's workspace.
type wsTurn struct {
	turnID   string
	root     *workspace.Root
	cwd      string
	baseline *workspace.Snapshot // nil: none was taken
	harness  *workspace.Harness
	lastSent time.Time
	// calls are the turn's ACP tool calls by id; message is the latest
	// assistant message's text.
	calls   map[string]*wsCall
	message string
}

// baselineResult is what StartTurn's walk found, before the prompt.
type baselineResult struct {
	cwd  string
	root *workspace.Root
	snap *workspace.Snapshot
	err  error // the root is unavailable
}

// baseline snapshots the bound cwd before a turn starts (§4.1), without
// holding m.mu across the walk; turn.interrupt cancels it. It returns nil
// when no turn can start (startTurn then refuses) or nothing is bound.
func (m *Manager) baseline() *baselineResult {
	m.mu.Lock()
	if m.st.Binding == nil || m.st.Binding.Cwd == "" || m.cl == nil || m.cl.ActiveTurn() != "" {
		m.mu.Unlock()
		return nil
	}
	cwd := m.st.Binding.Cwd
	var root *workspace.Root
	var prev *workspace.Snapshot
	if m.ws.cwd == cwd {
		root, prev = m.ws.root, m.ws.last
	}
	known := m.ws.cwd == cwd
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.WorkspaceWalkTimeout)
	m.ws.cancelBaseline = cancel
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.ws.cancelBaseline = nil
		m.mu.Unlock()
		cancel()
	}()
	res := &baselineResult{cwd: cwd, root: root}
	if !known {
		res.root, res.err = workspace.Open(cwd, m.cfg.StateDir)
	}
	if res.root == nil {
		if res.err == nil {
			res.err = workspace.ErrUnavailable
		}
		return res
	}
	res.snap = res.root.Walk(ctx, prev)
	if errors.Is(ctx.Err(), context.Canceled) && m.ctx.Err() == nil {
		res.snap.Incomplete = "cancelled"
	}
	return res
}

// cancelBaselineLocked stops a running baseline walk. m.mu held.
func (m *Manager) cancelBaselineLocked() {
	if m.ws.cancelBaseline != nil {
		m.ws.cancelBaseline()
	}
}

// startWorkspaceLocked begins tracking turnID with the baseline b; it
// returns the diagnostics the turn start carries. m.mu held.
func (m *Manager) startWorkspaceLocked(turnID string, b *baselineResult) []provider.Event {
	m.ws.turn = nil
	if b == nil {
		return nil
	}
	var evs []provider.Event
	if m.ws.cwd != b.cwd {
		m.ws.cwd, m.ws.root, m.ws.reported, m.ws.last = b.cwd, b.root, false, nil
	}
	if b.root == nil {
		if !m.ws.reported {
			m.ws.reported = true
			evs = append(evs, wsDiagnostic(turnID, diagWorkspaceUnavailable, unavailableMessage))
		}
		return evs
	}
	t := &wsTurn{turnID: turnID, root: b.root, cwd: b.cwd, calls: map[string]*wsCall{},
		harness: workspace.NewHarness(turnID, workspace.NewBudget(workspace.WorkspaceDiffBudget, m.cfg.Clock.Now), m.cfg.Redact)}
	switch {
	case b.snap.Complete():
		t.baseline, m.ws.last = b.snap, b.snap
	case b.snap.Incomplete == "cancelled":
		evs = append(evs, wsDiagnostic(turnID, diagBaselineIncomplete, "the workspace baseline was cancelled; the turn has no verified diff"))
	default:
		evs = append(evs, wsDiagnostic(turnID, diagWalkCapped, "the workspace baseline stopped at "+b.snap.Incomplete+"; the turn has no verified diff"))
	}
	m.ws.turn = t
	return evs
}

// workspaceReadyLocked is what a bound descriptor reports (§6, §8): the
// preparing phase and workspace.ready the first time this process binds a
// cwd that exists; for one that does not (rootErr), the one
// workspace_unavailable diagnostic, and no workspace event later for it.
// m.mu held.
func (m *Manager) workspaceReadyLocked(cwd string, rootErr error) []provider.Event {
	if rootErr != nil {
		if m.ws.cwd == cwd && m.ws.root == nil && m.ws.reported {
			return nil
		}
		m.ws.cwd, m.ws.root, m.ws.reported, m.ws.last = cwd, nil, true, nil
		return []provider.Event{wsDiagnostic("", diagWorkspaceUnavailable, unavailableMessage)}
	}
	if m.ws.cwd == cwd && m.ws.root == nil {
		m.ws.cwd, m.ws.reported = "", false // it exists now: the next baseline opens it
	}
	if m.ws.readied[cwd] {
		return nil
	}
	if m.ws.readied == nil {
		m.ws.readied = map[string]bool{}
	}
	m.ws.readied[cwd] = true
	return provider.WorkspaceReady(cwd)
}

// unavailableMessage is workspace_unavailable's text.
const unavailableMessage = "the run's working directory is missing or not a directory; no workspace events"

func wsDiagnostic(turnID, code, message string) provider.Event {
	return provider.Event{EventType: prp.EventHarnessDiagnostic, Priority: provider.P1, TurnID: turnID,
		Payload: map[string]any{"code": code, "message": message}}
}

// Harness-reported tool kinds (§3.2): only these change files.
var changeKinds = map[string]bool{"edit": true, "delete": true, "move": true}

// maxTrackedCalls bounds the tool calls a turn's tracker remembers; a
// later call is not reported (the verified diff still sees its change).
const maxTrackedCalls = 4096

// wsCall is what a turn's tracker knows of one ACP tool call: its kind
// (an update may omit it), its locations and whether it sent a diff.
type wsCall struct {
	kind   string
	locs   []string
	diffed bool
}

// workspaceUpdateLocked feeds an ACP tool call to the turn's harness set
// and returns a snapshot event when one is due (§3.2, §3.3): diff
// content at once; the locations of an edit, delete or move call that
// completed without diff content. m.mu held.
func (m *Manager) workspaceUpdateLocked(turnID string, u provider.SessionUpdate) []provider.Event {
	t := m.ws.turn
	if t == nil || t.turnID != turnID {
		return nil
	}
	if u.Kind == provider.UpdateTurnDiff {
		// Codex's own diff of the turn so far (§3.2): it replaces the set.
		t.harness.ReplaceGit(u.TurnDiff, func(p string) (string, bool) { return t.root.WirePath(p, t.cwd) })
		return m.harnessDueLocked(t, false)
	}
	if u.Kind != provider.UpdateToolCall && u.Kind != provider.UpdateToolCallUpdate {
		return nil
	}
	c := t.calls[u.ToolCallID]
	if c == nil {
		if len(t.calls) >= maxTrackedCalls {
			return nil
		}
		c = &wsCall{}
		t.calls[u.ToolCallID] = c
	}
	if u.ToolKind != "" {
		c.kind = u.ToolKind
	}
	if len(u.Locations) > 0 {
		c.locs = c.locs[:0]
		for _, l := range u.Locations {
			c.locs = append(c.locs, l.Path)
		}
	}
	if !changeKinds[c.kind] {
		return nil
	}
	for _, content := range u.ToolOutput {
		if content.Type != "diff" {
			continue
		}
		if p, ok := t.root.WirePath(content.Path, t.cwd); ok {
			t.harness.AddDiff(p, content.OldText, content.NewText)
			c.diffed = true
		}
	}
	if u.Status == "completed" && !c.diffed {
		for _, l := range c.locs {
			if p, ok := t.root.WirePath(l, t.cwd); ok {
				t.harness.AddLocation(p, c.kind)
			}
		}
		c.diffed = true // reported once
	}
	return m.harnessDueLocked(t, false)
}

// harnessDueLocked is the pending harness snapshot when at least
// HarnessInterval passed since the last one, or when flush is set.
func (m *Manager) harnessDueLocked(t *wsTurn, flush bool) []provider.Event {
	now := m.cfg.Clock.Now()
	if !t.harness.Dirty() || (!flush && t.harness.Reported() && now.Sub(t.lastSent) < workspace.HarnessInterval) {
		return nil
	}
	t.lastSent = now
	cs := t.harness.Snapshot()
	return m.changeSetEvents(t.turnID, cs, prp.EventWorkspaceChangeUpdated, provider.P2)
}

// changeSetEvents is cs as one event, bounded to the frame (§3.4); one
// that cannot fit becomes a diagnostic.
func (m *Manager) changeSetEvents(turnID string, cs workspace.ChangeSet, eventType string, prio int) []provider.Event {
	if !cs.Bound(m.workspacePayloadBound()) {
		return []provider.Event{wsDiagnostic(turnID, diagEventTooLarge, "a workspace change set does not fit the frame limit")}
	}
	return []provider.Event{{EventType: eventType, Priority: prio, TurnID: turnID, Payload: cs.Payload()}}
}

// workspacePayloadBound is the encoded size a workspace payload fits now.
func (m *Manager) workspacePayloadBound() int {
	if m.cfg.WorkspacePayloadBound != nil {
		return min(m.cfg.WorkspaceMaxPayloadBytes, m.cfg.WorkspacePayloadBound())
	}
	return m.cfg.WorkspaceMaxPayloadBytes
}

// observeLocked records the turn's latest assistant message from evs.
func (t *wsTurn) observe(evs []provider.Event) {
	for _, e := range evs {
		if e.EventType == prp.EventItemCompleted && e.TurnID == t.turnID {
			if k, _ := e.Payload["kind"].(string); k == "assistant_message" {
				t.message, _ = e.Payload["text"].(string)
			}
		}
	}
}

// turnEnd is the index of the first event that ends turnID, or -1.
func turnEnd(evs []provider.Event, turnID string) int {
	return slices.IndexFunc(evs, func(e provider.Event) bool {
		return e.TurnID == turnID && prp.EventRuleOf(e.EventType).EndsTurn
	})
}

// endingTurnLocked returns the tracked turn when evs end it, claiming it
// (m.ws.turn becomes nil) and recording its last message. m.mu held.
func (m *Manager) endingTurnLocked(evs []provider.Event) (*wsTurn, int) {
	t := m.ws.turn
	if t == nil {
		return nil, -1
	}
	i := turnEnd(evs, t.turnID)
	if i < 0 {
		t.observe(evs)
		return nil, -1
	}
	t.observe(evs[:i])
	m.ws.turn = nil
	return t, i
}

// workspaceFallbackLocked inserts, before the end of a tracked turn that
// evs end, what a turn settled under the lock sends: the pending harness
// snapshot and the harness set recorded as is (§4.6); no walk, no file
// references (they need reads the lock must not wait for). m.mu held.
func (m *Manager) workspaceFallbackLocked(evs []provider.Event) []provider.Event {
	t, i := m.endingTurnLocked(evs)
	if t == nil {
		return evs
	}
	return slices.Insert(evs, i, m.settleEvents(t, nil, nil)...)
}

// settleEvents is the workspace part of a turn's end (§4.4-§4.6, §5):
// the pending harness snapshot, then the verified set (after, the
// after-walk, nil when none) or the harness set recorded, then the file
// references.
func (m *Manager) settleEvents(t *wsTurn, after *workspace.Snapshot, refs []workspace.FileReference) []provider.Event {
	evs := m.harnessDueLocked(t, true)
	verified := false
	if after != nil && t.baseline != nil {
		if !after.Complete() {
			evs = append(evs, wsDiagnostic(t.turnID, diagWalkCapped, "the workspace walk after the turn stopped at "+after.Incomplete+"; no verified diff"))
		} else {
			files := workspace.Compare(t.baseline, after, t.harness.Budget(), m.cfg.Redact)
			if len(files) > 0 || t.harness.Reported() {
				cs := workspace.NewChangeSet(t.harness.ID(), t.harness.Revision()+1, workspace.SourceVerified, false, files)
				evs = append(evs, m.changeSetEvents(t.turnID, cs, prp.EventWorkspaceChangeUpdated, provider.P1)...)
				cs.Complete = true
				evs = append(evs, m.changeSetEvents(t.turnID, cs, prp.EventWorkspaceDiffRecorded, provider.P1)...)
			}
			verified = true
		}
	}
	if !verified {
		if last, ok := t.harness.Last(); ok {
			last.Complete = true
			evs = append(evs, m.changeSetEvents(t.turnID, last, prp.EventWorkspaceDiffRecorded, provider.P1)...)
		}
	}
	for _, r := range refs {
		evs = append(evs, provider.Event{EventType: prp.EventWorkspaceFileReferenced, Priority: provider.P1,
			TurnID: t.turnID, Payload: r.Payload()})
	}
	return evs
}

// keepSnapshotLocked keeps a complete after-walk of t's root as the next
// baseline's stat cache. m.mu held.
func (m *Manager) keepSnapshotLocked(t *wsTurn, after *workspace.Snapshot) {
	if after.Complete() && m.ws.root == t.root {
		m.ws.last = after
	}
}

// parkedBatch is what a settling turn's end sets aside while its
// after-walk runs without m.mu: the events up to and including the turn's
// end, the lines and wake-ups they came with, the hooks waiting for the
// next commit and, from the reader, the consumed event files and their
// cursor. A commit made meanwhile (a command result, a terminal answer)
// takes none of it and records the cursor from before these files, so
// nothing after the turn's end is durable before its verified set, and a
// crash in the window re-reads the files that ended the turn.
type parkedBatch struct {
	events      []provider.Event
	lines       [][]byte
	wakes       []func()
	afterCommit []func(context.Context)
	afterWrite  []func()
	// files is set when the batch holds the reader's consumed files
	// (pending) and its cursor (consumed); OpenCode's HTTP channel has none.
	files    bool
	pending  []string
	consumed int64
}

// parkPendingLocked moves p's whole pending batch, files and cursor
// included, into a parked batch (the reader takes no file meanwhile).
// m.mu held.
func (m *Manager) parkPendingLocked(p *process) *parkedBatch {
	b := m.parkLocked(p.bufEvents, p.bufLines, p.bufWakes)
	b.files, b.pending, b.consumed = true, p.pending, p.consumed
	p.bufEvents, p.bufLines, p.bufWakes, p.pending = nil, nil, nil, nil
	p.consumed = p.recorded
	return b
}

// parkLocked sets events, lines and wakes aside with the hooks waiting for
// the next commit. m.mu held.
func (m *Manager) parkLocked(events []provider.Event, lines [][]byte, wakes []func()) *parkedBatch {
	b := &parkedBatch{events: events, lines: lines, wakes: wakes, afterCommit: m.afterCommit, afterWrite: m.afterWrite}
	m.afterCommit, m.afterWrite = nil, nil
	return b
}

// walkEndingTurnLocked finishes the workspace side of turn t, whose end
// events are in the parked batch b: it walks the workspace and reads the
// referenced files without the lock, then puts what they show before the
// turn's end (§4.5, §5) and commits b ahead of anything that arrived
// meanwhile. m.mu held on entry and on return, released meanwhile.
func (m *Manager) walkEndingTurnLocked(p *process, t *wsTurn, b *parkedBatch) error {
	m.ws.settling = t.turnID
	m.mu.Unlock()
	after, refs := m.afterWalk(t)
	m.mu.Lock()
	m.ws.settling = ""
	if after != nil {
		m.keepSnapshotLocked(t, after)
	}
	evs := m.settleEvents(t, after, refs)
	if i := turnEnd(b.events, t.turnID); i >= 0 {
		b.events = slices.Insert(b.events, i, evs...)
	} else {
		b.events = append(b.events, evs...)
	}
	m.afterCommit = append(b.afterCommit, m.afterCommit...)
	m.afterWrite = append(b.afterWrite, m.afterWrite...)
	if m.proc != p {
		// The agent went meanwhile: its turn's end still goes; no line
		// reaches it, and its files wait for the next start's sweep.
		m.afterWrite = append(m.afterWrite, b.wakes...)
		return m.commitThenWriteLocked(b.events, nil)
	}
	p.bufEvents = append(b.events, p.bufEvents...)
	p.bufLines = append(b.lines, p.bufLines...)
	p.bufWakes = append(b.wakes, p.bufWakes...)
	if b.files {
		p.pending = append(b.pending, p.pending...)
		p.consumed = b.consumed
	}
	return m.commitThenWriteLocked(nil, nil)
}

// afterWalk is the work of a settling turn done without m.mu: the
// after-walk (stat cache: the baseline) and the file references.
func (m *Manager) afterWalk(t *wsTurn) (*workspace.Snapshot, []workspace.FileReference) {
	if m.duringWalk != nil {
		m.duringWalk()
	}
	var after *workspace.Snapshot
	if t.baseline != nil {
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.WorkspaceWalkTimeout)
		after = t.root.Walk(ctx, t.baseline)
		cancel()
	}
	// The references' reads get a bound of their own, the same length.
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.WorkspaceWalkTimeout)
	defer cancel()
	return after, t.root.References(ctx, t.turnID, t.cwd, t.message, m.cfg.Redact)
}

// restartRoot opens the workspace root of a turn that was active when
// runnerd stopped (without the lock); nil when none was.
func (m *Manager) restartRoot() *workspace.Root {
	m.mu.Lock()
	active := m.cl != nil && m.cl.ActiveTurn() != "" && m.st.Binding != nil && m.st.Binding.Cwd != ""
	var cwd string
	if active {
		cwd = m.st.Binding.Cwd
	}
	m.mu.Unlock()
	if !active {
		return nil
	}
	root, err := workspace.Open(cwd, m.cfg.StateDir)
	if err != nil {
		return nil
	}
	return root
}

// resumeWorkspaceLocked tracks a turn that outlived a runnerd restart:
// its baseline was lost (§4.1), so it gets no verified set, only the
// harness changes reported from now on, and the diagnostic says so.
// m.mu held.
func (m *Manager) resumeWorkspaceLocked(root *workspace.Root) error {
	if root == nil || m.cl == nil || m.cl.ActiveTurn() == "" || m.ws.turn != nil {
		return nil
	}
	turnID := m.cl.ActiveTurn()
	m.ws.cwd, m.ws.root, m.ws.last = m.st.Binding.Cwd, root, nil
	m.ws.turn = &wsTurn{turnID: turnID, root: root, cwd: m.st.Binding.Cwd, calls: map[string]*wsCall{},
		harness: workspace.NewHarness(turnID, workspace.NewBudget(workspace.WorkspaceDiffBudget, m.cfg.Clock.Now), m.cfg.Redact)}
	return m.persistLocked([]provider.Event{wsDiagnostic(turnID, diagBaselineIncomplete,
		"runnerd restarted during the turn; its workspace baseline is lost and the turn has no verified diff")}, nil)
}
