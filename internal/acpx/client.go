package acpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
)

// Line-stream bounds (acp.md §3.3, §7).
const (
	// MaxLineBytes bounds one stdout line: the Go SDK's 10 MiB scanner max.
	MaxLineBytes = 10 << 20
	// MaxConsecutiveBadLines fails the session (value from a closed acpx PR).
	MaxConsecutiveBadLines = 10
)

// Protocol-named line-stream failures. Each is a `rpc_failure` loss.
var (
	// ErrFrameExceeded is the literal text the server maps to
	// provider_frame_too_large; runnerd writes it to its stderr.
	ErrFrameExceeded = errors.New("stdout frame exceeded")
	// ErrTooManyBadLines means MaxConsecutiveBadLines non-JSON-RPC lines.
	ErrTooManyBadLines = errors.New("too many consecutive non-json-rpc stdout lines")
	// ErrUnknownResponse is a response to an id runnerd never issued.
	ErrUnknownResponse = errors.New("response to an unknown request id")
)

// Call-site errors.
var (
	ErrTurnActive       = errors.New("start turn: a turn is already active")
	ErrNoSession        = errors.New("acp session not established")
	ErrNoTurn           = errors.New("no active turn")
	ErrUnknownAgentCall = errors.New("answer agent request: not pending")
)

// InboundKind tells what an Inbound carries.
type InboundKind int

// Inbound kinds.
const (
	// KindResponse answers one of runnerd's requests (not session/prompt).
	KindResponse InboundKind = iota + 1
	// KindRequest is an agent→client request runnerd must answer.
	KindRequest
	// KindUpdate is a session/update for the current session.
	KindUpdate
	// KindTurnSettled is the answer to the active turn's session/prompt.
	KindTurnSettled
	// KindCancelRequest is $/cancel_request for a pending agent request;
	// runnerd answers that request with -32800.
	KindCancelRequest
	// KindEvents carries events another wire protocol's driver mapped
	// itself, for what ACP has no session update for (codex.md §5).
	KindEvents
)

// Inbound is one message from the agent, in stream order.
type Inbound struct {
	Kind InboundKind
	// ID is the request id: runnerd's for responses, the agent's for
	// requests and cancel requests.
	ID       json.RawMessage
	Method   string
	Params   json.RawMessage
	Result   json.RawMessage
	RPCError *RPCError
	// Err is the classified failure of a response or settled turn.
	Err error

	// Update is set for KindUpdate; TurnID names the turn it belongs to
	// ("" for session-level updates outside a turn).
	Update *SessionUpdate
	TurnID string

	// Permission is set for session/request_permission requests.
	Permission *PermissionRequest

	// Outcome is set for KindTurnSettled.
	Outcome *TurnOutcome

	// Events is set for KindEvents.
	Events []Event
}

// TurnOutcome is how a turn ended.
type TurnOutcome struct {
	TurnID string
	// StopReason is the agent's, or "cancelled" for every answer after a
	// cancel (acp.md §4.4 step 3).
	StopReason string
	Cancelled  bool
	Usage      *TokenUsage
	// Err is non-nil when the prompt failed without a cancel.
	Err error
}

// Call is an encoded outbound request.
type Call struct {
	ID   int64
	Line []byte
}

// ClientOptions configures a Client.
type ClientOptions struct {
	Logger *slog.Logger
	// Info is sent as clientInfo; Name and Title default to runnerd's.
	Info Implementation
}

// Client is the transport-independent ACP client core. It is not safe for
// concurrent use: its owner serialises calls (runnerd's session loop, or
// Conn's mutex). After every call that returns a line, the owner persists
// Record() before writing the line.
type Client struct {
	rec    Record
	log    *slog.Logger
	info   Implementation
	failed error
	// meta is the _meta of session/new, load and resume (tools.md §5). It
	// is never recorded: the instructions may be a megabyte, and they live
	// in a side file the owner reads at open time.
	meta json.RawMessage
}

// SetSessionMeta sets the _meta sent with session/new, session/load and
// session/resume; nil sends none.
func (c *Client) SetSessionMeta(meta json.RawMessage) { c.meta = meta }

