package provider

import (
	"encoding/json"
	"maps"
)

// Record is the durable ACP session record (acp.md §3.4), one per PRP
// normalizedSessionId. It is plain JSON so runnerd stores it as a
// record of its state store (runner-state.db) and a restarted runnerd resumes exactly where the old one
// stopped. It never holds an environment value or a payload the agent sent,
// except the partial stdout line that must survive a restart.
type Record struct {
	// ACPSessionID is the ACP wire session id.
	ACPSessionID string `json:"acpSessionId,omitempty"`
	// AgentSessionID is the harness id, only from _meta.agentSessionId on a
	// session/new or session/load answer; never synthesised.
	AgentSessionID string `json:"agentSessionId,omitempty"`

	Agent   string   `json:"agent,omitempty"`
	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	Cwd     string   `json:"cwd,omitempty"`

	// ResetOnNextEnsure forbids reusing the record (acpx
	// acpx.reset_on_next_ensure): set after a cancel, a handshake timeout or
	// a discard.
	ResetOnNextEnsure bool `json:"resetOnNextEnsure"`
	// Prompted records that the session ever received a prompt; a record
	// that never did is discarded, never loaded.
	Prompted bool `json:"prompted"`

	ProtocolVersion   int             `json:"protocolVersion,omitempty"`
	AgentCapabilities json.RawMessage `json:"agentCapabilities,omitempty"`
	AgentInfo         *Implementation `json:"agentInfo,omitempty"`
	// ClientCapabilities is what initialize advertised; nil means none (a
	// record written without client capabilities). A resumed session
	// advertises it again and an adopted one is answered by it, so the
	// agent keeps the contract its session started with.
	ClientCapabilities *ClientCapabilities `json:"clientCapabilities,omitempty"`
	// Goal is the goal extension's state (goal.go); nil when the agent
	// never advertised it.
	Goal *GoalRecord `json:"goal,omitempty"`

	// Driver is the durable state of a driver that keeps more than the
	// line stream (OpenCode: its server URL, password and the per-part
	// emission record, opencode.Record); nil for ACP and Codex. It
	// holds a secret: the record is state, never logged.
	Driver json.RawMessage `json:"driver,omitempty"`

	// Process is the live process session; nil when no agent runs.
	Process *ProcessRecord `json:"process,omitempty"`
}

// ProcessRecord is the live half of the record: the pcwrap session and the
// JSON-RPC line stream running through it.
type ProcessRecord struct {
	// UUID names <state-dir>/process-sessions/<uuid>/.
	UUID string `json:"uuid,omitempty"`
	// NextStdinSeq and ConsumedEventSeq are pcwrap file sequences; the
	// client core never touches them, the runner does.
	NextStdinSeq     uint64 `json:"nextStdinSeq,omitempty"`
	ConsumedEventSeq uint64 `json:"consumedEventSeq,omitempty"`
	// WrapperPID and WrapperStart name the pcwrap process (its pid and
	// /proc start time), so a restart can tell a pcwrap that is still
	// starting from one that is gone; 0 when unknown.
	WrapperPID   int    `json:"wrapperPid,omitempty"`
	WrapperStart uint64 `json:"wrapperStart,omitempty"`

	Wire WireState `json:"wire"`
	Map  MapState  `json:"map"`
}

// WireState is the JSON-RPC framing and request table.
type WireState struct {
	// NextRequestID is the next outbound JSON-RPC id; ids are never reused.
	NextRequestID int64 `json:"nextRequestId"`
	// PartialLine is stdout received after the last newline.
	PartialLine []byte `json:"partialLine,omitempty"`
	// ConsecutiveBadLines counts non-JSON-RPC lines since the last good one.
	ConsecutiveBadLines int `json:"consecutiveBadLines,omitempty"`

	// Diagnostic counters.
	SkippedLines    uint64 `json:"skippedLines,omitempty"`
	LateUpdates     uint64 `json:"lateUpdates,omitempty"`
	ReplayedUpdates uint64 `json:"replayedUpdates,omitempty"`
	StaleResponses  uint64 `json:"staleResponses,omitempty"`

	// Pending maps outbound request id → what it was.
	Pending map[int64]PendingRequest `json:"pendingRequests,omitempty"`
	// AgentRequests maps an agent request id (compact JSON text) → what it
	// is, until runnerd answers it.
	AgentRequests map[string]AgentRequest `json:"pendingAgentRequests,omitempty"`
	// Turn is the active turn, nil between turns.
	Turn *TurnState `json:"activeTurn,omitempty"`
	// Loss is the first latched channel loss (acp.md §5.1); a loss latched
	// between turns fails the next turn at once.
	Loss LossReason `json:"loss,omitempty"`
}

// PendingRequest is an outbound request awaiting its response.
type PendingRequest struct {
	Method string `json:"method"`
	TurnID string `json:"turnId,omitempty"`
}

