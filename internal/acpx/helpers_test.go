package acpx

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
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

// types lists the event types of evs.
func types(evs []provider.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.EventType)
	}
	return out
}
