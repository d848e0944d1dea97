package acpx

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// testWait bounds every wait in these tests; it is a safety net, never an
// asserted figure.
const testWait = 15 * time.Second

// recv receives from ch within testWait (every wait in a test is bounded).
func recv[T any](t testing.TB, ch <-chan T) (T, bool) {
	t.Helper()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-time.After(testWait):
		t.Fatalf("no value within %v", testWait)
		var zero T
		return zero, false
	}
}

// first is recv's value alone.
func first[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	v, _ := recv(t, ch)
	return v
}

func settled(m provider.Inbound) bool { return m.Kind == provider.KindTurnSettled }

// testSecret is a credential-shaped value the tests plant in every input.
const testSecret = "sk-test-SECRET-value-0123456789abcdef"

// redacted is what the Redactor puts in place of a secret.
const redacted = "[REDACTED]"

func testMapper() provider.Mapper {
	return provider.Mapper{Redactor: provider.NewRedactor(testSecret, "short"), Provider: "claude", Cwd: "/work/repo"}
}

func upd(t *testing.T, raw string) provider.SessionUpdate {
	t.Helper()
	u, err := provider.DecodeSessionUpdate(json.RawMessage(raw))
	require.NoError(t, err)
	return u
}

// envelope wraps an event description the way runnerd's outbox will.
func envelope(seq int, ev provider.Event) map[string]any {
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
func requireValidEvents(t *testing.T, evs []provider.Event) {
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

// types lists the event types of evs.
func types(evs []provider.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.EventType)
	}
	return out
}