// AgentRequest is an agent→client request awaiting runnerd's answer.
type AgentRequest struct {
	Method string `json:"method"`
	// RuntimeRequestID is the PRP runtime_request id it surfaced as.
	RuntimeRequestID string `json:"runtimeRequestId,omitempty"`
	TurnID           string `json:"turnId,omitempty"`
	// ItemID is the item of the tool call the request is about, and
	// Choices maps each offered action to its ACP option id (tools.md §7),
	// so request.resolve after a restart answers the same options.
	ItemID  string            `json:"itemId,omitempty"`
	Choices map[string]string `json:"choices,omitempty"`
}

// TurnState is the active turn.
type TurnState struct {
	// ID is runnerd's providerTurnId (ACP has no turn id).
	ID string `json:"id"`
	// PromptRequestID is the session/prompt id.
	PromptRequestID int64 `json:"promptRequestId"`
	// CancelRequested is set once session/cancel was produced: every
	// answer after it settles as cancelled (acp.md §4.4).
	CancelRequested bool `json:"cancelRequested,omitempty"`
	// ProviderTurnID is the provider's own turn id when its protocol has
	// one (Codex's turn/start answer; codex.md §3); "" for ACP.
	ProviderTurnID string `json:"providerTurnId,omitempty"`
}

// clone returns a deep copy: nothing in it shares memory with r. It is
// typed, not a round trip through the record's JSON, because the agent
// path clones the record on every commit (a JSON round trip costs a
// quarter of runnerd's CPU per agent message); its JSON
// is the record's. TestCloneIsDeepAndMatchesJSON fills every field by
// reflection, so a field added without a line here fails it.
func (r Record) clone() Record {
	out := r
	out.Args = cloneSlice(r.Args)
	out.AgentCapabilities = cloneSlice(r.AgentCapabilities)
	out.AgentInfo = clonePtr(r.AgentInfo)
	out.ClientCapabilities = clonePtr(r.ClientCapabilities)
	if g := r.Goal; g != nil {
		c := *g
		if g.Capability != nil {
			capability := *g.Capability
			capability.Actions = cloneSlice(g.Capability.Actions)
			c.Capability = &capability
		}
		if s := g.Snapshot; s != nil {
			snap := *s
			snap.TokenBudget, snap.TokensUsed = clonePtr(s.TokenBudget), clonePtr(s.TokensUsed)
			snap.TimeUsedSeconds, snap.Iterations = clonePtr(s.TimeUsedSeconds), clonePtr(s.Iterations)
			snap.LastReason, snap.CreatedAt = clonePtr(s.LastReason), clonePtr(s.CreatedAt)
			snap.UpdatedAt, snap.CompletedAt = clonePtr(s.UpdatedAt), clonePtr(s.CompletedAt)
			c.Snapshot = &snap
		}
		out.Goal = &c
	}
	out.Driver = cloneSlice(r.Driver)
	if p := r.Process; p != nil {
		c := *p
		c.Wire = p.Wire.clone()
		c.Map = p.Map.clone()
		out.Process = &c
	}
	return out
}

func (w WireState) clone() WireState {
	out := w
	out.PartialLine = cloneSlice(w.PartialLine)
	out.Pending = maps.Clone(w.Pending)
	if w.AgentRequests != nil {
		out.AgentRequests = make(map[string]AgentRequest, len(w.AgentRequests))
		for k, v := range w.AgentRequests {
			v.Choices = maps.Clone(v.Choices)
			out.AgentRequests[k] = v
		}
	}
	out.Turn = clonePtr(w.Turn)
	return out
}

func (m MapState) clone() MapState {
	out := m
	if m.Items != nil {
		out.Items = make(map[string]*ItemState, len(m.Items))
		for k, v := range m.Items {
			if v != nil {
				c := *v
				c.ReadOnly = clonePtr(v.ReadOnly)
				c.text = nil // the copy's first append makes its own
				v = &c
			}
			out.Items[k] = v
		}
	}
	out.Order = cloneSlice(m.Order)
	out.SemanticResult = cloneSlice(m.SemanticResult)
	return out
}

// clonePtr copies what p points to; T must hold no reference.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// cloneSlice copies s (E must hold no reference); nil stays nil.
func cloneSlice[S ~[]E, E any](s S) S {
	if s == nil {
		return nil
	}
	return append(make(S, 0, len(s)), s...)
}

// Reusable reports whether a resumable record may be reused for a new
// session.open with the given launch (acpx shouldReuseExistingRecord):
// not reset, ever prompted, same cwd, command and argv.
func (r Record) Reusable(cwd, command string, args []string) bool {
	if r.ResetOnNextEnsure || !r.Prompted || r.ACPSessionID == "" {
		return false
	}
	if r.Cwd != cwd || r.Command != command || len(r.Args) != len(args) {
		return false
	}
	for i := range args {
		if r.Args[i] != args[i] {
			return false
		}
	}
	return true
}
