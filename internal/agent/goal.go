package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// GoalCommand selects a PRP v2 session.goal.* command.
type GoalCommand int

// Goal commands.
const (
	GoalGet   GoalCommand = iota + 1 // session.goal.get
	GoalSet                          // session.goal.set
	GoalClear                        // session.goal.clear
)

// Rejection codes of commands refused without effect (the reference's
// ACPX executor answers them so).
const (
	// CodeGoalActionUnavailable: the agent's negotiated goal extension
	// lacks the action (or the extension is absent).
	CodeGoalActionUnavailable = "session_goal_action_unavailable"
	// CodeProviderCommandUnavailable: the ACP provider implements no such
	// command (interaction.receipt, session.budget.increase).
	CodeProviderCommandUnavailable = "provider_command_unavailable"
)

// goalControlWait bounds one _session/goal request: the reference
// sidecar's 30 s request timeout (prp.md §10).
const goalControlWait = 30 * time.Second

// rejection is a command refused before any effect: the runner journals
// and sends it with status rejected and {code, message}. message is a
// fixed text.
func rejection(code, message string) error {
	return &CommandError{Code: code, Message: message, Rejected: true}
}

// ProviderCommandUnavailable is the answer to a command the ACP provider
// does not implement.
func ProviderCommandUnavailable() error {
	return rejection(CodeProviderCommandUnavailable, "the ACPX provider does not implement this command")
}

// goalPayload is session.goal.set's payload (command-v2.schema.json);
// get and clear carry at most requestId.
type goalPayload struct {
	RequestID   string          `json:"requestId"`
	Objective   *string         `json:"objective"`
	Status      string          `json:"status"`
	TokenBudget json.RawMessage `json:"tokenBudget"`
}

// maxGoalRequestIDChars bounds requestId (command-v2.schema.json).
const maxGoalRequestIDChars = 160

// goalAction is the _session/goal action of a command: a set with an
// objective is set, a status change alone pause or resume (as the
// reference's goal_control decides it).
func (p goalPayload) goalAction(cmd GoalCommand) string {
	switch {
	case cmd == GoalClear:
		return provider.GoalClear
	case p.Objective != nil:
		return provider.GoalSet
	case p.Status == "paused":
		return provider.GoalPause
	}
	return provider.GoalResume
}

func decodeGoalPayload(cmd GoalCommand, payload json.RawMessage) (goalPayload, error) {
	var p goalPayload
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &p); err != nil {
			return p, failed("session.goal payload is malformed")
		}
	}
	if utf8.RuneCountInString(p.RequestID) > maxGoalRequestIDChars {
		return p, failed("session.goal requestId is longer than 160 characters")
	}
	if cmd != GoalSet {
		return p, nil
	}
	if len(p.TokenBudget) > 0 && string(p.TokenBudget) != "null" {
		// v1 of the ACP goal extension negotiates no budget control.
		return p, rejection(CodeGoalActionUnavailable, "the agent's goal extension does not support token budget control")
	}
	if o := p.Objective; o != nil && (strings.TrimSpace(*o) == "" || utf8.RuneCountInString(*o) > provider.MaxGoalObjectiveChars) {
		return p, failed("session.goal.set objective must be 1 to 4000 characters, not blank")
	}
	switch p.Status {
	case "", "active", "paused":
	default:
		return p, failed("session.goal.set status must be active or paused")
	}
	return p, nil
}

// Goal runs session.goal.get, .set or .clear commandID:
// get answers the recorded snapshot; set and clear send _session/goal
// when the agent's initialize advertised the action, wait for its answer
// (the agent publishes its new snapshot before it), and answer the
// projection. The write that records the projection's two P0 events
// (session.capabilities.updated, then the goal event) also records the
// completed result (prp.md §7.2 item 8).
// It returns once what it changed is durable (Sync).
func (m *Manager) Goal(ctx context.Context, commandID string, cmd GoalCommand, payload json.RawMessage) (json.RawMessage, error) {
	return m.durable(m.goal(ctx, commandID, cmd, payload))
}

