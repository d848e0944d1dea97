package provider

import (
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
)

// Core is the durable session record and the JSON-RPC request table every
// driver keeps in it: ids, pending requests both ways, the active turn, the
// latched loss and the links of agent requests to PRP runtime requests. It
// does no I/O and is not safe for concurrent use: its owner serialises
// calls and persists Record() before it writes any line a call returns
// (acp.md §3.2), so a restarted runnerd resumes with the same ids.
type Core struct {
	rec     Record
	log     *slog.Logger
	dialect Dialect
}

// NewCore resumes a core from rec (a zero Record starts fresh); d is how
// Respond and RespondError encode their answers; a nil log discards.
func NewCore(rec Record, log *slog.Logger, d Dialect) *Core {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rec = rec.clone()
	if rec.Process == nil {
		rec.Process = &ProcessRecord{}
	}
	w := &rec.Process.Wire
	if w.NextRequestID < 1 {
		w.NextRequestID = 1
	}
	if w.Pending == nil {
		w.Pending = map[int64]PendingRequest{}
	}
	if w.AgentRequests == nil {
		w.AgentRequests = map[string]AgentRequest{}
	}
	return &Core{rec: rec, log: log, dialect: d}
}

// ResetProcess forgets the line stream of an agent process that is gone
// (stopped, exited or lost) so a new process starts a clean JSON-RPC
// stream: request table, partial line, active turn and latched loss are
// cleared. The mapping state stays, so item ids are never reused in the
// record (acp.md §5).
func (c *Core) ResetProcess() {
	m := c.rec.Process.Map
	m.Items, m.Order, m.LastMessage = nil, nil, ""
	c.rec.Process = &ProcessRecord{Map: m, Wire: WireState{
		NextRequestID: 1, Pending: map[int64]PendingRequest{}, AgentRequests: map[string]AgentRequest{},
	}}
}

// Record returns a deep copy of the durable record.
func (c *Core) Record() Record { return c.rec.clone() }

// Map is the mapping state inside the record: pass it to the Mapper so one
// Record() holds wire and mapping state for the same durable write.
func (c *Core) Map() *MapState { return &c.rec.Process.Map }

func (c *Core) wire() *WireState { return &c.rec.Process.Wire }

// Wire is the live line-stream state inside the record, for a driver of
// another wire protocol that keeps its request table and active turn in
// the same durable record (provider.Driver).
func (c *Core) Wire() *WireState { return c.wire() }

// Live is the live record itself (not a copy), for such a driver to record
// what its handshake negotiated (the session id, above all).
func (c *Core) Live() *Record { return &c.rec }

// LatchLoss records reason as the session's channel loss unless one is
// already latched; it reports whether this call latched it. Only the first
// loss counts (acp.md §5.1).
func (c *Core) LatchLoss(reason LossReason) bool {
	w := c.wire()
	if w.Loss != "" {
		return false
	}
	w.Loss = reason
	c.log.Warn("agent channel lost", "lossReason", string(reason))
	return true
}

// Loss returns the latched loss, or "".
func (c *Core) Loss() LossReason { return c.wire().Loss }

// ActiveTurn returns the active turn id, or "".
func (c *Core) ActiveTurn() string {
	if t := c.wire().Turn; t != nil {
		return t.ID
	}
	return ""
}

// AbandonTurn settles the active turn locally (the agent is gone or the
// cancel grace expired): the prompt id stays known, so its late answer is
// dropped as stale rather than attributed to a later turn.
func (c *Core) AbandonTurn() *TurnOutcome {
	w := c.wire()
	t := w.Turn
	if t == nil {
		return nil
	}
	w.Turn = nil
	delete(w.Pending, t.PromptRequestID)
	out := &TurnOutcome{TurnID: t.ID, StopReason: StopCancelled, Cancelled: t.CancelRequested}
	if !t.CancelRequested {
		out.StopReason = ""
		out.Err = NewFailure(ClassAgentDisconnected, nil)
	}
	return out
}

// Respond answers the pending agent request id with result.
func (c *Core) Respond(id json.RawMessage, result any) ([]byte, error) {
	return c.dialect.Respond(c.wire(), id, result)
}

// RespondError answers the pending agent request id with an error.
func (c *Core) RespondError(id json.RawMessage, code int, message string) ([]byte, error) {
	return c.dialect.RespondError(c.wire(), id, code, message)
}

