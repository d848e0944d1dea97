package codexapp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// Call-site errors.
var (
	ErrNoThread = errors.New("codex thread not started")
	ErrNoTurn   = errors.New("no active codex turn")
	// ErrEarlyBound is more than MaxEarlyMessages or MaxEarlyBytes of
	// output before the thread id is known (codex.md §2).
	ErrEarlyBound = errors.New("too much app-server output before the thread started")
)

// Client is the Codex app-server client core over a provider.Core record:
// the record's wire state is its request table and line buffer, its
// session id the thread id, its active turn the turn. Not safe for
// concurrent use; the owner persists the record before writing any line
// a call returns (acp.md §3.2 holds here too).
type Client struct {
	cl     *provider.Core
	failed error
	// early and earlyBytes count what arrived before the thread id.
	early, earlyBytes int
	// Mapper maps what ACP has no session update for (usage).
	Mapper provider.Mapper
}

// New returns the client over cl's record.
func New(cl *provider.Core) *Client { return &Client{cl: cl} }

// dialect is the app-server's JSON-RPC: no "jsonrpc" member (its
// JSONRPCMessage has none), strings written without HTML escaping.
var dialect = provider.Dialect{}

func (c *Client) wire() *provider.WireState {
	w := c.cl.Wire()
	if w.Pending == nil {
		w.Pending = map[int64]provider.PendingRequest{}
	}
	if w.AgentRequests == nil {
		w.AgentRequests = map[string]provider.AgentRequest{}
	}
	if w.NextRequestID < 1 {
		w.NextRequestID = 1
	}
	return w
}

// ThreadID is the thread id, "" before thread/start answered.
func (c *Client) ThreadID() string { return c.cl.Live().ACPSessionID }

func (c *Client) request(method string, params any, turnID string) (provider.Call, error) {
	call, err := dialect.Request(c.wire(), method, params, turnID)
	if err != nil {
		return provider.Call{}, fmt.Errorf("encode %s: %w", method, err)
	}
	return call, nil
}

// Initialize is initialize (codex.md §2).
func (c *Client) Initialize() (provider.Call, error) {
	return c.request(MethodInitialize, InitializeParams{
		ClientInfo:   ClientInfo{Name: "paperclip-runnerd", Title: "Paperclip Runner", Version: "1"},
		Capabilities: InitializeCapabilities{ExperimentalAPI: true},
	}, "")
}

// Initialized is the notification that follows initialize's answer.
func (c *Client) Initialized() ([]byte, error) {
	return dialect.Notify(MethodInitialized, nil)
}

// ThreadStart is thread/start; the whole request is bounded.
func (c *Client) ThreadStart(p ThreadStartParams) (provider.Call, error) {
	if len(p.DynamicTools) > MaxDynamicTools {
		return provider.Call{}, fmt.Errorf("thread start: %d dynamic tools exceed %d", len(p.DynamicTools), MaxDynamicTools)
	}
	if p.DynamicTools == nil {
		p.DynamicTools = []DynamicTool{}
	}
	c.cl.Live().Cwd = p.Cwd
	call, err := c.request(MethodThreadStart, p, "")
	if err == nil && len(call.Line) > MaxThreadStartBytes {
		delete(c.wire().Pending, call.ID)
		return provider.Call{}, fmt.Errorf("thread start: request of %d bytes exceeds %d", len(call.Line), MaxThreadStartBytes)
	}
	return call, err
}

// ThreadResume is thread/resume of the recorded thread.
func (c *Client) ThreadResume(p ThreadResumeParams) (provider.Call, error) {
	if c.ThreadID() == "" {
		return provider.Call{}, fmt.Errorf("thread resume: %w", ErrNoThread)
	}
	p.ThreadID = c.ThreadID()
	p.ExcludeTurns = true
	return c.request(MethodThreadResume, p, "")
}

// ThreadRead is thread/read of the recorded thread, without its turns.
func (c *Client) ThreadRead() (provider.Call, error) {
	if c.ThreadID() == "" {
		return provider.Call{}, fmt.Errorf("thread read: %w", ErrNoThread)
	}
	return c.request(MethodThreadRead, ThreadReadParams{ThreadID: c.ThreadID()}, "")
}

