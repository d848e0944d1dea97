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
	errNoThread = errors.New("codex thread not started")
	errNoTurn   = errors.New("no active codex turn")
	// errEarlyBound is more than maxEarlyMessages or maxEarlyBytes of
	// output before the thread id is known (codex.md §2).
	errEarlyBound = errors.New("too much app-server output before the thread started")
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

// threadID is the thread id, "" before thread/start answered.
func (c *Client) threadID() string { return c.cl.Live().ACPSessionID }

func (c *Client) request(method string, params any, turnID string) (provider.Call, error) {
	call, err := dialect.Request(c.wire(), method, params, turnID)
	if err != nil {
		return provider.Call{}, fmt.Errorf("encode %s: %w", method, err)
	}
	return call, nil
}

// initialize is initialize (codex.md §2).
func (c *Client) initialize() (provider.Call, error) {
	return c.request(methodInitialize, initializeParams{
		ClientInfo:   clientInfo{Name: "paperclip-runnerd", Title: "Paperclip Runner", Version: "1"},
		Capabilities: initializeCapabilities{ExperimentalAPI: true},
	}, "")
}

// initialized is the notification that follows initialize's answer.
func (c *Client) initialized() ([]byte, error) {
	return dialect.Notify(methodInitialized, nil)
}

// threadStart is thread/start; the whole request is bounded.
func (c *Client) threadStart(p threadStartParams) (provider.Call, error) {
	if len(p.DynamicTools) > maxDynamicTools {
		return provider.Call{}, fmt.Errorf("thread start: %d dynamic tools exceed %d", len(p.DynamicTools), maxDynamicTools)
	}
	if p.DynamicTools == nil {
		p.DynamicTools = []dynamicTool{}
	}
	c.cl.Live().Cwd = p.Cwd
	call, err := c.request(methodThreadStart, p, "")
	if err == nil && len(call.Line) > maxThreadStartBytes {
		delete(c.wire().Pending, call.ID)
		return provider.Call{}, fmt.Errorf("thread start: request of %d bytes exceeds %d", len(call.Line), maxThreadStartBytes)
	}
	return call, err
}

// threadResume is thread/resume of the recorded thread.
func (c *Client) threadResume(p threadResumeParams) (provider.Call, error) {
	if c.threadID() == "" {
		return provider.Call{}, fmt.Errorf("thread resume: %w", errNoThread)
	}
	p.ThreadID = c.threadID()
	p.ExcludeTurns = true
	return c.request(methodThreadResume, p, "")
}

// threadRead is thread/read of the recorded thread, without its turns.
func (c *Client) threadRead() (provider.Call, error) {
	if c.threadID() == "" {
		return provider.Call{}, fmt.Errorf("thread read: %w", errNoThread)
	}
	return c.request(methodThreadRead, threadReadParams{ThreadID: c.threadID()}, "")
}

// turnStart starts turn turnID (runnerd's providerTurnId) with one text
// input and marks it active.
func (c *Client) turnStart(turnID, text string) (provider.Call, error) {
	w := c.wire()
	if c.threadID() == "" {
		return provider.Call{}, fmt.Errorf("start turn: %w", errNoThread)
	}
	if w.Turn != nil {
		return provider.Call{}, provider.ErrTurnActive
	}
	if w.Loss != "" {
		return provider.Call{}, &provider.LostError{Reason: w.Loss}
	}
	call, err := c.request(methodTurnStart, turnStartParams{ThreadID: c.threadID(), Cwd: c.cl.Live().Cwd,
		Input: []userInput{{Type: "text", Text: text, TextElements: []json.RawMessage{}}}}, turnID)
	if err != nil {
		return provider.Call{}, err
	}
	w.Turn = &provider.TurnState{ID: turnID, PromptRequestID: call.ID}
	c.cl.Live().Prompted = true
	return call, nil
}

