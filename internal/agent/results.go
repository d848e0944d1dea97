package agent

import (
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// openResult is session.open's result (tools.md §7): status started or
// resumed (an adopted agent is resumed), the descriptor's identity, the
// ACP session id as providerSessionId, the harness id (else the ACP id) as
// sessionId, and the agent's pid (null when not known yet). m.mu held.
func (m *Manager) openResultLocked(resumed bool, rec provider.Record, b *Binding) json.RawMessage {
	status := "started"
	if resumed {
		status = "resumed"
	}
	var pid any
	if p := m.proc; p != nil {
		if n := agentProcessID(p.dir); n > 0 {
			pid = n
		}
	}
	sessionID := rec.AgentSessionID
	if sessionID == "" {
		sessionID = rec.ACPSessionID
	}
	return jsonenc.MustMarshalEscaped(map[string]any{
		"status": status, "provider": m.mapper.AdapterName(), "driver": m.mapper.DriverName(),
		"providerVersion": b.ProviderVersion, "providerSessionId": rec.ACPSessionID,
		"sessionId": sessionID, "processId": pid,
	})
}

// Turn id rules (tools.md §7).
const (
	// maxUsedTurnIDs bounds the durable list of used turn ids (beyond: far
	// more turns than one run holds; the oldest falls out first).
	maxUsedTurnIDs = 1024
	// CodeSessionNotOpen refuses a turn.start after a deliberate stop
	// without a new session.open (tools.md §7).
	CodeSessionNotOpen = "session_not_open"
	// CodeInvalidTurnID refuses a turnId that breaks the pattern or
	// repeats one used before.
	CodeInvalidTurnID = "invalid_turn_id"
)

// turnIDPattern is the given turnId's pattern (tools.md §7).
var turnIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

func rejected(code, msg string) error { return &CommandError{Code: code, Message: msg, Rejected: true} }

// usedTurnLocked reports whether id was used before. m.mu held.
func (m *Manager) usedTurnLocked(id string) bool {
	for _, u := range m.st.TurnIDs {
		if u == id {
			return true
		}
	}
	return false
}

// nextTurnIDLocked picks runnerd's providerTurnId: pturn-N, skipping ids
// a server already gave. It consumes NextTurn numbers. m.mu held.
func (m *Manager) nextTurnIDLocked() string {
	for {
		m.st.NextTurn++
		id := fmt.Sprintf("pturn-%d", m.st.NextTurn)
		if !m.usedTurnLocked(id) {
			return id
		}
	}
}

// recordTurnLocked adds id to the used turn ids, bounded. m.mu held.
func (m *Manager) recordTurnLocked(id string) {
	m.st.TurnIDs = append(m.st.TurnIDs, id)
	if n := len(m.st.TurnIDs) - maxUsedTurnIDs; n > 0 {
		m.st.TurnIDs = append([]string(nil), m.st.TurnIDs[n:]...)
	}
}

// lastTurnLocked is the latest provider turn id, or "". m.mu held.
func (m *Manager) lastTurnLocked() string {
	if n := len(m.st.TurnIDs); n > 0 {
		return m.st.TurnIDs[n-1]
	}
	return ""
}

// cancelReason is the command type a cancel result names (tools.md §7).
func cancelReason(kind CancelKind) string {
	switch kind {
	case StopTurn:
		return prp.CommandTurnStop
	case RunCancel:
		return prp.CommandRunCancel
	}
	return prp.CommandTurnInterrupt
}