// TurnStart starts turn turnID (runnerd's providerTurnId) with one text
// input and marks it active.
func (c *Client) TurnStart(turnID, text string) (provider.Call, error) {
	w := c.wire()
	if c.ThreadID() == "" {
		return provider.Call{}, fmt.Errorf("start turn: %w", ErrNoThread)
	}
	if w.Turn != nil {
		return provider.Call{}, provider.ErrTurnActive
	}
	if w.Loss != "" {
		return provider.Call{}, &provider.LostError{Reason: w.Loss}
	}
	call, err := c.request(MethodTurnStart, TurnStartParams{ThreadID: c.ThreadID(), Cwd: c.cl.Live().Cwd,
		Input: []UserInput{{Type: "text", Text: text, TextElements: []json.RawMessage{}}}}, turnID)
	if err != nil {
		return provider.Call{}, err
	}
	w.Turn = &provider.TurnState{ID: turnID, PromptRequestID: call.ID}
	c.cl.Live().Prompted = true
	return call, nil
}

// Steer is turn/steer of the active turn.
func (c *Client) Steer(text string) (provider.Call, error) {
	t := c.wire().Turn
	if t == nil || t.ProviderTurnID == "" {
		return provider.Call{}, ErrNoTurn
	}
	return c.request(MethodTurnSteer, TurnSteerParams{ThreadID: c.ThreadID(), ExpectedTurnID: t.ProviderTurnID,
		Input: []UserInput{{Type: "text", Text: text, TextElements: []json.RawMessage{}}}}, t.ID)
}

// Interrupt is turn/interrupt of the active turn; the app-server keeps
// running. Every open item/tool/call is answered with TextStopped.
func (c *Client) Interrupt() ([][]byte, error) {
	w := c.wire()
	t := w.Turn
	if t == nil {
		return nil, ErrNoTurn
	}
	t.CancelRequested = true
	var lines [][]byte
	if t.ProviderTurnID != "" {
		call, err := c.request(MethodTurnInterrupt, TurnInterruptParams{ThreadID: c.ThreadID(), TurnID: t.ProviderTurnID}, t.ID)
		if err != nil {
			return nil, err
		}
		lines = append(lines, call.Line)
	}
	return lines, nil
}

// Respond answers the pending server request id with result.
func (c *Client) Respond(id json.RawMessage, result any) ([]byte, error) {
	return dialect.Respond(c.wire(), id, result)
}

// RespondError answers the pending server request id with an error.
func (c *Client) RespondError(id json.RawMessage, code int, message string) ([]byte, error) {
	return dialect.RespondError(c.wire(), id, code, message)
}

// ToolAnswer is the item/tool/call answer for a result text (capped at
// MaxToolResultBytes).
func ToolAnswer(text string, isError bool) ToolCallResponse {
	if len(text) > MaxToolResultBytes {
		text = text[:MaxToolResultBytes]
	}
	items := []ContentItem{{Type: "inputText", Text: text}}
	return ToolCallResponse{Success: !isError, ContentItems: items, Result: ToolResult{Type: "contentItems", ContentItems: items}}
}

// Feed consumes app-server stdout bytes and returns the complete messages
// in order, as provider.Inbound. Bytes after the last newline stay in the
// record. A stream failure (a line over MaxLineBytes, too many bad lines,
// a response to an id never issued) is sticky.
func (c *Client) Feed(p []byte) ([]provider.Inbound, error) {
	if c.failed != nil {
		return nil, c.failed
	}
	out, err := provider.FeedLines(&c.wire().PartialLine, p, MaxLineBytes, c.handleLine)
	if err != nil {
		return out, c.fail(err)
	}
	return out, nil
}

func (c *Client) fail(err error) error {
	c.failed = err
	c.cl.LatchLoss(provider.LossReasonOf(err))
	return err
}