// goal is Goal without the wait for durability.
func (m *Manager) goal(ctx context.Context, commandID string, cmd GoalCommand, payload json.RawMessage) (json.RawMessage, error) {
	p, err := decodeGoalPayload(cmd, payload)
	if err != nil {
		return nil, err
	}
	action := p.goalAction(cmd)
	m.mu.Lock()
	if m.cl == nil || m.cl.Record().ACPSessionID == "" {
		m.mu.Unlock()
		return nil, failed("no open session; run session.open first")
	}
	capab := m.cl.Goal().Capability
	if cmd == GoalGet {
		defer m.mu.Unlock()
		return m.goalAnswerLocked(commandID, prp.EventSessionGoalSnapshot, p.RequestID)
	}
	if !capab.Allows(action) {
		m.mu.Unlock()
		return nil, rejection(CodeGoalActionUnavailable, "the negotiated ACP extension does not support this goal action")
	}
	live := m.proc != nil && !m.proc.lost
	m.mu.Unlock()
	if !live {
		return nil, failed("the agent is not running; run session.open first")
	}
	objective := ""
	if p.Objective != nil {
		objective = *p.Objective
	}
	t := m.cfg.Clock.NewTimer(goalControlWait)
	defer t.Stop()
	_, err = m.call(ctx, t.C(), func(c *acpx.Client) (provider.Call, error) {
		call, err := c.GoalControl(action, objective)
		m.goalCall = call.ID // m.mu is held
		return call, err
	})
	m.mu.Lock()
	m.goalCall = 0
	m.mu.Unlock()
	switch {
	case errors.Is(err, errDeadline):
		return nil, failed(fmt.Sprintf("the agent did not answer the goal control within %s", goalControlWait))
	case err != nil:
		var rpc *provider.Failure
		if errors.As(err, &rpc) && rpc.Class == provider.ClassUnclassified {
			return nil, failed("the agent refused the goal control")
		}
		return nil, classErr(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cl == nil {
		return nil, failed("the session ended during the goal control")
	}
	m.settleGoalLocked(action, objective)
	evt := prp.EventSessionGoalUpdated
	if cmd == GoalClear {
		evt = prp.EventSessionGoalCleared
	}
	return m.goalAnswerLocked(commandID, evt, p.RequestID)
}

// settleGoalLocked makes the record reflect an acknowledged control when
// the agent answered without publishing its snapshot first: clear leaves
// no goal, set the new objective active, pause and resume the recorded
// goal with its new status. A snapshot the agent publishes later replaces
// it (an autonomous update). m.mu held.
func (m *Manager) settleGoalLocked(action, objective string) {
	s := m.cl.Goal().Snapshot
	switch action {
	case provider.GoalClear:
		m.cl.SetGoalSnapshot(nil)
	case provider.GoalSet:
		if s == nil || s.Objective != objective {
			m.cl.SetGoalSnapshot(&provider.GoalSnapshot{Objective: objective, Status: "active"})
		}
	case provider.GoalPause, provider.GoalResume:
		want := "paused"
		if action == provider.GoalResume {
			want = "active"
		}
		if s != nil && s.Status != want && (s.Status == "active" || s.Status == "paused") {
			c := *s
			c.Status = want
			m.cl.SetGoalSnapshot(&c)
		}
	}
}

// goalAnswerLocked commits the projection's events with the completed
// result and returns the result. m.mu held.
func (m *Manager) goalAnswerLocked(commandID, eventType, requestID string) (json.RawMessage, error) {
	proj := m.goalProjectionLocked(requestID)
	result := jsonenc.MustMarshalEscaped(proj)
	evs := goalEvents(proj, eventType)
	if err := m.commitThenWriteEffectLocked(evs, nil, &commandEffect{commandID: commandID, result: result}); err != nil {
		return nil, err
	}
	return result, nil
}

// goalProjectionLocked advances the revision and projects the record.
// m.mu held.
func (m *Manager) goalProjectionLocked(requestID string) provider.GoalProjection {
	rev := m.cl.NextGoalRevision()
	return m.cl.Goal().Project(rev, m.cl.ActiveTurn() != "", requestID)
}

// turnControls is what an ACP v1 session offers a running turn: runnerd
// neither steers nor queues a follow-up (acp.md §4.3).
var turnControls = map[string]any{"steering": false, "queuedFollowUp": false}

// goalEvents are the two P0 events of a projection: the capabilities,
// then the goal event.
func goalEvents(proj provider.GoalProjection, eventType string) []provider.Event {
	return []provider.Event{
		{EventType: prp.EventSessionCapabilitiesUpdated, Priority: provider.P0,
			Payload: map[string]any{"sessionGoals": proj.SessionGoals, "turnControls": turnControls}},
		{EventType: eventType, Priority: provider.P0, Payload: projectionPayload(proj)},
	}
}

// projectionPayload is the projection as an event payload map.
func projectionPayload(proj provider.GoalProjection) map[string]any {
	var p map[string]any
	_ = json.Unmarshal(jsonenc.MustMarshal(proj), &p)
	return p
}

// goalUpdateLocked takes a goal snapshot from a session_info_update: the
// record keeps it, and outside a goal control (whose answer reports it)
// it is an autonomous update: session.goal.updated, or .cleared for null.
// A malformed snapshot is dropped, leaving the recorded one. goalOnly
// reports an update that carried nothing but the goal: it is not also a
// session.updated. m.mu held.
func (m *Manager) goalUpdateLocked(u provider.SessionUpdate) (evs []provider.Event, goalOnly bool) {
	if u.Kind != provider.UpdateSessionInfo || len(u.Meta) == 0 {
		return nil, false
	}
	snap, present, err := provider.DecodeGoalMeta(u.Meta)
	if err != nil {
		m.log.Info("dropped a malformed goal snapshot", "err", err)
		return nil, false
	}
	if !present {
		return nil, false
	}
	goalOnly = u.SessionTitle == nil
	m.cl.SetGoalSnapshot(snap)
	if m.goalCall != 0 || !m.cl.Goal().Capability.Available() {
		return nil, goalOnly
	}
	evt := prp.EventSessionGoalUpdated
	if snap == nil {
		evt = prp.EventSessionGoalCleared
	}
	return []provider.Event{{EventType: evt, Priority: provider.P0, Payload: projectionPayload(m.goalProjectionLocked(""))}}, goalOnly
}

// openGoalEventsLocked are the goal events of a session.open, as the
// reference's ACPX executor follows session.started with a goal get: the
// capabilities, then session.goal.snapshot. Only for an agent whose
// initialize advertised the extension (usable or not), so an agent
// without it opens with the events it always had. m.mu held.
func (m *Manager) openGoalEventsLocked() []provider.Event {
	if m.cl.Goal().Capability == nil {
		return nil
	}
	return goalEvents(m.goalProjectionLocked(""), prp.EventSessionGoalSnapshot)
}
