package provider

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// TestSchemaValidatorRejects proves the validator is live: a bad terminal
// payload and a bad tool target fail.
func TestSchemaValidatorRejects(t *testing.T) {
	s := prpschema.Load(t)
	bad := Event{EventType: "run.terminal", Priority: P0, Payload: map[string]any{"schema": "paperclip.prp.terminal.v1", "turnTerminalState": "done"}}
	require.Error(t, prpschema.Validate(s.EventV1, prpschema.Envelope(t, 1, bad)))
	it := &ItemState{ItemID: "t-item-1", Operation: "read", Target: "/etc/passwd"}
	badTool := Event{EventType: "tool.execution.started", Priority: P1, Payload: Mapper{}.toolPayload(it, "running", "", false)}
	require.Error(t, prpschema.Validate(s.EventV1, prpschema.Envelope(t, 1, badTool)))
}
