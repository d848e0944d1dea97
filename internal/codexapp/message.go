package codexapp

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// Message is one decoded app-server line. The app-server omits
// "jsonrpc":"2.0" (its JSONRPCMessage has no such member), so it is
// accepted absent or "2.0".
type Message struct {
	ID     json.RawMessage    `json:"id,omitempty"`
	Method string             `json:"method,omitempty"`
	Params json.RawMessage    `json:"params,omitempty"`
	Result json.RawMessage    `json:"result,omitempty"`
	Error  *provider.RPCError `json:"error,omitempty"`
}

// Kinds of message.
const (
	kindRequest = iota + 1
	kindNotification
	kindResponse
)

var errNotMessage = errors.New("decode app-server line: not a JSON-RPC message")

// decodeMessage decodes one line. An id must be a number or a string; a
// message is a request (id and method), a notification (method), or a
// response (id and exactly one of result and error).
func decodeMessage(line []byte) (Message, int, error) {
	var w struct {
		JSONRPC *string `json:"jsonrpc"`
		Message
	}
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if err := d.Decode(&w); err != nil {
		return Message{}, 0, errNotMessage
	}
	if d.More() {
		return Message{}, 0, errNotMessage
	}
	m := w.Message
	if w.JSONRPC != nil && *w.JSONRPC != "2.0" {
		return Message{}, 0, errNotMessage
	}
	if m.ID != nil && !validID(m.ID) {
		return Message{}, 0, errNotMessage
	}
	switch {
	case m.Method != "" && m.ID != nil:
		return m, kindRequest, nil
	case m.Method != "":
		return m, kindNotification, nil
	case m.ID != nil && (m.Result != nil) != (m.Error != nil):
		return m, kindResponse, nil
	}
	return Message{}, 0, errNotMessage
}

func validID(id json.RawMessage) bool {
	id = bytes.TrimSpace(id)
	if len(id) == 0 {
		return false
	}
	switch id[0] {
	case '"':
		var s string
		return json.Unmarshal(id, &s) == nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var n json.Number
		return json.Unmarshal(id, &n) == nil
	}
	return false
}
