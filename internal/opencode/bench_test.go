package opencode

import (
	"encoding/json"
	"strconv"
	"testing"
)

// BenchmarkTranslateDelta is the per-delta cost of the translation (one
// message.part.delta decoded and mapped to an agent_message_chunk).
func BenchmarkTranslateDelta(b *testing.B) {
	st := &State{SessionID: "ses_1"}
	st.startTurn("turn-1")
	st.TurnUser = "msg_1"
	st.Assistant = []string{"msg_2"}
	st.fullPart(Part{ID: "prt_1", MessageID: "msg_2", Type: partText, Time: &PartTimes{Start: 1}}, false)
	data, _ := json.Marshal(map[string]any{"id": "evt_1", "type": eventPartDelta, "properties": map[string]any{
		"sessionID": "ses_1", "messageID": "msg_2", "partID": "prt_1", "field": "text", "delta": "token "}})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ev, err := decodeEvent(data)
		if err != nil {
			b.Fatal(err)
		}
		if in := translate(st, ev); len(in) != 1 {
			b.Fatal("no chunk at " + strconv.Itoa(i))
		}
	}
}
