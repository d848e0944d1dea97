package state

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

func validatePayload(t *testing.T, sch *jsonschema.Schema, wire []byte) {
	t.Helper()
	var env struct {
		Payload json.RawMessage `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(wire, &env))
	require.NoError(t, prpschema.Validate(sch, env.Payload), "event %s", env.Payload)
}

// Emitted envelopes match the reference event.schema.json (v1) and
// event-v2.schema.json, including a v2 event downgraded for a v1 link.
func TestEmittedEventsMatchReferenceSchema(t *testing.T) {
	schemas := prpschema.Load(t)
	v1, v2 := schemas.EventV1, schemas.EventV2
	s, cfg := newStore(t)
	require.NoError(t, s.Update(func(tx *Tx) error {
		for _, ev := range []Event{
			{Type: "runner.connected", Priority: P0, Payload: json.RawMessage(`{}`)},
			{Type: "item.delta", Priority: P2, CoalesceKey: "i", Payload: json.RawMessage(`{"channel":"progress","delta":"he"}`)},
			{Type: "item.delta", Priority: P2, CoalesceKey: "i", Payload: json.RawMessage(`{"channel":"progress","delta":"llo"}`)},
			{Type: "turn.completed", Priority: P0, Payload: json.RawMessage(`{"providerTurnId":"t1"}`)},
			{Type: "run.terminal", Priority: P0, Payload: json.RawMessage(`{"schema":"paperclip.prp.terminal.v1","turnTerminalState":"completed","runTerminalState":"succeeded","reportedWorkDisposition":"done"}`)},
			{Type: "session.goal.updated", Priority: P1, Payload: json.RawMessage(`{"goal":{"objective":"x","status":"active","tokenBudget":null,"tokensUsed":null,"elapsedSeconds":null,"iterations":null,"lastReason":null,"createdAt":null,"updatedAt":null,"completedAt":null,"workingNow":true}}`)},
		} {
			if _, err := tx.Enqueue(ev); err != nil {
				return err
			}
		}
		_, _, err := tx.enqueueExecutor("provider:1", Event{Type: "item.started", Priority: P1, Payload: json.RawMessage(`{}`)})
		return err
	}))
	require.NoError(t, s.Close())
	s = openStore(t, cfg) // adds runner.reconciled

	// The schema has teeth: a wrong priority is refused.
	bad, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(`{"schema":"paperclip.prp.event.v1","sourceEventId":"e","sourceSeq":1,"sourceInstanceId":"r","sourceKind":"runner","runId":"x","eventType":"item.delta","schemaVersion":1,"priority":7,"emittedAt":"2026-11-30T12:00:00.000Z","payload":{}}`)))
	require.NoError(t, err)
	require.Error(t, v1.Validate(bad))

	for _, e := range s.Unacked() {
		if e.EventType == "session.goal.updated" {
			w, err := e.Wire(2)
			require.NoError(t, err)
			validatePayload(t, v2, w)
			w, err = e.Wire(1)
			require.NoError(t, err)
			validatePayload(t, v1, w)
			continue
		}
		w, err := e.Wire(1)
		require.NoError(t, err)
		validatePayload(t, v1, w)
	}
}
