package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/toolcall"
)

// readInstructions reads the run's instructions side file: nil when it
// has none.
func readInstructions(stateDir string, b *Binding) (*string, error) {
	if b.InstructionsSide == "" {
		return nil, nil
	}
	data, err := state.ReadSide(stateDir, b.InstructionsSide, maxInstructionsSide)
	if err != nil {
		return nil, fmt.Errorf("read instructions: %w", err)
	}
	var in string
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("decode instructions: %w", err)
	}
	if in == "" {
		return nil, nil
	}
	return &in, nil
}

// sessionName is the PRP normalizedSessionId, "" when unknown: a driver
// names per-session state with it (Codex: its CODEX_HOME).
func (m *Manager) sessionName() string {
	if c := m.correlation(); c != (toolcall.Correlation{}) {
		return c.NormalizedSessionID
	}
	return ""
}

// SteerTurn is turn.steer (codex.md §3): turn/steer with the active turn's
// id, waiting (bounded) for Codex's answer; a driver that cannot steer
// fails as steer does.
// It returns once what it changed is durable (Sync).
func (m *Manager) SteerTurn(payload json.RawMessage) (json.RawMessage, error) {
	return m.durable(m.steerTurn(payload))
}

// steerTurn is SteerTurn without the wait for durability.
func (m *Manager) steerTurn(payload json.RawMessage) (json.RawMessage, error) {
	m.mu.Lock()
	var s provider.Steerer
	turn := ""
	if m.cl != nil {
		s, _ = m.driverLocked().(provider.Steerer)
		turn = m.cl.ActiveTurn()
	}
	m.mu.Unlock()
	if s == nil {
		return m.steer() // ACP v1 cannot steer: refused whatever the payload
	}
	var p struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(payload, &p); err != nil || strings.TrimSpace(p.Text) == "" {
		return nil, failed("turn.steer needs a non-empty text")
	}
	if turn == "" {
		return nil, failed("no turn is active")
	}
	t := m.cfg.Clock.NewTimer(s.SteerBound())
	defer t.Stop()
	if _, err := m.call(context.Background(), t.C(), func(*acpx.Client) (provider.Call, error) { return s.Steer(p.Text) }); err != nil {
		if errors.Is(err, errDeadline) {
			return nil, failed("the provider did not answer turn/steer in time")
		}
		return nil, classErr(err)
	}
	return json.Marshal(map[string]any{"status": "steered", "providerTurnId": turn})
}

// reasonProviderResolved closes a runtime request Codex resolved itself.
const reasonProviderResolved = "provider_resolved"

// answerQuestionLocked is request.resolve for a Codex question: the
// paperclip.question_response.v1 answers become {answers: {<questionId>:
// {answers: [string]}}} (codex.md §4). Answers are written to Codex only:
// never to state, events or logs. m.mu held.
func (m *Manager) answerQuestionLocked(commandID string, id json.RawMessage, req provider.AgentRequest, payload json.RawMessage) (json.RawMessage, error) {
	var p struct {
		RequestID string `json:"requestId"`
		Response  struct {
			Outcome string `json:"outcome"`
			Answers []struct {
				QuestionID string   `json:"questionId"`
				OptionID   string   `json:"optionId"`
				OptionIDs  []string `json:"optionIds"`
				Value      *string  `json:"value"`
				Text       *string  `json:"text"`
				Values     []string `json:"values"`
			} `json:"answers"`
		} `json:"response"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, failed("request.resolve response is malformed")
	}
	d, ok := m.driverLocked().(provider.QuestionAnswerer)
	if !ok {
		return nil, failed("no agent request is pending under that requestId")
	}
	answers := map[string]any{}
	for _, a := range p.Response.Answers {
		if a.QuestionID == "" {
			return nil, failed("request.resolve answers need a questionId")
		}
		var list []string
		switch {
		case len(a.Values) > 0:
			list = a.Values
		case len(a.OptionIDs) > 0:
			list = a.OptionIDs
		case a.OptionID != "":
			list = []string{a.OptionID}
		case a.Value != nil:
			list = []string{*a.Value}
		case a.Text != nil:
			list = []string{*a.Text}
		}
		answers[a.QuestionID] = map[string]any{"answers": append([]string{}, list...)}
	}
	line, err := d.AnswerQuestion(id, answers)
	if err != nil {
		return nil, failed("no agent request is pending under that requestId")
	}
	action := "accept"
	if p.Response.Outcome == "cancelled" {
		action = "cancel"
	}
	evs := m.mapper.RequestResolved(provider.RuntimeRequestOf(req), action)
	result, _ := json.Marshal(map[string]any{"status": "delivered", "requestId": p.RequestID})
	if err := m.commitThenWriteEffectLocked(evs, nil, &commandEffect{commandID: commandID, result: result, prompt: line, answer: true}); err != nil {
		return nil, err
	}
	return result, nil
}

// closeQuestionsLocked ends every open Codex question with status and
// reason. m.mu held.
func (m *Manager) closeQuestionsLocked(status, reason string) []provider.Event {
	d, ok := m.driverLocked().(provider.RuntimeRequester)
	if !ok {
		return nil
	}
	var evs []provider.Event
	w := m.cl.Wire()
	for _, key := range slices.Sorted(maps.Keys(w.AgentRequests)) {
		r := w.AgentRequests[key]
		if !d.OwnsRuntimeRequest(r.Method) || r.RuntimeRequestID == "" {
			continue
		}
		evs = append(evs, m.mapper.RequestClosed(provider.RuntimeRequestOf(r), status, reason)...)
		m.cl.ForgetAgentRequest(json.RawMessage(key))
	}
	return evs
}

// respondPermissionLocked answers a pending permission-shaped request with
// outcome o in its own protocol. m.mu held.
func (m *Manager) respondPermissionLocked(id json.RawMessage, req provider.AgentRequest, o provider.PermissionOutcome) ([]byte, error) {
	if d, ok := m.driverLocked().(provider.PermissionResponder); ok {
		if line, ok, err := d.RespondPermission(id, req, o); ok {
			return line, err
		}
	}
	return m.cl.Respond(id, acpx.PermissionResponse{Outcome: o})
}