// NewClient resumes a client from rec (a zero Record starts fresh).
func NewClient(rec Record, opts ClientOptions) *Client {
	rec = rec.Clone()
	if rec.Process == nil {
		rec.Process = &ProcessRecord{}
	}
	w := &rec.Process.Wire
	if w.NextRequestID < 1 {
		w.NextRequestID = 1
	}
	if w.Pending == nil {
		w.Pending = map[int64]PendingRequest{}
	}
	if w.AgentRequests == nil {
		w.AgentRequests = map[string]AgentRequest{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	info := opts.Info
	if info.Name == "" {
		info.Name = "paperclip-runnerd"
	}
	if info.Title == "" {
		info.Title = "Paperclip Runner"
	}
	if info.Version == "" {
		info.Version = "1"
	}
	return &Client{rec: rec, log: log.With("component", "acpx"), info: info}
}

// Record returns a deep copy of the durable record.
func (c *Client) Record() Record { return c.rec.Clone() }

// Map is the mapping state inside the record: pass it to the Mapper so one
// Record() holds wire and mapping state for the same durable write.
func (c *Client) Map() *MapState { return &c.rec.Process.Map }

// Err returns the sticky line-stream failure, if any.
func (c *Client) Err() error { return c.failed }

func (c *Client) wire() *WireState { return &c.rec.Process.Wire }

// Wire is the live line-stream state inside the record, for a driver of
// another wire protocol that keeps its request table and active turn in
// the same durable record (agent.Driver).
func (c *Client) Wire() *WireState { return c.wire() }

// Live is the live record itself (not a copy), for such a driver to record
// what its handshake negotiated (the session id, above all).
func (c *Client) Live() *Record { return &c.rec }

// Request encodes a request with the next durable id and records it pending.
func (c *Client) Request(method string, params any, turnID string) (Call, error) {
	w := c.wire()
	id := w.NextRequestID
	line, err := encodeLine(outRequest{JSONRPC: jsonrpcVersion, ID: id, Method: method, Params: params})
	if err != nil {
		return Call{}, err
	}
	w.NextRequestID++
	w.Pending[id] = PendingRequest{Method: method, TurnID: turnID}
	return Call{ID: id, Line: line}, nil
}

// Notify encodes a notification.
func (c *Client) Notify(method string, params any) ([]byte, error) {
	return encodeLine(outNotification{JSONRPC: jsonrpcVersion, Method: method, Params: params})
}

// Initialize encodes initialize, pinned to ACP v1 (acp.md §2.2), with the
// recorded client capabilities.
func (c *Client) Initialize() (Call, error) {
	return c.Request(MethodInitialize, InitializeParams{ProtocolVersion: ProtocolVersion,
		ClientCapabilities: c.ClientCapabilities(), ClientInfo: c.info}, "")
}

// SetClientCapabilities records what the next initialize advertises.
func (c *Client) SetClientCapabilities(caps ClientCapabilities) { c.rec.ClientCapabilities = &caps }

// ClientCapabilities returns what the record says initialize advertised
// (all false when it holds none).
func (c *Client) ClientCapabilities() ClientCapabilities {
	if c.rec.ClientCapabilities == nil {
		return ClientCapabilities{}
	}
	return *c.rec.ClientCapabilities
}

// NewSession encodes session/new and records the launch identity. cwd must
// be absolute (acp.md §1.4). Server env values are sent, never recorded.
func (c *Client) NewSession(cwd string, servers []MCPServer) (Call, error) {
	if len(cwd) == 0 || cwd[0] != '/' {
		return Call{}, fmt.Errorf("new session: cwd must be absolute")
	}
	if servers == nil {
		servers = []MCPServer{}
	}
	c.rec.Cwd = cwd
	return c.Request(MethodSessionNew, NewSessionParams{Cwd: cwd, MCPServers: servers, Meta: c.meta}, "")
}

// LoadSession encodes session/load for the recorded session; updates until
// its answer are replay and are suppressed (acp.md §4.1 step 2).
func (c *Client) LoadSession(servers []MCPServer) (Call, error) {
	return c.resumeCall(MethodSessionLoad, servers)
}

// ResumeSession encodes session/resume for the recorded session.
func (c *Client) ResumeSession(servers []MCPServer) (Call, error) {
	return c.resumeCall(MethodSessionResume, servers)
}

func (c *Client) resumeCall(method string, servers []MCPServer) (Call, error) {
	if c.rec.ACPSessionID == "" {
		return Call{}, fmt.Errorf("%s: %w", method, ErrNoSession)
	}
	if servers == nil {
		servers = []MCPServer{}
	}
	return c.Request(method, LoadSessionParams{SessionID: c.rec.ACPSessionID, Cwd: c.rec.Cwd, MCPServers: servers, Meta: c.meta}, "")
}

// Capabilities decodes the negotiated agent capabilities.
func (c *Client) Capabilities() AgentCapabilities {
	var caps AgentCapabilities
	if len(c.rec.AgentCapabilities) > 0 {
		_ = json.Unmarshal(c.rec.AgentCapabilities, &caps)
	}
	return caps
}

// Prompt starts turn turnID with one text block. Prompts are serialised per
// session: while a turn is active it returns ErrTurnActive and sends
// nothing (acp.md §4.3, scenario 14).
func (c *Client) Prompt(turnID, text string) (Call, error) {
	if c.rec.ACPSessionID == "" {
		return Call{}, fmt.Errorf("start turn: %w", ErrNoSession)
	}
	w := c.wire()
	if w.Turn != nil {
		return Call{}, ErrTurnActive
	}
	if w.Loss != "" {
		return Call{}, &LostError{Reason: w.Loss}
	}
	call, err := c.Request(MethodSessionPrompt, PromptParams{
		SessionID: c.rec.ACPSessionID,
		Prompt:    []ContentBlock{{Type: "text", Text: text}},
	}, turnID)
	if err != nil {
		return Call{}, err
	}
	w.Turn = &TurnState{ID: turnID, PromptRequestID: call.ID}
	c.rec.Prompted = true
	return call, nil
}

// CloseSession encodes session/close (gated by sessionCapabilities.close;
// session.destroy ignores a -32002 answer).
func (c *Client) CloseSession() (Call, error) {
	if c.rec.ACPSessionID == "" {
		return Call{}, fmt.Errorf("close session: %w", ErrNoSession)
	}
	return c.Request(MethodSessionClose, CancelParams{SessionID: c.rec.ACPSessionID}, "")
}

// LatchLoss records reason as the session's channel loss unless one is
// already latched; it reports whether this call latched it. Only the first
// loss counts (acp.md §5.1).
func (c *Client) LatchLoss(reason LossReason) bool {
	w := c.wire()
	if w.Loss != "" {
		return false
	}
	w.Loss = reason
	c.log.Warn("agent channel lost", "lossReason", string(reason))
	return true
}

// Loss returns the latched loss, or "".
func (c *Client) Loss() LossReason { return c.wire().Loss }

// ActiveTurn returns the active turn id, or "".
func (c *Client) ActiveTurn() string {
	if t := c.wire().Turn; t != nil {
		return t.ID
	}
	return ""
}

// Cancel produces the lines of acp.md §4.4 step 2: session/cancel, then a
// {outcome:"cancelled"} answer to every pending permission request. From
// now on any answer to the prompt settles the turn as cancelled.
func (c *Client) Cancel() ([][]byte, error) {
	w := c.wire()
	if w.Turn == nil {
		return nil, ErrNoTurn
	}
	w.Turn.CancelRequested = true
	line, err := c.Notify(MethodSessionCancel, CancelParams{SessionID: c.rec.ACPSessionID})
	if err != nil {
		return nil, err
	}
	lines := [][]byte{line}
	for _, key := range sortedKeys(w.AgentRequests) {
		if w.AgentRequests[key].Method != MethodRequestPermission {
			continue
		}
		l, err := c.Respond(json.RawMessage(key), PermissionResponse{Outcome: PermissionOutcome{Outcome: "cancelled"}})
		if err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	return lines, nil
}

// AbandonTurn settles the active turn locally (the agent is gone or the
// cancel grace expired): the prompt id stays known, so its late answer is
// dropped as stale rather than attributed to a later turn.
func (c *Client) AbandonTurn() *TurnOutcome {
	w := c.wire()
	t := w.Turn
	if t == nil {
		return nil
	}
	w.Turn = nil
	delete(w.Pending, t.PromptRequestID)
	out := &TurnOutcome{TurnID: t.ID, StopReason: StopCancelled, Cancelled: t.CancelRequested}
	if !t.CancelRequested {
		out.StopReason = ""
		out.Err = NewFailure(ClassAgentDisconnected, nil)
	}
	return out
}

// Respond answers the pending agent request id with result.
func (c *Client) Respond(id json.RawMessage, result any) ([]byte, error) {
	key := idKey(id)
	if _, ok := c.wire().AgentRequests[key]; !ok {
		return nil, ErrUnknownAgentCall
	}
	line, err := encodeLine(outResult{JSONRPC: jsonrpcVersion, ID: json.RawMessage(key), Result: result})
	if err != nil {
		return nil, err
	}
	delete(c.wire().AgentRequests, key)
	return line, nil
}

// RespondError answers the pending agent request id with an error.
func (c *Client) RespondError(id json.RawMessage, code int, message string) ([]byte, error) {
	key := idKey(id)
	if _, ok := c.wire().AgentRequests[key]; !ok {
		return nil, ErrUnknownAgentCall
	}
	line, err := encodeLine(outError{JSONRPC: jsonrpcVersion, ID: json.RawMessage(key), Error: RPCError{Code: code, Message: message}})
	if err != nil {
		return nil, err
	}
	delete(c.wire().AgentRequests, key)
	return line, nil
}

// SetRuntimeRequestID links a pending agent request to its PRP
// runtime_request id, so a restarted runnerd can answer request.resolve.
func (c *Client) SetRuntimeRequestID(id json.RawMessage, runtimeRequestID string) {
	key := idKey(id)
	if r, ok := c.wire().AgentRequests[key]; ok {
		r.RuntimeRequestID = runtimeRequestID
		c.wire().AgentRequests[key] = r
	}
}

// SetRuntimeRequest links a pending agent request to its PRP runtime
// request: id, tool call item and offered choices (tools.md §7).
func (c *Client) SetRuntimeRequest(id json.RawMessage, runtimeRequestID, itemID string, choices map[string]string) {
	key := idKey(id)
	if r, ok := c.wire().AgentRequests[key]; ok {
		r.RuntimeRequestID, r.ItemID, r.Choices = runtimeRequestID, itemID, choices
		c.wire().AgentRequests[key] = r
	}
}

// RuntimeRequestFor finds the pending agent request linked to a PRP
// runtime_request id.
func (c *Client) RuntimeRequestFor(runtimeRequestID string) (id json.RawMessage, r AgentRequest, ok bool) {
	for key, r := range c.wire().AgentRequests {
		if r.RuntimeRequestID == runtimeRequestID {
			return json.RawMessage(key), r, true
		}
	}
	return nil, AgentRequest{}, false
}

// AgentRequest returns the pending agent request id.
func (c *Client) AgentRequest(id json.RawMessage) (AgentRequest, bool) {
	r, ok := c.wire().AgentRequests[idKey(id)]
	return r, ok
}

// ForgetAgentRequest drops a pending agent request without answering it
// (the agent withdrew it, or its turn ended): a later request.resolve
// finds nothing.
func (c *Client) ForgetAgentRequest(id json.RawMessage) {
	delete(c.wire().AgentRequests, idKey(id))
}

// Feed consumes agent stdout bytes and returns the complete messages in
// order. Bytes after the last newline are kept in the record. A fatal
// stream error (ErrFrameExceeded, ErrTooManyBadLines, ErrUnknownResponse)
// is sticky; messages decoded before it are still returned.
func (c *Client) Feed(p []byte) ([]Inbound, error) {
	if c.failed != nil {
		return nil, c.failed
	}
	w := c.wire()
	var out []Inbound
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(w.PartialLine)+len(p) > MaxLineBytes {
				return out, c.fail(ErrFrameExceeded)
			}
			w.PartialLine = append(w.PartialLine, p...)
			break
		}
		line := p[:i]
		if len(w.PartialLine) > 0 {
			line = append(w.PartialLine, line...)
			w.PartialLine = nil
		}
		p = p[i+1:]
		if len(line) > MaxLineBytes {
			return out, c.fail(ErrFrameExceeded)
		}
		msgs, err := c.handleLine(line)
		out = append(out, msgs...)
		if err != nil {
			return out, c.fail(err)
		}
	}
	return out, nil
}

func (c *Client) fail(err error) error {
	c.failed = err
	c.LatchLoss(LossReasonOf(err))
	c.log.Error("acp stdout stream failed", "err", err)
	return err
}

// EndOfStream reports stdout EOF (the agent exited or closed stdout). It
// returns nil if nothing was outstanding, else agent_disconnected.
func (c *Client) EndOfStream() error {
	w := c.wire()
	w.PartialLine = nil
	// Whether busy or idle, the agent is gone: a later turn fails at once.
	c.LatchLoss(LossProviderExit)
	if w.Turn != nil || len(w.Pending) > 0 {
		return NewFailure(ClassAgentDisconnected, nil)
	}
	return nil
}

func (c *Client) handleLine(line []byte) ([]Inbound, error) {
	w := c.wire()
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, nil
	}
	m, err := decodeMessage(line)
	if err != nil {
		w.SkippedLines++
		w.ConsecutiveBadLines++
		c.log.Warn("skipped non-json-rpc stdout line", "bytes", len(line), "consecutive", w.ConsecutiveBadLines, "skipped", w.SkippedLines)
		if w.ConsecutiveBadLines >= MaxConsecutiveBadLines {
			return nil, ErrTooManyBadLines
		}
		return nil, nil
	}
	w.ConsecutiveBadLines = 0
	switch {
	case m.Method != "" && m.ID != nil:
		return c.handleRequest(m), nil
	case m.Method != "":
		return c.handleNotification(m), nil
	default:
		return c.handleResponse(m)
	}
}

