package main

// Script steps that follow the run's events: waitEvent and resolve, so a
// person can drive a real agent without sleeps or guessed ids.

import (
	"encoding/json"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// committedEvent is the part of an event envelope these steps read.
type committedEvent struct {
	EventType string `json:"eventType"`
	TurnID    string `json:"turnId"`
	Payload   struct {
		RequestID string `json:"requestId"`
		Request   struct {
			RequestID string `json:"requestId"`
			TurnID    string `json:"turnId"`
			Choices   []struct {
				Key  string `json:"key"`
				Kind string `json:"kind"`
			} `json:"choices"`
		} `json:"request"`
	} `json:"payload"`
}

// allEvents decodes every committed event of the run, archived epochs first.
func allEvents(s control.Snapshot) []committedEvent {
	var out []committedEvent
	add := func(raw []json.RawMessage) {
		for _, e := range raw {
			var env struct {
				Payload committedEvent `json:"payload"`
			}
			if json.Unmarshal(e, &env) == nil {
				out = append(out, env.Payload)
			}
		}
	}
	for _, ep := range s.Epochs {
		add(ep.Events)
	}
	add(s.Events)
	return out
}

func countEvents(s control.Snapshot, typ string) int {
	n := 0
	for _, e := range allEvents(s) {
		if e.EventType == typ {
			n++
		}
	}
	return n
}

// resolveAction maps a resolve step's word to tools.md §7's action: ACP
// option kinds (allow, allow_once, allow_always, reject, reject_once) or
// the actions themselves. "" for anything else.
func resolveAction(word string) string {
	switch word {
	case "allow", "allow_once", "accept":
		return "accept"
	case "allow_always", "accept_for_session":
		return "accept_for_session"
	case "reject", "reject_once", "deny", "decline":
		return "decline"
	case "cancel":
		return "cancel"
	}
	return ""
}

// acpKind is the ACP option kind an action picks (tools.md §6).
var acpKind = map[string]string{"accept": "allow_once", "accept_for_session": "allow_always", "decline": "reject_once"}

// openRequest finds the latest runtime_request.created that is neither
// settled by a later event nor answered by this prpctl.
func openRequest(s control.Snapshot, answered map[string]bool) (committedEvent, bool) {
	evs := allEvents(s)
	settled := map[string]bool{}
	for _, e := range evs {
		switch e.EventType {
		case prp.EventRuntimeRequestResolved, prp.EventRuntimeRequestCancelled, prp.EventRuntimeRequestExpired:
			id := e.Payload.RequestID
			if id == "" {
				id = e.Payload.Request.RequestID
			}
			settled[id] = true
		}
	}
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		id := e.Payload.Request.RequestID
		if e.EventType == prp.EventRuntimeRequestCreated && id != "" && !settled[id] && !answered[id] {
			return e, true
		}
	}
	return committedEvent{}, false
}

// resolvePayload is the request.resolve answering req with action: the
// §7 resolution, plus the ACP option of that kind as response.optionId
// (or outcome cancelled), which runnerds before §7 read.
func resolvePayload(req committedEvent, action string) json.RawMessage {
	turnID := req.Payload.Request.TurnID
	if turnID == "" {
		turnID = req.TurnID
	}
	p := map[string]any{"requestId": req.Payload.Request.RequestID, "turnId": turnID,
		"resolution": map[string]any{"action": action}}
	if action == "cancel" {
		p["response"] = map[string]any{"outcome": "cancelled"}
	} else {
		key := ""
		for _, c := range req.Payload.Request.Choices {
			if c.Kind == acpKind[action] || (c.Kind == "" && c.Key == action) {
				key = c.Key
				break
			}
		}
		if key != "" {
			p["response"] = map[string]any{"optionId": key}
		}
	}
	return jsonenc.MustMarshal(p)
}