// SetRuntimeRequestID links a pending agent request to its PRP
// runtime_request id, so a restarted runnerd can answer request.resolve.
func (c *Core) SetRuntimeRequestID(id json.RawMessage, runtimeRequestID string) {
	key := IDKey(id)
	if r, ok := c.wire().AgentRequests[key]; ok {
		r.RuntimeRequestID = runtimeRequestID
		c.wire().AgentRequests[key] = r
	}
}

// SetRuntimeRequest links a pending agent request to its PRP runtime
// request: id, tool call item and offered choices (tools.md §7).
func (c *Core) SetRuntimeRequest(id json.RawMessage, runtimeRequestID, itemID string, choices map[string]string) {
	key := IDKey(id)
	if r, ok := c.wire().AgentRequests[key]; ok {
		r.RuntimeRequestID, r.ItemID, r.Choices = runtimeRequestID, itemID, choices
		c.wire().AgentRequests[key] = r
	}
}

// RuntimeRequestFor finds the pending agent request linked to a PRP
// runtime_request id.
func (c *Core) RuntimeRequestFor(runtimeRequestID string) (id json.RawMessage, r AgentRequest, ok bool) {
	for key, r := range c.wire().AgentRequests {
		if r.RuntimeRequestID == runtimeRequestID {
			return json.RawMessage(key), r, true
		}
	}
	return nil, AgentRequest{}, false
}

// AgentRequest returns the pending agent request id.
func (c *Core) AgentRequest(id json.RawMessage) (AgentRequest, bool) {
	r, ok := c.wire().AgentRequests[IDKey(id)]
	return r, ok
}

// ForgetAgentRequest drops a pending agent request without answering it
// (the agent withdrew it, or its turn ended): a later request.resolve
// finds nothing.
func (c *Core) ForgetAgentRequest(id json.RawMessage) {
	delete(c.wire().AgentRequests, IDKey(id))
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// SetLaunch records the launch identity compared by Record.Reusable.
func (c *Core) SetLaunch(agent, command string, args []string, cwd string) {
	c.rec.Agent, c.rec.Command, c.rec.Args, c.rec.Cwd = agent, command, append([]string(nil), args...), cwd
}

// MarkReset sets resetOnNextEnsure: the record is never reused.
func (c *Core) MarkReset() { c.rec.ResetOnNextEnsure = true }

// agentRequestFor finds the pending agent request linked to a PRP
// runtime_request id.
func (c *Core) agentRequestFor(runtimeRequestID string) (id json.RawMessage, turnID string, ok bool) {
	for key, r := range c.wire().AgentRequests {
		if r.RuntimeRequestID == runtimeRequestID {
			return json.RawMessage(key), r.TurnID, true
		}
	}
	return nil, "", false
}

// PendingPermissions lists the permission requests still waiting for an
// answer, in id order (Cancel answers them {outcome:"cancelled"}).
func (c *Core) PendingPermissions() []AgentRequest {
	var out []AgentRequest
	for _, key := range sortedKeys(c.wire().AgentRequests) {
		if r := c.wire().AgentRequests[key]; r.Method == MethodRequestPermission {
			out = append(out, r)
		}
	}
	return out
}

// PendingPermissionIDs lists the agent request ids of PendingPermissions,
// in the same order.
func (c *Core) PendingPermissionIDs() []json.RawMessage {
	var out []json.RawMessage
	for _, key := range sortedKeys(c.wire().AgentRequests) {
		if c.wire().AgentRequests[key].Method == MethodRequestPermission {
			out = append(out, json.RawMessage(key))
		}
	}
	return out
}

// Goal returns the record's goal state.
func (c *Core) Goal() GoalRecord {
	if c.rec.Goal == nil {
		return GoalRecord{}
	}
	return *c.rec.Goal
}

func (c *Core) goal() *GoalRecord {
	if c.rec.Goal == nil {
		c.rec.Goal = &GoalRecord{}
	}
	return c.rec.Goal
}

// SetGoalSnapshot records the agent's latest goal (nil: cleared).
func (c *Core) SetGoalSnapshot(s *GoalSnapshot) { c.goal().Snapshot = s }

// NextGoalRevision advances and returns the projection revision: every
// projection runnerd emits has its own.
func (c *Core) NextGoalRevision() uint64 {
	g := c.goal()
	g.Revision++
	return g.Revision
}