func (c *Client) handleRequest(m wireMessage) []Inbound {
	w := c.wire()
	key := idKey(m.ID)
	in := Inbound{Kind: KindRequest, ID: json.RawMessage(key), Method: m.Method, Params: m.Params}
	turnID := ""
	if w.Turn != nil {
		turnID = w.Turn.ID
	}
	if m.Method == MethodRequestPermission {
		var p PermissionRequest
		if err := json.Unmarshal(m.Params, &p); err == nil {
			in.Permission = &p
		}
	}
	in.TurnID = turnID
	w.AgentRequests[key] = AgentRequest{Method: m.Method, TurnID: turnID}
	return []Inbound{in}
}

func (c *Client) handleNotification(m wireMessage) []Inbound {
	w := c.wire()
	switch m.Method {
	case MethodCancelRequest:
		var p CancelRequestParams
		if json.Unmarshal(m.Params, &p) != nil || len(p.RequestID) == 0 {
			return nil
		}
		key := idKey(p.RequestID)
		if _, ok := w.AgentRequests[key]; !ok {
			return nil // already answered: nothing to cancel
		}
		return []Inbound{{Kind: KindCancelRequest, ID: json.RawMessage(key), Method: w.AgentRequests[key].Method}}
	case MethodSessionUpdate:
		var n SessionNotification
		if json.Unmarshal(m.Params, &n) != nil {
			w.SkippedLines++
			c.log.Warn("skipped undecodable session/update")
			return nil
		}
		u, err := DecodeSessionUpdate(n.Update)
		if err != nil {
			w.SkippedLines++
			c.log.Warn("skipped undecodable session/update")
			return nil
		}
		if c.replaying() {
			w.ReplayedUpdates++
			return nil
		}
		if n.SessionID != c.rec.ACPSessionID || c.rec.ACPSessionID == "" {
			w.LateUpdates++
			c.log.Info("dropped session/update for another session", "kind", u.Kind)
			return nil
		}
		if w.Turn == nil {
			if turnScoped(u.Kind) {
				w.LateUpdates++
				c.log.Info("dropped session/update outside a turn", "kind", u.Kind, "lateUpdates", w.LateUpdates)
				return nil
			}
			return []Inbound{{Kind: KindUpdate, Method: m.Method, Update: &u}}
		}
		return []Inbound{{Kind: KindUpdate, Method: m.Method, Update: &u, TurnID: w.Turn.ID}}
	default:
		// Unknown notifications, extensions included, are ignored.
		c.log.Debug("ignored notification", "method", safeMethod(m.Method))
		return nil
	}
}

