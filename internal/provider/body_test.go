package provider

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// textUpdate is an update whose content text is text, JSON-encoded.
func textUpdate(t *testing.T, format, text string) SessionUpdate {
	t.Helper()
	b, err := json.Marshal(text)
	require.NoError(t, err)
	return upd(t, strings.Replace(format, "TEXT", string(b), 1))
}

// TestBodyTextOnCarriers: the events that may carry outputBody
// (workspace.md §7.2) get their full text as Body when it exceeds 4,000
// bytes: a message's and a thought's item.completed (the whole text
// accumulated across chunks, past the 64 KiB inline bound) and a tool's
// tool.execution.completed. Every provider maps through this one Mapper,
// so ACP, Codex and OpenCode alike. No delta and no short text has one.
func TestBodyTextOnCarriers(t *testing.T) {
	mp, st := testMapper(), &MapState{}
	var evs []Event
	evs = append(evs, mp.TurnStarted(st, "turn-1")...)
	part := strings.Repeat("m", 50_000)
	for range 2 {
		evs = append(evs, mp.Update(st, "turn-1", textUpdate(t, `{"sessionUpdate":"agent_message_chunk","messageId":"m-1","content":{"type":"text","text":TEXT}}`, part))...)
	}
	evs = append(evs, mp.Update(st, "turn-1", textUpdate(t, `{"sessionUpdate":"agent_thought_chunk","messageId":"th-1","content":{"type":"text","text":TEXT}}`, strings.Repeat("t", 4000)))...)
	evs = append(evs, mp.Update(st, "turn-1", upd(t, `{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Run","kind":"execute","status":"pending"}`))...)
	evs = append(evs, mp.Update(st, "turn-1", textUpdate(t, `{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","content":[{"type":"content","content":{"type":"text","text":TEXT}}]}`, strings.Repeat("o", 5000)))...)
	evs = append(evs, mp.Settle(st, Settlement{TurnID: "turn-1", Ending: EndCompleted, StopReason: StopEndTurn})...)

	bodies := map[string]Event{}
	for _, e := range evs {
		if e.Body == "" {
			continue
		}
		key := e.EventType
		if k, _ := e.Payload["kind"].(string); k != "" {
			key += ":" + k
		}
		bodies[key] = e
	}
	require.Len(t, bodies, 2, "the 4,000-byte thought has no body: %v", bodies)
	msg := bodies[prp.EventItemCompleted+":assistant_message"]
	require.Len(t, msg.Body, 100_000, "the whole message, past the inline bound")
	require.Len(t, msg.Payload["text"], maxItemText)
	require.Equal(t, true, msg.Payload["textTruncated"])
	require.Equal(t, "text", msg.BodyField)
	tool := bodies[prp.EventToolExecutionCompleted]
	require.Equal(t, strings.Repeat("o", 5000), tool.Body)
	require.Equal(t, "output", tool.BodyField)
	require.Equal(t, "outputTruncated", tool.BodyTruncatedField)
}
