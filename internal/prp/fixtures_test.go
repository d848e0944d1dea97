package prp

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// Fixtures of package prp's own tests. The external tests (package
// prp_test, which run the runner half against a control.Core) keep their
// own copies: an external test package cannot see unexported test names.

var runnerIdentity = Identity{
	RunnerInstanceID: "runner_1", EnvironmentLeaseID: "env_1", RunID: "run_1",
	NormalizedSessionID: "session_1", TurnID: "turn_1", ItemID: "item_1",
}

const (
	runnerVer = "0.1.0"
	runnerDig = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
)

// eventEnvelope builds a runner event envelope with sourceSeq seq.
func eventEnvelope(t testing.TB, seq int64) []byte {
	t.Helper()
	payload := fmt.Appendf(nil, `{"schema":"paperclip.event.v1","sourceEventId":"event_runner_1_%016d","sourceSeq":%d,"sourceInstanceId":"runner_1","sourceKind":"runner","eventType":"runner.diagnostic","schemaVersion":1,"priority":1,"payload":{"note":"<&>"}}`, seq, seq)
	b, err := MarshalEnvelope(NewEventEnvelope(KindEvent, ProtocolVersion, runnerIdentity, payload))
	require.NoError(t, err)
	return b
}

var nextIdentity = Identity{
	RunnerInstanceID: "runner_1", EnvironmentLeaseID: "env_1", RunID: "run_2",
	NormalizedSessionID: "session_1", TurnID: "turn_2", ItemID: "item_2",
}

// attachPayload is a run.attach payload handing the runner to next over connection.
func attachPayload(next Identity, connection map[string]any) json.RawMessage {
	return jsonenc.MustMarshal(map[string]any{
		"provider":               map[string]any{"kind": "acpx", "agent": "fake"},
		"paperclipNextAuthority": map[string]any{"identity": next, "connection": connection},
	})
}