// replaying reports a pending session/load: its updates are history.
func (c *Client) replaying() bool {
	for _, p := range c.wire().Pending {
		if p.Method == MethodSessionLoad {
			return true
		}
	}
	return false
}

// turnScoped reports update kinds that belong to a turn; session-level
// kinds (mode, config, commands, info) are valid between turns.
func turnScoped(kind string) bool {
	switch kind {
	case UpdateCurrentMode, UpdateConfigOption, UpdateAvailableCommands, UpdateSessionInfo:
		return false
	}
	return true
}

func (c *Client) handleResponse(m wireMessage) ([]Inbound, error) {
	w := c.wire()
	if m.ID == nil {
		// An error about a line the agent could not parse: we never send
		// such lines, so note it and go on.
		w.StaleResponses++
		c.log.Warn("agent reported an error without id", "code", m.Error.Code)
		return nil, nil
	}
	id, err := strconv.ParseInt(string(m.ID), 10, 64)
	if err != nil || id < 1 || id >= w.NextRequestID {
		return nil, ErrUnknownResponse
	}
	p, ok := w.Pending[id]
	if !ok {
		w.StaleResponses++
		c.log.Info("dropped response for a settled request", "id", id, "staleResponses", w.StaleResponses)
		return nil, nil
	}
	delete(w.Pending, id)
	if t := w.Turn; p.Method == MethodSessionPrompt && t != nil && t.PromptRequestID == id {
		return c.settleTurn(id, p, m), nil
	}
	in := Inbound{Kind: KindResponse, ID: m.ID, Method: p.Method, Result: m.Result, RPCError: m.Error}
	if m.Error != nil {
		in.Err = classifyRPCError(p.Method, m.Error)
	} else {
		in.Err = c.applyResult(p.Method, m.Result)
	}
	return []Inbound{in}, nil
}

