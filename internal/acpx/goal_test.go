package acpx

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// TestInitializeRecordsGoalCapability: initialize's top-level _meta.goal
// lands in the record; a later initialize without it (a resumed session
// on an agent that dropped it) clears it.
func TestInitializeRecordsGoalCapability(t *testing.T) {
	c := NewClient(provider.Record{}, ClientOptions{})
	call, err := c.Initialize()
	require.NoError(t, err)
	msgs, err := c.Feed([]byte(`{"jsonrpc":"2.0","id":` + jsonInt(call.ID) + `,"result":{"protocolVersion":1,"agentCapabilities":{},` +
		`"_meta":{"goal":{"version":1,"controlMethod":"_session/goal","actions":["set","clear"]}}}}` + "\n"))
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.True(t, c.Goal().Capability.Available())
	rec := c.Record()
	require.True(t, rec.Goal.Capability.Allows(provider.GoalSet), "kept in the durable record")

	call, err = c.Initialize()
	require.NoError(t, err)
	_, err = c.Feed([]byte(`{"jsonrpc":"2.0","id":` + jsonInt(call.ID) + `,"result":{"protocolVersion":1}}` + "\n"))
	require.NoError(t, err)
	require.Nil(t, c.Goal().Capability)
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// FuzzDecodeGoalMeta: any session_info_update _meta decodes to a snapshot
// within its bounds, a cleared goal, no goal, or an ErrGoalMeta error;
// never a panic; a decoded snapshot always projects to valid JSON.
func FuzzDecodeGoalMeta(f *testing.F) {
	for _, s := range []string{
		`{"goal":{"objective":"Ship","status":"active","createdAt":1710000000000,"tokensUsed":42}}`,
		`{"goal":{"objective":"x","status":"complete","updatedAt":"2024-03-09T16:00:12Z","completedAt":null}}`,
		`{"goal":null}`, `{"goal":{}}`, `{"goal":1}`, `{}`, `null`, `[]`, ``, `{"goal":{"objective":"\u00ff","status":"paused","createdAt":1e300}}`,
	} {
		f.Add([]byte(s))
	}
	caps := &provider.GoalCapability{Version: 1, ControlMethod: provider.MethodSessionGoal, Actions: []string{"set", "clear"}}
	f.Fuzz(func(t *testing.T, b []byte) {
		snap, present, err := provider.DecodeGoalMeta(b)
		if err != nil {
			if snap != nil {
				t.Fatal("an error with a snapshot")
			}
			return
		}
		if snap == nil {
			return
		}
		if !present || snap.Objective == "" || utf8.RuneCountInString(snap.Objective) > provider.MaxGoalObjectiveChars || !utf8.ValidString(snap.Objective) {
			t.Fatalf("snapshot out of bounds: %+v", snap)
		}
		out, err := json.Marshal(provider.GoalRecord{Capability: caps, Snapshot: snap}.Project(1, false, ""))
		if err != nil || !json.Valid(out) {
			t.Fatalf("projection does not encode: %v", err)
		}
	})
}

// FuzzDecodeGoalCapability: any initialize _meta yields a capability or
// nil, never a panic.
func FuzzDecodeGoalCapability(f *testing.F) {
	for _, s := range []string{`{"goal":{"version":1,"controlMethod":"_session/goal","actions":["set","pause","resume","clear"]}}`,
		`{"goal":null}`, `{"goal":{"actions":"set"}}`, `[]`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c := provider.DecodeGoalCapability(b)
		_ = provider.GoalCaps(c)
		_ = c.Allows(provider.GoalSet)
	})
}
