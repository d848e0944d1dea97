package state

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/pcrunner/pcrunner/internal/sharedtest"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// eventSchemas compiles the reference event schemas (v1 and v2) from the
// share. Schemas the share does not hold resolve to "accept anything".
func eventSchemas(t *testing.T) (v1, v2 *jsonschema.Schema) {
	t.Helper()
	dir := sharedtest.Path(t, "reference", "paperclip-protocol", "schemas")
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseRegexpEngine(lenientRegexp)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		require.NoError(t, err)
		id, _ := doc.(map[string]any)["$id"].(string)
		require.NotEmpty(t, id, e.Name())
		require.NoError(t, c.AddResource(id, doc))
	}
	anything := map[string]any{"$defs": map[string]any{"capability": map[string]any{}, "snapshot": map[string]any{"type": "object"}}}
	for _, missing := range []string{"prp/v1/semantic-tool", "prp/v1/workspace-diff", "prp/v1/workspace-file-reference", "prp/v2/session-goal"} {
		require.NoError(t, c.AddResource("https://paperclip.dev/schemas/"+missing+".schema.json", anything))
	}
	v1, err = c.Compile("https://paperclip.dev/schemas/prp/v1/event.schema.json")
	require.NoError(t, err)
	v2, err = c.Compile("https://paperclip.dev/schemas/prp/v2/event.schema.json")
	require.NoError(t, err)
	return v1, v2
}

func validatePayload(t *testing.T, sch *jsonschema.Schema, wire []byte) {
	t.Helper()
	var env struct {
		Payload json.RawMessage `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(wire, &env))
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(env.Payload))
	require.NoError(t, err)
	require.NoError(t, sch.Validate(doc), "event %s", env.Payload)
}

// Emitted envelopes match the reference event.schema.json (v1) and
// event-v2.schema.json, including a v2 event downgraded for a v1 link.
func TestEmittedEventsMatchReferenceSchema(t *testing.T) {
	v1, v2 := eventSchemas(t)
	s, cfg := newStore(t)
	require.NoError(t, s.Update(func(tx *Tx) error {
		for _, ev := range []Event{
			{Type: "runner.connected", Priority: P0, Payload: json.RawMessage(`{}`)},
			{Type: "item.delta", Priority: P2, CoalesceKey: "i", Payload: json.RawMessage(`{"channel":"progress","delta":"he"}`)},
			{Type: "item.delta", Priority: P2, CoalesceKey: "i", Payload: json.RawMessage(`{"channel":"progress","delta":"llo"}`)},
			{Type: "turn.completed", Priority: P0, Payload: json.RawMessage(`{"providerTurnId":"t1"}`)},
			{Type: "run.terminal", Priority: P0, Payload: json.RawMessage(`{"schema":"paperclip.prp.terminal.v1","turnTerminalState":"completed","runTerminalState":"succeeded","reportedWorkDisposition":"done"}`)},
			{Type: "session.goal.updated", Priority: P1, Payload: json.RawMessage(`{"goal":{"objective":"x","status":"active"}}`)},
		} {
			if _, err := tx.Enqueue(ev); err != nil {
				return err
			}
		}
		_, _, err := tx.EnqueueExecutor("provider:1", Event{Type: "item.started", Priority: P1, Payload: json.RawMessage(`{}`)})
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

// lenientRegexp compiles with Go's regexp; a pattern Go cannot parse (the
// reference uses lookaheads for path safety, never on event envelopes)
// matches everything.
func lenientRegexp(pattern string) (jsonschema.Regexp, error) {
	if re, err := regexp.Compile(pattern); err == nil {
		return re, nil
	}
	return anyString(pattern), nil
}

type anyString string

func (a anyString) String() string        { return string(a) }
func (anyString) MatchString(string) bool { return true }