// applyResult records what a handshake answer negotiated.
func (c *Client) applyResult(method string, result json.RawMessage) error {
	switch method {
	case MethodInitialize:
		var r InitializeResult
		if err := json.Unmarshal(result, &r); err != nil {
			return NewFailure(ClassACPSessionInitFailed, err)
		}
		if r.ProtocolVersion != ProtocolVersion {
			return NewFailure(ClassACPSessionInitFailed, fmt.Errorf("agent answered protocol version %d", r.ProtocolVersion))
		}
		c.rec.ProtocolVersion = r.ProtocolVersion
		c.rec.AgentCapabilities = r.AgentCapabilities
		c.rec.AgentInfo = r.AgentInfo
		c.applyGoalCapability(r.Meta)
	case MethodSessionNew:
		var r SessionResult
		if err := json.Unmarshal(result, &r); err != nil || r.SessionID == "" {
			return NewFailure(ClassACPSessionInitFailed, errors.New("session/new answered without sessionId"))
		}
		c.rec.ACPSessionID = r.SessionID
		c.rec.AgentSessionID = r.Meta.AgentSessionID
		c.rec.Prompted = false
		c.rec.ResetOnNextEnsure = false
	case MethodSessionLoad:
		var r SessionResult
		if len(result) > 0 && json.Unmarshal(result, &r) == nil && r.Meta.AgentSessionID != "" {
			c.rec.AgentSessionID = r.Meta.AgentSessionID
		}
	}
	return nil
}