// steer is turn/steer of the active turn.
func (c *Client) steer(text string) (provider.Call, error) {
	t := c.wire().Turn
	if t == nil || t.ProviderTurnID == "" {
		return provider.Call{}, errNoTurn
	}
	return c.request(methodTurnSteer, turnSteerParams{ThreadID: c.threadID(), ExpectedTurnID: t.ProviderTurnID,
		Input: []userInput{{Type: "text", Text: text, TextElements: []json.RawMessage{}}}}, t.ID)
}

// interrupt is turn/interrupt of the active turn; the app-server keeps
// running. Every open item/tool/call is answered with textStopped.
func (c *Client) interrupt() ([][]byte, error) {
	w := c.wire()
	t := w.Turn
	if t == nil {
		return nil, errNoTurn
	}
	t.CancelRequested = true
	var lines [][]byte
	if t.ProviderTurnID != "" {
		call, err := c.request(methodTurnInterrupt, turnInterruptParams{ThreadID: c.threadID(), TurnID: t.ProviderTurnID}, t.ID)
		if err != nil {
			return nil, err
		}
		lines = append(lines, call.Line)
	}
	return lines, nil
}

// respond answers the pending server request id with result.
func (c *Client) respond(id json.RawMessage, result any) ([]byte, error) {
	return dialect.Respond(c.wire(), id, result)
}

// respondError answers the pending server request id with an error.
func (c *Client) respondError(id json.RawMessage, code int, message string) ([]byte, error) {
	return dialect.RespondError(c.wire(), id, code, message)
}

// toolAnswer is the item/tool/call answer for a result text (capped at
// maxToolResultBytes).
func toolAnswer(text string, isError bool) toolCallResponse {
	if len(text) > maxToolResultBytes {
		text = text[:maxToolResultBytes]
	}
	items := []contentItem{{Type: "inputText", Text: text}}
	return toolCallResponse{Success: !isError, ContentItems: items, Result: toolResult{Type: "contentItems", ContentItems: items}}
}

// feed consumes app-server stdout bytes and returns the complete messages
// in order, as provider.Inbound. Bytes after the last newline stay in the
// record. A stream failure (a line over maxLineBytes, too many bad lines,
// a response to an id never issued) is sticky.
func (c *Client) feed(p []byte) ([]provider.Inbound, error) {
	if c.failed != nil {
		return nil, c.failed
	}
	out, err := provider.FeedLines(&c.wire().PartialLine, p, maxLineBytes, c.handleLine)
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
	if c.threadID() == "" {
		c.early++
		c.earlyBytes += len(line)
		if c.early > maxEarlyMessages || c.earlyBytes > maxEarlyBytes {
			return nil, errEarlyBound
		}
	}
	m, kind, err := decodeMessage(line)
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
	case kindRequest:
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
	case kindNotification:
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
	case methodInitialize, methodThreadStart, methodThreadResume:
		return provider.NewFailure(provider.ClassACPSessionInitFailed, fmt.Errorf("%s answered error %d", p.Method, e.Code))
	}
	return provider.NewFailure(provider.ClassTurnFailed, fmt.Errorf("%s answered error %d", p.Method, e.Code))
}

// settleOnFailedStart ends the turn whose turn/start was refused: no
// turn/completed will come for it.
func (c *Client) settleOnFailedStart(p provider.PendingRequest, id int64, in provider.Inbound) []provider.Inbound {
	w := c.wire()
	if t := w.Turn; p.Method == methodTurnStart && t != nil && t.PromptRequestID == id {
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
	case methodThreadStart, methodThreadResume:
		var r threadResponse
		if err := json.Unmarshal(result, &r); err != nil || r.Thread.ID == "" {
			return provider.NewFailure(provider.ClassACPSessionInitFailed, errors.New("thread answered without an id"))
		}
		if p.Method == methodThreadStart {
			rec.Prompted, rec.ResetOnNextEnsure = false, false
		}
		rec.ACPSessionID = r.Thread.ID
	case methodTurnStart:
		var r turnResponse
		if json.Unmarshal(result, &r) == nil && r.Turn.ID != "" {
			if t := c.wire().Turn; t != nil && t.PromptRequestID == id && t.ProviderTurnID == "" {
				t.ProviderTurnID = r.Turn.ID
			}
		}
	}
	return nil
}
