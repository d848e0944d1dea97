package mcpbridge

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"unicode"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// Tool errors the bridge answers itself (tools.md §2).
const (
	TextUnsupportedTool = "Unsupported tool."
	TextTooManyPending  = "Too many pending tool calls."
)

// Fixed answers (tools.md §2), encoded once.
var (
	initializeResult = json.RawMessage(`{"protocolVersion":"` + protocolVersion +
		`","capabilities":{"tools":{"listChanged":false}},"serverInfo":{"name":"paperclip-runner","version":"1"}}`)
	emptyResult = json.RawMessage(`{}`)
	// defaultInputSchema stands in for a tool without one: MCP requires an
	// object schema on every listed tool.
	defaultInputSchema = json.RawMessage(`{"type":"object"}`)
)

// serveMessage decodes the body and answers it.
func (s *Server) serveMessage(w http.ResponseWriter, r *http.Request, body []byte) {
	m, rerr := decodeMessage(body)
	if rerr != nil {
		s.log.Debug("mcp message refused", "code", rerr.Code)
		writeJSON(w, http.StatusBadRequest, response{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: rerr})
		return
	}
	switch m.Kind {
	case kindResponse:
		w.WriteHeader(http.StatusAccepted)
	case kindNotification:
		if m.Method == "notifications/cancelled" {
			if id, err := decodeCancelled(m.Params); err == nil {
				s.cancelCall(id)
			}
		}
		w.WriteHeader(http.StatusAccepted)
	case kindRequest:
		s.serveRequest(w, r, m)
	}
}

// response is a JSON-RPC 2.0 response.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

func (s *Server) serveRequest(w http.ResponseWriter, r *http.Request, m message) {
	reply := response{JSONRPC: "2.0", ID: m.ID}
	switch m.Method {
	case "initialize":
		w.Header().Set("Mcp-Session-Id", s.sessionID)
		reply.Result = initializeResult
	case "ping":
		reply.Result = emptyResult
	case "tools/list":
		list, err := s.toolsList()
		if err != nil {
			s.log.Error("mcp tools/list unencodable")
			reply.Error = errInternal
			break
		}
		reply.Result = list
	case "tools/call":
		p, rerr := decodeCallParams(m.Params)
		if rerr != nil {
			reply.Error = rerr
			break
		}
		res, ok := s.call(r.Context(), m.ID, p)
		if !ok {
			// Cancelled: MCP sends no response to a cancelled request, and
			// the connection may be gone already. Abort the exchange
			// instead of letting net/http write an empty 200.
			panic(http.ErrAbortHandler)
		}
		reply.Result = jsonenc.MustMarshal(toolResult{
			Content: []textContent{{Type: "text", Text: res.Text}},
			IsError: res.IsError,
		})
	default:
		reply.Error = errNoMethod
	}
	writeJSON(w, http.StatusOK, reply)
}

type toolResult struct {
	Content []textContent `json:"content"`
	IsError bool          `json:"isError"`
}

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func (s *Server) toolsList() (json.RawMessage, error) {
	var tools []Tool
	if s.tools != nil {
		tools = s.tools()
	}
	list := make([]Tool, len(tools))
	for i, t := range tools {
		if len(t.InputSchema) == 0 {
			t.InputSchema = defaultInputSchema
		}
		list[i] = t
	}
	return jsonenc.Marshal(struct {
		Tools []Tool `json:"tools"`
	}{list})
}

// call runs one tools/call: the bridge's own refusals, else the Handler
// under a ctx that the connection, notifications/cancelled and Close
// cancel. ok is false when that ctx was cancelled (the result is dropped).
func (s *Server) call(ctx context.Context, id json.RawMessage, p callParams) (res Result, ok bool) {
	if !toolNameOK(p.Name) {
		return Result{Text: TextUnsupportedTool, IsError: true}, true
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pc := &pendingCall{cancel: cancel}
	switch s.admit(string(id), pc) {
	case admitClosed:
		return Result{}, false
	case admitFull:
		s.log.Debug("mcp tools/call refused", "reason", "too many pending")
		return Result{Text: TextTooManyPending, IsError: true}, true
	}
	defer s.release(string(id), pc)
	res = s.handler.CallTool(ctx, Call{
		SessionID: s.sessionID,
		RequestID: id,
		Name:      p.Name,
		Arguments: p.Arguments,
	})
	if ctx.Err() != nil {
		return Result{}, false
	}
	return res, true
}

// toolNameOK refuses the empty name and any control character (NUL, C0,
// DEL, C1): tools.md §2.
func toolNameOK(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v response) {
	body := jsonenc.MustMarshal(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