func (c *Client) settleTurn(id int64, p PendingRequest, m wireMessage) []Inbound {
	w := c.wire()
	t := w.Turn
	w.Turn = nil
	out := &TurnOutcome{TurnID: t.ID}
	var r PromptResult
	switch {
	case t.CancelRequested:
		// cancelled, -32800, any error and even end_turn (a known adapter
		// bug) settle as cancelled after a cancel (acp.md §4.4 step 3).
		out.StopReason, out.Cancelled = StopCancelled, true
		if m.Error == nil && json.Unmarshal(m.Result, &r) == nil {
			out.Usage = r.Usage
		}
	case m.Error != nil:
		out.Err = classifyRPCError(MethodSessionPrompt, m.Error)
	case json.Unmarshal(m.Result, &r) != nil || r.StopReason == "":
		out.Err = NewFailure(ClassTurnFailed, errors.New("prompt answered without stopReason"))
	default:
		out.StopReason, out.Usage = r.StopReason, r.Usage
		out.Cancelled = r.StopReason == StopCancelled
	}
	return []Inbound{{Kind: KindTurnSettled, ID: m.ID, Method: p.Method, Outcome: out, Err: out.Err, RPCError: m.Error}}
}

// knownMethods are the method names that may be logged verbatim; any other
// name is peer text and could carry anything.
var knownMethods = map[string]bool{
	MethodInitialize: true, MethodAuthenticate: true, MethodSessionNew: true, MethodSessionLoad: true,
	MethodSessionResume: true, MethodSessionClose: true, MethodSessionPrompt: true, MethodSessionCancel: true,
	MethodSessionUpdate: true, MethodRequestPermission: true, MethodCancelRequest: true,
}

