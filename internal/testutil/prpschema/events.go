package prpschema

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// description is the part of an event description (provider.Event) that
// reaches the envelope, read through its JSON so this package needs no
// provider import and any package's tests can use it.
type description struct {
	EventType string         `json:"eventType"`
	Priority  int            `json:"priority"`
	TurnID    string         `json:"turnId"`
	ItemID    string         `json:"itemId"`
	Payload   map[string]any `json:"payload"`
}

func describe(tb testing.TB, ev any) description {
	tb.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		tb.Fatalf("encode event description: %v", err)
	}
	var d description
	if err := json.Unmarshal(b, &d); err != nil {
		tb.Fatalf("decode event description: %v", err)
	}
	return d
}

// Envelope wraps an event description the way runnerd's outbox does, as
// event seq of a fixed runner, run and session.
func Envelope(tb testing.TB, seq int, ev any) map[string]any {
	tb.Helper()
	d := describe(tb, ev)
	env := map[string]any{
		"schema":              "paperclip.prp.event.v1",
		"sourceEventId":       fmt.Sprintf("event_runner-1_%016d", seq),
		"sourceSeq":           seq,
		"sourceInstanceId":    "runner-1",
		"sourceKind":          "runner",
		"runId":               "run-1",
		"normalizedSessionId": "session-1",
		"eventType":           d.EventType,
		"schemaVersion":       1,
		"priority":            d.Priority,
		"emittedAt":           time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Format(time.RFC3339Nano),
		"payload":             d.Payload,
	}
	if d.TurnID != "" {
		env["turnId"] = d.TurnID
	}
	if d.ItemID != "" {
		env["itemId"] = d.ItemID
	}
	return env
}

// RequireValidEvents validates each event description, wrapped by
// Envelope, against event.schema.json, and the payloads of usage receipts
// and runtime requests against their finer schemas, as the server does.
func RequireValidEvents[E any](tb testing.TB, evs []E) {
	tb.Helper()
	s := Load(tb)
	for i, ev := range evs {
		d := describe(tb, ev)
		if err := Validate(s.EventV1, Envelope(tb, i+1, ev)); err != nil {
			tb.Fatalf("event %d %s: %v", i, d.EventType, err)
		}
		switch d.EventType {
		case "usage.reported":
			if err := Validate(s.Usage, d.Payload); err != nil {
				tb.Fatalf("usage payload %d: %v", i, err)
			}
		case "runtime_request.created":
			if err := Validate(s.Request, d.Payload["request"]); err != nil {
				tb.Fatalf("request payload %d: %v", i, err)
			}
		}
	}
}
