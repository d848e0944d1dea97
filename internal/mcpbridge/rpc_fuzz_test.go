package mcpbridge

import (
	"encoding/json"
	"testing"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// FuzzDecodeRequest: the JSON-RPC decoder never panics; what it accepts is
// a well-formed message (a request has a string or number id, params are an
// object), tools/call params decode to a name and object arguments, and
// every answer the server would write is valid JSON.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`,
		`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x","arguments":{"k":[1,2]}}}`,
		`{"jsonrpc":"2.0","id":-1.5e3,"method":"tools/call","params":{"name":"x\u0000","arguments":null}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a"}}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":null,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"Method":"ping","method":"ping"}`,
		` {"jsonrpc":"2.0","id":{},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}`,
		`{`, ``, `null`, `"x"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, rerr := decodeMessage(data)
		if rerr != nil {
			if m.Kind != 0 {
				t.Fatalf("error %v with kind %d", rerr, m.Kind)
			}
			checkJSON(t, jsonenc.MustMarshal(response{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: rerr}))
			return
		}
		if m.Params != nil && (!json.Valid(m.Params) || m.Params[0] != '{') {
			t.Fatalf("params %q", m.Params)
		}
		switch m.Kind {
		case kindRequest:
			if !json.Valid(m.ID) || (m.ID[0] != '"' && m.ID[0] != '-' && (m.ID[0] < '0' || m.ID[0] > '9')) {
				t.Fatalf("request id %q", m.ID)
			}
			reply := response{JSONRPC: "2.0", ID: m.ID, Error: errNoMethod}
			if m.Method == "tools/call" {
				p, perr := decodeCallParams(m.Params)
				if perr == nil {
					if !json.Valid(p.Arguments) || p.Arguments[0] != '{' {
						t.Fatalf("arguments %q", p.Arguments)
					}
					reply.Error = nil
					reply.Result = jsonenc.MustMarshal(toolResult{Content: []textContent{{Type: "text", Text: p.Name}}})
				} else {
					reply.Error = perr
				}
			}
			checkJSON(t, jsonenc.MustMarshal(reply))
		case kindNotification:
			if m.ID != nil {
				t.Fatal("notification with an id")
			}
			if id, err := decodeCancelled(m.Params); err == nil && !json.Valid(id) {
				t.Fatalf("cancelled id %q", id)
			}
		case kindResponse:
			if m.Method != "" {
				t.Fatal("response with a method")
			}
		default:
			t.Fatalf("kind %d", m.Kind)
		}
	})
}

func checkJSON(t *testing.T, b []byte) {
	t.Helper()
	if !json.Valid(b) {
		t.Fatalf("answer is not JSON: %q", b)
	}
}