// safeMethod returns a loggable stand-in for an untrusted method name.
func safeMethod(m string) string {
	if knownMethods[m] {
		return m
	}
	return "other(" + strconv.Itoa(len(m)) + " bytes)"
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// ResetProcess forgets the line stream of an agent process that is gone
// (stopped, exited or lost) so a new process starts a clean JSON-RPC
// stream: request table, partial line, active turn and latched loss are
// cleared. The mapping state stays, so item ids are never reused in the
// record (acp.md §5).
func (c *Client) ResetProcess() {
	m := c.rec.Process.Map
	m.Items, m.Order, m.LastMessage = nil, nil, ""
	c.rec.Process = &ProcessRecord{Map: m, Wire: WireState{
		NextRequestID: 1, Pending: map[int64]PendingRequest{}, AgentRequests: map[string]AgentRequest{},
	}}
	c.failed = nil
}

// SetLaunch records the launch identity compared by Record.Reusable.
func (c *Client) SetLaunch(agent, command string, args []string, cwd string) {
	c.rec.Agent, c.rec.Command, c.rec.Args, c.rec.Cwd = agent, command, append([]string(nil), args...), cwd
}

// MarkReset sets resetOnNextEnsure: the record is never reused.
func (c *Client) MarkReset() { c.rec.ResetOnNextEnsure = true }

// AgentRequestFor finds the pending agent request linked to a PRP
// runtime_request id.
func (c *Client) AgentRequestFor(runtimeRequestID string) (id json.RawMessage, turnID string, ok bool) {
	for key, r := range c.wire().AgentRequests {
		if r.RuntimeRequestID == runtimeRequestID {
			return json.RawMessage(key), r.TurnID, true
		}
	}
	return nil, "", false
}

// PendingPermissions lists the permission requests still waiting for an
// answer, in id order (Cancel answers them {outcome:"cancelled"}).
func (c *Client) PendingPermissions() []AgentRequest {
	var out []AgentRequest
	for _, key := range sortedKeys(c.wire().AgentRequests) {
		if r := c.wire().AgentRequests[key]; r.Method == MethodRequestPermission {
			out = append(out, r)
		}
	}
	return out
}

// PendingPermissionIDs lists the agent request ids of PendingPermissions,
// in the same order.
func (c *Client) PendingPermissionIDs() []json.RawMessage {
	var out []json.RawMessage
	for _, key := range sortedKeys(c.wire().AgentRequests) {
		if c.wire().AgentRequests[key].Method == MethodRequestPermission {
			out = append(out, json.RawMessage(key))
		}
	}
	return out
}
