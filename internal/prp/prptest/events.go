package prptest

import (
	"encoding/json"
	"testing"
)

// Event is what tests check of a committed event: the runner event payload
// (prp.md §8.1) inside the envelope the core admitted.
type Event struct {
	SourceSeq     uint64          `json:"sourceSeq"`
	SourceEventID string          `json:"sourceEventId"`
	EventType     string          `json:"eventType"`
	Payload       json.RawMessage `json:"payload"`
}

// DecodeEvents decodes committed event envelopes (control.Snapshot.Events),
// failing t on a malformed one.
func DecodeEvents(t testing.TB, raw []json.RawMessage) []Event {
	t.Helper()
	out := make([]Event, 0, len(raw))
	for i, b := range raw {
		var env struct {
			Payload Event `json:"payload"`
		}
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatalf("decode event envelope %d: %v", i, err)
		}
		out = append(out, env.Payload)
	}
	return out
}

// OfType returns the events of type typ, in order.
func OfType(evs []Event, typ string) []Event {
	var out []Event
	for _, e := range evs {
		if e.EventType == typ {
			out = append(out, e)
		}
	}
	return out
}
