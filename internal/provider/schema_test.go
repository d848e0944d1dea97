package provider

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// envelope wraps an event description the way runnerd's outbox will.
func envelope(seq int, ev Event) map[string]any {
	env := map[string]any{
		"schema":              "paperclip.prp.event.v1",
		"sourceEventId":       fmt.Sprintf("event_runner-1_%016d", seq),
		"sourceSeq":           seq,
		"sourceInstanceId":    "runner-1",
		"sourceKind":          "runner",
		"runId":               "run-1",
		"normalizedSessionId": "session-1",
		"eventType":           ev.EventType,
		"schemaVersion":       1,
		"priority":            ev.Priority,
		"emittedAt":           time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Format(time.RFC3339Nano),
		"payload":             ev.Payload,
	}
	if ev.TurnID != "" {
		env["turnId"] = ev.TurnID
	}
	if ev.ItemID != "" {
		env["itemId"] = ev.ItemID
	}
	return env
}

// requireValidEvents validates every event against event.schema.json and
// the finer schemas for usage receipts and runtime requests.
func requireValidEvents(t *testing.T, evs []Event) {
	t.Helper()
	s := prpschema.Load(t)
	for i, ev := range evs {
		require.NoError(t, prpschema.Validate(s.EventV1, envelope(i+1, ev)), "event %d %s", i, ev.EventType)
		switch ev.EventType {
		case "usage.reported":
			require.NoError(t, prpschema.Validate(s.Usage, ev.Payload), "usage payload %d", i)
		case "runtime_request.created":
			require.NoError(t, prpschema.Validate(s.Request, ev.Payload["request"]), "request payload %d", i)
		}
	}
}

// TestSchemaValidatorRejects proves the validator is live: a bad terminal
// payload and a bad tool target fail.
func TestSchemaValidatorRejects(t *testing.T) {
	s := prpschema.Load(t)
	bad := Event{EventType: "run.terminal", Priority: P0, Payload: map[string]any{"schema": "paperclip.prp.terminal.v1", "turnTerminalState": "done"}}
	require.Error(t, prpschema.Validate(s.EventV1, envelope(1, bad)))
	it := &ItemState{ItemID: "t-item-1", Operation: "read", Target: "/etc/passwd"}
	badTool := Event{EventType: "tool.execution.started", Priority: P1, Payload: Mapper{}.toolPayload(it, "running", "", false)}
	require.Error(t, prpschema.Validate(s.EventV1, envelope(1, badTool)))
}
