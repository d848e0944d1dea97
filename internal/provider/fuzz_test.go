package provider

import "testing"

// FuzzDecodeMessage checks the JSON-RPC classifier never accepts a message
// that is not exactly one of request, notification or response.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"m"}`,
		`{"jsonrpc":"2.0","method":"m"}`,
		`{"jsonrpc":"2.0","id":1,"result":null}`,
		`{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":""}}`,
		`{"jsonrpc":"1.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":{"x":1},"method":"m"}`,
		`{"jsonrpc":"2.0","id":1.5,"result":{}} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := DecodeMessage(line)
		if err != nil {
			return
		}
		if m.JSONRPC != "2.0" {
			t.Fatal("accepted a non-2.0 message")
		}
		if m.Method == "" && m.Result != nil && m.Error != nil {
			t.Fatal("accepted a response with both result and error")
		}
		if m.ID != nil && !validID(m.ID) {
			t.Fatal("accepted an invalid id")
		}
	})
}

// FuzzDecodeSessionUpdate maps arbitrary update objects; the mapper must
// never panic and every event must carry a payload.
func FuzzDecodeSessionUpdate(f *testing.F) {
	for _, s := range []string{
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}`,
		`{"sessionUpdate":"tool_call","toolCallId":"c","title":"t","locations":[{"path":"/a/../b"}],"content":[{"type":"diff","path":"/w/x","newText":"n"}]}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"c","status":"failed","content":null}`,
		`{"sessionUpdate":"plan","entries":[{"content":"a","priority":"x","status":"weird"}]}`,
		`{"sessionUpdate":"usage_update","used":1,"size":2,"cost":{"amount":-1,"currency":"EUR"}}`,
		`{"sessionUpdate":"session_info_update","title":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		u, err := DecodeSessionUpdate(raw)
		if err != nil {
			return
		}
		mp := Mapper{Cwd: "/w"}
		st := &MapState{}
		mp.TurnStarted(st, "turn-1")
		for _, e := range append(mp.Update(st, "turn-1", u), mp.Settle(st, Settlement{TurnID: "turn-1", Ending: EndCompleted, StopReason: "end_turn"})...) {
			if e.Payload == nil {
				t.Fatalf("%s without payload", e.EventType)
			}
		}
	})
}
