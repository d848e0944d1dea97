package mcpbridge

import (
	"bytes"
	"encoding/json"
	"errors"
)

// JSON-RPC 2.0 error codes (jsonrpc.org/specification §5.1).
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
	codeInternalError  = -32603
)

// protocolVersion is the one MCP revision the bridge speaks (tools.md §2).
const protocolVersion = "2025-03-26"

// msgKind says what a decoded JSON-RPC message is.
type msgKind int

const (
	kindRequest      msgKind = iota + 1 // has an id and a method: gets one response
	kindNotification                    // a method, no id: 202
	kindResponse                        // result or error, no method: 202 (we send no requests)
)

// message is one decoded JSON-RPC 2.0 message.
type message struct {
	Kind   msgKind
	ID     json.RawMessage // compact; a string or a number (requests only)
	Method string
	Params json.RawMessage // nil when absent
}

// rpcError is a JSON-RPC error object. Messages are fixed texts: never
// input bytes.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

var (
	errParse        = &rpcError{codeParseError, "Parse error"}
	errBatch        = &rpcError{codeInvalidRequest, "Batch requests are not supported"}
	errInvalid      = &rpcError{codeInvalidRequest, "Invalid Request"}
	errNoMethod     = &rpcError{codeMethodNotFound, "Method not found"}
	errParamsObject = &rpcError{codeInvalidParams, "Invalid params: params must be an object"}
	errToolName     = &rpcError{codeInvalidParams, "Invalid params: name must be a string"}
	errToolArgs     = &rpcError{codeInvalidParams, "Invalid params: arguments must be an object"}
	errInternal     = &rpcError{codeInternalError, "Internal error"}
)

// decodeMessage reads one JSON-RPC 2.0 message. Keys are matched exactly
// (encoding/json's struct decoding would also take "Method" or "ID", so a
// map is decoded instead); "jsonrpc" must be "2.0"; an id is a string or a
// number (MCP forbids null); params, when present, is an object or null.
func decodeMessage(data []byte) (message, *rpcError) {
	data = bytes.TrimLeft(data, " \t\r\n")
	if !json.Valid(data) {
		return message{}, errParse
	}
	switch data[0] {
	case '[':
		return message{}, errBatch
	case '{':
	default:
		return message{}, errInvalid
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return message{}, errInvalid
	}
	var version string
	if err := json.Unmarshal(fields["jsonrpc"], &version); err != nil || version != "2.0" {
		return message{}, errInvalid
	}
	var m message
	if p, ok := fields["params"]; ok && !isNull(p) {
		if p[0] != '{' {
			return message{}, errParamsObject
		}
		m.Params = p
	}
	rawMethod, hasMethod := fields["method"]
	id, hasID := fields["id"]
	if hasID {
		if id[0] != '"' && id[0] != '-' && (id[0] < '0' || id[0] > '9') {
			return message{}, errInvalid
		}
		var buf bytes.Buffer
		_ = json.Compact(&buf, id) // valid: it came out of a valid document
		m.ID = buf.Bytes()
	}
	if !hasMethod {
		_, hasResult := fields["result"]
		_, hasError := fields["error"]
		if !hasID || hasResult == hasError {
			return message{}, errInvalid
		}
		m.Kind = kindResponse
		return m, nil
	}
	if err := json.Unmarshal(rawMethod, &m.Method); err != nil {
		return message{}, errInvalid
	}
	if hasID {
		m.Kind = kindRequest
	} else {
		m.Kind = kindNotification
	}
	return m, nil
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// callParams is tools/call's params.
type callParams struct {
	Name      string
	Arguments json.RawMessage // "{}" when absent or null
}

// decodeCallParams reads tools/call {name, arguments}; other keys (_meta)
// are ignored.
func decodeCallParams(params json.RawMessage) (callParams, *rpcError) {
	var fields map[string]json.RawMessage
	if params != nil {
		if err := json.Unmarshal(params, &fields); err != nil {
			return callParams{}, errParamsObject
		}
	}
	var p callParams
	raw, ok := fields["name"]
	if !ok || json.Unmarshal(raw, &p.Name) != nil || raw[0] != '"' {
		return callParams{}, errToolName
	}
	args, ok := fields["arguments"]
	switch {
	case !ok || isNull(args):
		p.Arguments = json.RawMessage("{}")
	case args[0] == '{':
		p.Arguments = args
	default:
		return callParams{}, errToolArgs
	}
	return p, nil
}

// decodeCancelled reads notifications/cancelled's requestId (compact).
func decodeCancelled(params json.RawMessage) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if params == nil {
		return nil, errors.New("no params")
	}
	if err := json.Unmarshal(params, &fields); err != nil {
		return nil, err
	}
	id, ok := fields["requestId"]
	if !ok || isNull(id) {
		return nil, errors.New("no request id")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, id); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
