package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// JSON-RPC 2.0 and ACP error codes (acp.md §1.4).
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	// CodeRequestCancelled answers a request aborted by $/cancel_request.
	CodeRequestCancelled = -32800
	// CodeAuthRequired is ACP's "authentication required".
	CodeAuthRequired = -32000
	// CodeResourceNotFound is ACP's "resource not found" (unknown session).
	CodeResourceNotFound = -32002
)

// ClientError is an agent's request that runnerd, as the ACP client (its
// file system and terminals, tools.md §8), refuses: Code and Message are
// sent back as the JSON-RPC error. Message is runnerd's own fixed text plus
// what the agent itself sent (a path), never file contents or output.
type ClientError struct {
	Code    int
	Message string
}

func (e *ClientError) Error() string { return e.Message }

// JSONRPCVersion is the only accepted "jsonrpc" member.
const JSONRPCVersion = "2.0"

// RPCError is a JSON-RPC error object. Message and Data are peer text: they
// may be logged only after redaction and never leave the process in a PRP
// payload or a command result.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Error reports only the code: the message is untrusted peer text.
func (e *RPCError) Error() string { return "acp rpc error " + strconv.Itoa(e.Code) }

// WireMessage is the union of JSON-RPC request, notification and response.
type WireMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

// errNotJSONRPC marks a stdout line that is not a JSON-RPC 2.0 message.
var errNotJSONRPC = errors.New("not a json-rpc 2.0 message")

// DecodeMessage parses one line. It accepts exactly one JSON object with
// jsonrpc "2.0" that is a request (method + id), a notification (method, no
// id) or a response (id + exactly one of result / error).
func DecodeMessage(line []byte) (WireMessage, error) {
	var m WireMessage
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&m); err != nil {
		return WireMessage{}, errNotJSONRPC
	}
	if dec.More() {
		return WireMessage{}, errNotJSONRPC
	}
	if m.JSONRPC != JSONRPCVersion {
		return WireMessage{}, errNotJSONRPC
	}
	hasID := len(m.ID) > 0 && !bytes.Equal(m.ID, []byte("null"))
	switch {
	case m.Method != "":
		if m.Result != nil || m.Error != nil {
			return WireMessage{}, errNotJSONRPC
		}
		if hasID && !validID(m.ID) {
			return WireMessage{}, errNotJSONRPC
		}
		if !hasID {
			m.ID = nil
		}
	case hasID || m.Error != nil:
		// A response; an error response may carry a null id (parse errors).
		if (m.Result != nil) == (m.Error != nil) {
			return WireMessage{}, errNotJSONRPC
		}
		if hasID && !validID(m.ID) {
			return WireMessage{}, errNotJSONRPC
		}
		if !hasID {
			m.ID = nil
		}
	default:
		return WireMessage{}, errNotJSONRPC
	}
	return m, nil
}

// validID accepts the JSON-RPC id forms: a string or an integer.
func validID(raw json.RawMessage) bool {
	switch raw[0] {
	case '"':
		var s string
		return json.Unmarshal(raw, &s) == nil
	default:
		_, err := strconv.ParseInt(string(raw), 10, 64)
		return err == nil
	}
}

// IDKey is the canonical table key of a JSON-RPC id (its compact JSON text).
func IDKey(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return string(raw)
	}
	return buf.String()
}

// Dialect is how one line protocol writes JSON-RPC. ACP sends
// "jsonrpc":"2.0" and escapes HTML characters as encoding/json does by
// default; Codex's app-server has no jsonrpc member and its lines are
// written without HTML escaping. Every request and answer of every driver
// is encoded here.
type Dialect struct {
	// Version is the "jsonrpc" member; "" omits it.
	Version string
	// EscapeHTML escapes <, > and & in strings.
	EscapeHTML bool
}

// encode marshals one message and appends the line terminator. JSON
// encoding escapes control characters, so the line never embeds a newline.
func (d Dialect) encode(m any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(d.EscapeHTML)
	if err := e.Encode(m); err != nil {
		return nil, fmt.Errorf("encode json-rpc message: %w", err)
	}
	return b.Bytes(), nil // Encode ends with the newline
}

// Request encodes a request with w's next durable id and records it
// pending in w.
func (d Dialect) Request(w *WireState, method string, params any, turnID string) (Call, error) {
	id := w.NextRequestID
	line, err := d.encode(outRequest{JSONRPC: d.Version, ID: id, Method: method, Params: params})
	if err != nil {
		return Call{}, err
	}
	w.NextRequestID++
	w.Pending[id] = PendingRequest{Method: method, TurnID: turnID}
	return Call{ID: id, Line: line}, nil
}

// Notify encodes a notification.
func (d Dialect) Notify(method string, params any) ([]byte, error) {
	return d.encode(outNotification{JSONRPC: d.Version, Method: method, Params: params})
}

// Respond answers the agent request id pending in w with result and
// forgets it; ErrUnknownAgentCall if it is not pending.
func (d Dialect) Respond(w *WireState, id json.RawMessage, result any) ([]byte, error) {
	return d.answer(w, id, func(key string) any {
		return outResult{JSONRPC: d.Version, ID: json.RawMessage(key), Result: result}
	})
}

// RespondError answers the agent request id pending in w with an error
// and forgets it; ErrUnknownAgentCall if it is not pending.
func (d Dialect) RespondError(w *WireState, id json.RawMessage, code int, message string) ([]byte, error) {
	return d.answer(w, id, func(key string) any {
		return outError{JSONRPC: d.Version, ID: json.RawMessage(key), Error: RPCError{Code: code, Message: message}}
	})
}

func (d Dialect) answer(w *WireState, id json.RawMessage, msg func(key string) any) ([]byte, error) {
	key := IDKey(id)
	if _, ok := w.AgentRequests[key]; !ok {
		return nil, ErrUnknownAgentCall
	}
	line, err := d.encode(msg(key))
	if err != nil {
		return nil, err
	}
	delete(w.AgentRequests, key)
	return line, nil
}

type outRequest struct {
	JSONRPC string `json:"jsonrpc,omitempty"`
	ID      int64  `json:"id"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

type outNotification struct {
	JSONRPC string `json:"jsonrpc,omitempty"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

type outResult struct {
	JSONRPC string          `json:"jsonrpc,omitempty"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result"`
}

type outError struct {
	JSONRPC string          `json:"jsonrpc,omitempty"`
	ID      json.RawMessage `json:"id"`
	Error   RPCError        `json:"error"`
}