func (c *Client) handleLine(line []byte) ([]provider.Inbound, error) {
	w := c.wire()
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, nil
	}
	if c.ThreadID() == "" {
		c.early++
		c.earlyBytes += len(line)
		if c.early > MaxEarlyMessages || c.earlyBytes > MaxEarlyBytes {
			return nil, ErrEarlyBound
		}
	}
	m, kind, err := DecodeMessage(line)
	if err != nil {
		w.SkippedLines++
		w.ConsecutiveBadLines++
		if w.ConsecutiveBadLines >= provider.MaxConsecutiveBadLines {
			return nil, provider.ErrTooManyBadLines
		}
		return nil, nil
	}
	w.ConsecutiveBadLines = 0
	switch kind {
	case KindRequest:
		key := provider.IDKey(m.ID)
		turnID := ""
		if w.Turn != nil {
			turnID = w.Turn.ID
		}
		if r, seen := w.AgentRequests[key]; seen && r.Method == m.Method {
			// Re-read after a restart (its event file was not yet
			// committed as consumed): keep what the record links to it.
			turnID = r.TurnID
		} else {
			w.AgentRequests[key] = provider.AgentRequest{Method: m.Method, TurnID: turnID}
		}
		return []provider.Inbound{{Kind: provider.KindRequest, ID: json.RawMessage(key), Method: m.Method, Params: m.Params, TurnID: turnID}}, nil
	case KindNotification:
		return c.notification(m), nil
	}
	return c.response(m)
}

func (c *Client) response(m Message) ([]provider.Inbound, error) {
	w := c.wire()
	id, err := strconv.ParseInt(string(m.ID), 10, 64)
	if err != nil || id < 1 || id >= w.NextRequestID {
		return nil, provider.ErrUnknownResponse
	}
	p, ok := w.Pending[id]
	if !ok {
		w.StaleResponses++
		return nil, nil
	}
	delete(w.Pending, id)
	in := provider.Inbound{Kind: provider.KindResponse, ID: m.ID, Method: p.Method, Result: m.Result}
	if m.Error != nil {
		in.RPCError = &provider.RPCError{Code: m.Error.Code, Message: m.Error.Message}
		in.Err = c.requestFailed(p, m.Error)
		return c.settleOnFailedStart(p, id, in), nil
	}
	in.Err = c.apply(p, id, m.Result)
	return []provider.Inbound{in}, nil
}

// requestFailed classifies an error answer; its text is provider text and
// stays out of the failure message.
func (c *Client) requestFailed(p provider.PendingRequest, e *provider.RPCError) error {
	switch p.Method {
	case MethodInitialize, MethodThreadStart, MethodThreadResume:
		return provider.NewFailure(provider.ClassACPSessionInitFailed, fmt.Errorf("%s answered error %d", p.Method, e.Code))
	}
	return provider.NewFailure(provider.ClassTurnFailed, fmt.Errorf("%s answered error %d", p.Method, e.Code))
}

// settleOnFailedStart ends the turn whose turn/start was refused: no
// turn/completed will come for it.
func (c *Client) settleOnFailedStart(p provider.PendingRequest, id int64, in provider.Inbound) []provider.Inbound {
	w := c.wire()
	if t := w.Turn; p.Method == MethodTurnStart && t != nil && t.PromptRequestID == id {
		w.Turn = nil
		out := &provider.TurnOutcome{TurnID: t.ID, Err: in.Err}
		if t.CancelRequested {
			out = &provider.TurnOutcome{TurnID: t.ID, StopReason: provider.StopCancelled, Cancelled: true}
		}
		return []provider.Inbound{in, {Kind: provider.KindTurnSettled, Outcome: out, Err: out.Err}}
	}
	return []provider.Inbound{in}
}

// apply records what an answer negotiated.
func (c *Client) apply(p provider.PendingRequest, id int64, result json.RawMessage) error {
	rec := c.cl.Live()
	switch p.Method {
	case MethodThreadStart, MethodThreadResume:
		var r ThreadResponse
		if err := json.Unmarshal(result, &r); err != nil || r.Thread.ID == "" {
			return provider.NewFailure(provider.ClassACPSessionInitFailed, errors.New("thread answered without an id"))
		}
		if p.Method == MethodThreadStart {
			rec.Prompted, rec.ResetOnNextEnsure = false, false
		}
		rec.ACPSessionID = r.Thread.ID
	case MethodTurnStart:
		var r TurnResponse
		if json.Unmarshal(result, &r) == nil && r.Turn.ID != "" {
			if t := c.wire().Turn; t != nil && t.PromptRequestID == id && t.ProviderTurnID == "" {
				t.ProviderTurnID = r.Turn.ID
			}
		}
	}
	return nil
}
