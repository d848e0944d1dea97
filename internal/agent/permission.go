package agent

import (
	"encoding/json"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/provider"
)

// permissionLocked answers a session/request_permission by the bound mode
// (tools.md §6): allowed or rejected at once with no PRP event, or
// surfaced as runtime_request.created and left pending until
// request.resolve, a cancel, or the turn's end. m.mu held.
func (m *Manager) permissionLocked(in provider.Inbound) ([]provider.Event, [][]byte, func()) {
	mode := provider.ApproveAll
	if m.st.Binding != nil {
		mode = m.st.Binding.PermissionMode
	}
	d := provider.DecidePermission(mode, *in.Permission)
	if d == provider.DecideAsk {
		rr, evs := m.mapper.PermissionRequest(m.cl.Map(), in.TurnID, in.ID, *in.Permission)
		m.cl.SetRuntimeRequest(in.ID, rr.ID, rr.ItemID, rr.Choices)
		return evs, nil, nil
	}
	o := provider.PickOption(*in.Permission, d == provider.DecideAllow)
	l, err := m.cl.Respond(in.ID, acpx.PermissionResponse{Outcome: o})
	if err != nil {
		return nil, nil, nil
	}
	return nil, [][]byte{l}, nil
}

// Reasons a runtime request closes without an answer (tools.md §7).
const (
	reasonTurnCompleted = "turn_completed"
	reasonAgentLost     = "agent_lost"
	reasonWithdrawn     = "agent_withdrew"
)

// requestEnd says what closeRequestsLocked does with the agent requests.
type requestEnd int

const (
	// keepRequests leaves them to the caller (a cancel answers them).
	keepRequests requestEnd = iota
	// answerRequests answers each {outcome:"cancelled"}.
	answerRequests
	// forgetRequests drops them: nothing reaches a lost agent.
	forgetRequests
)

// closeRequestsLocked ends every pending runtime request: status
// acpx.RequestExpired or RequestCancelled, replayAllowed false; end says
// what happens to the agent requests. It returns the events and the
// answer lines. m.mu held.
func (m *Manager) closeRequestsLocked(status, reason string, end requestEnd) ([]provider.Event, [][]byte) {
	if m.cl == nil {
		return nil, nil
	}
	var evs []provider.Event
	var lines [][]byte
	ids := m.cl.PendingPermissionIDs()
	for i, r := range m.cl.PendingPermissions() {
		if r.RuntimeRequestID == "" {
			continue
		}
		evs = append(evs, m.mapper.RequestClosed(provider.RuntimeRequestOf(r), status, reason)...)
		switch end {
		case answerRequests:
			if l, err := m.cl.Respond(ids[i], acpx.PermissionResponse{Outcome: provider.PermissionOutcome{Outcome: "cancelled"}}); err == nil {
				lines = append(lines, l)
			}
		case forgetRequests:
			m.cl.ForgetAgentRequest(ids[i])
		}
	}
	// Codex's question requests end with their turn too (codex.md §4);
	// Codex closes its own side (serverRequest/resolved).
	evs = append(evs, m.closeQuestionsLocked(status, reason)...)
	return evs, lines
}

// withdrawnLocked expires the runtime request of an agent request the
// agent cancelled itself ($/cancel_request). m.mu held.
func (m *Manager) withdrawnLocked(id json.RawMessage) []provider.Event {
	r, ok := m.cl.AgentRequest(id)
	if !ok || r.RuntimeRequestID == "" {
		return nil
	}
	return m.mapper.RequestClosed(provider.RuntimeRequestOf(r), provider.RequestExpired, reasonWithdrawn)
}
