package acpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// JSON-RPC 2.0 and ACP error codes (acp.md §1.4).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
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

// jsonrpcVersion is the only accepted "jsonrpc" member.
const jsonrpcVersion = "2.0"

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

// wireMessage is the union of JSON-RPC request, notification and response.
type wireMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

// errNotJSONRPC marks a stdout line that is not a JSON-RPC 2.0 message.
var errNotJSONRPC = errors.New("not a json-rpc 2.0 message")

// decodeMessage parses one line. It accepts exactly one JSON object with
// jsonrpc "2.0" that is a request (method + id), a notification (method, no
// id) or a response (id + exactly one of result / error).
func decodeMessage(line []byte) (wireMessage, error) {
	var m wireMessage
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&m); err != nil {
		return wireMessage{}, errNotJSONRPC
	}
	if dec.More() {
		return wireMessage{}, errNotJSONRPC
	}
	if m.JSONRPC != jsonrpcVersion {
		return wireMessage{}, errNotJSONRPC
	}
	hasID := len(m.ID) > 0 && !bytes.Equal(m.ID, []byte("null"))
	switch {
	case m.Method != "":
		if m.Result != nil || m.Error != nil {
			return wireMessage{}, errNotJSONRPC
		}
		if hasID && !validID(m.ID) {
			return wireMessage{}, errNotJSONRPC
		}
		if !hasID {
			m.ID = nil
		}
	case hasID || m.Error != nil:
		// A response; an error response may carry a null id (parse errors).
		if (m.Result != nil) == (m.Error != nil) {
			return wireMessage{}, errNotJSONRPC
		}
		if hasID && !validID(m.ID) {
			return wireMessage{}, errNotJSONRPC
		}
		if !hasID {
			m.ID = nil
		}
	default:
		return wireMessage{}, errNotJSONRPC
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

// idKey is the canonical table key of a JSON-RPC id (its compact JSON text).
func idKey(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return string(raw)
	}
	return buf.String()
}

// encodeLine marshals one message and appends the line terminator. JSON
// encoding escapes control characters, so the line never embeds a newline.
func encodeLine(m any) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode json-rpc message: %w", err)
	}
	return append(b, '\n'), nil
}

type outRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      int64  `json:"id"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

type outNotification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

type outResult struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result"`
}

type outError struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   RPCError        `json:"error"`
}
