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

	"github.com/pcrunner/pcrunner/internal/provider"
)

// ClientOptions configures a Client.
type ClientOptions struct {
	Logger *slog.Logger
	// Info is sent as clientInfo; Name and Title default to runnerd's.
	Info provider.Implementation
}

// Client is the transport-independent ACP client core. It is not safe for
// concurrent use: its owner serialises calls (runnerd's session loop, or
// Conn's mutex). After every call that returns a line, the owner persists
// Record() before writing the line.
type Client struct {
	*provider.Core
	log    *slog.Logger
	info   provider.Implementation
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
func NewClient(rec provider.Record, opts ClientOptions) *Client {
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
	log = log.With("component", "acpx")
	return &Client{Core: provider.NewCore(rec, log, dialect), log: log, info: info}
}

// dialect is ACP's JSON-RPC 2.0 (acp.md §1.4).
var dialect = provider.Dialect{Version: provider.JSONRPCVersion, EscapeHTML: true}

func (c *Client) wire() *provider.WireState { return c.Wire() }

// ResetProcess starts a clean line stream for a new agent process
// (Core.ResetProcess) and clears the sticky stream failure.
func (c *Client) ResetProcess() {
	c.Core.ResetProcess()
	c.failed = nil
}

// Err returns the sticky line-stream failure, if any.
func (c *Client) Err() error { return c.failed }

// Request encodes a request with the next durable id and records it pending.
func (c *Client) Request(method string, params any, turnID string) (provider.Call, error) {
	return dialect.Request(c.wire(), method, params, turnID)
}

// Notify encodes a notification.
func (c *Client) Notify(method string, params any) ([]byte, error) {
	return dialect.Notify(method, params)
}

// Initialize encodes initialize, pinned to ACP v1 (acp.md §2.2), with the
// recorded client capabilities.
func (c *Client) Initialize() (provider.Call, error) {
	return c.Request(provider.MethodInitialize, initializeParams{ProtocolVersion: protocolVersion,
		ClientCapabilities: c.ClientCapabilities(), ClientInfo: c.info}, "")
}

// SetClientCapabilities records what the next initialize advertises.
func (c *Client) SetClientCapabilities(caps provider.ClientCapabilities) {
	c.Live().ClientCapabilities = &caps
}

// ClientCapabilities returns what the record says initialize advertised
// (all false when it holds none).
func (c *Client) ClientCapabilities() provider.ClientCapabilities {
	if c.Live().ClientCapabilities == nil {
		return provider.ClientCapabilities{}
	}
	return *c.Live().ClientCapabilities
}

// NewSession encodes session/new and records the launch identity. cwd must
// be absolute (acp.md §1.4). Server env values are sent, never recorded.
func (c *Client) NewSession(cwd string, servers []MCPServer) (provider.Call, error) {
	if len(cwd) == 0 || cwd[0] != '/' {
		return provider.Call{}, fmt.Errorf("new session: cwd must be absolute")
	}
	if servers == nil {
		servers = []MCPServer{}
	}
	c.Live().Cwd = cwd
	return c.Request(provider.MethodSessionNew, newSessionParams{Cwd: cwd, MCPServers: servers, Meta: c.meta}, "")
}

// LoadSession encodes session/load for the recorded session; updates until
// its answer are replay and are suppressed (acp.md §4.1 step 2).
func (c *Client) LoadSession(servers []MCPServer) (provider.Call, error) {
	return c.resumeCall(provider.MethodSessionLoad, servers)
}

// ResumeSession encodes session/resume for the recorded session.
func (c *Client) ResumeSession(servers []MCPServer) (provider.Call, error) {
	return c.resumeCall(provider.MethodSessionResume, servers)
}

func (c *Client) resumeCall(method string, servers []MCPServer) (provider.Call, error) {
	if c.Live().ACPSessionID == "" {
		return provider.Call{}, fmt.Errorf("%s: %w", method, provider.ErrNoSession)
	}
	if servers == nil {
		servers = []MCPServer{}
	}
	return c.Request(method, loadSessionParams{SessionID: c.Live().ACPSessionID, Cwd: c.Live().Cwd, MCPServers: servers, Meta: c.meta}, "")
}

// Capabilities decodes the negotiated agent capabilities.
func (c *Client) Capabilities() provider.AgentCapabilities {
	var caps provider.AgentCapabilities
	if len(c.Live().AgentCapabilities) > 0 {
		_ = json.Unmarshal(c.Live().AgentCapabilities, &caps)
	}
	return caps
}

// Prompt starts turn turnID with one text block. Prompts are serialised per
// session: while a turn is active it returns ErrTurnActive and sends
// nothing (acp.md §4.3, scenario 14).
func (c *Client) Prompt(turnID, text string) (provider.Call, error) {
	if c.Live().ACPSessionID == "" {
		return provider.Call{}, fmt.Errorf("start turn: %w", provider.ErrNoSession)
	}
	w := c.wire()
	if w.Turn != nil {
		return provider.Call{}, provider.ErrTurnActive
	}
	if w.Loss != "" {
		return provider.Call{}, &provider.LostError{Reason: w.Loss}
	}
	call, err := c.Request(provider.MethodSessionPrompt, PromptParams{
		SessionID: c.Live().ACPSessionID,
		Prompt:    []provider.ContentBlock{{Type: "text", Text: text}},
	}, turnID)
	if err != nil {
		return provider.Call{}, err
	}
	w.Turn = &provider.TurnState{ID: turnID, PromptRequestID: call.ID}
	c.Live().Prompted = true
	return call, nil
}

// CloseSession encodes session/close (gated by sessionCapabilities.close;
// session.destroy ignores a -32002 answer).
func (c *Client) CloseSession() (provider.Call, error) {
	if c.Live().ACPSessionID == "" {
		return provider.Call{}, fmt.Errorf("close session: %w", provider.ErrNoSession)
	}
	return c.Request(provider.MethodSessionClose, cancelParams{SessionID: c.Live().ACPSessionID}, "")
}

// Cancel produces the lines of acp.md §4.4 step 2: session/cancel, then a
// {outcome:"cancelled"} answer to every pending permission request. From
// now on any answer to the prompt settles the turn as cancelled.
func (c *Client) Cancel() ([][]byte, error) {
	w := c.wire()
	if w.Turn == nil {
		return nil, provider.ErrNoTurn
	}
	w.Turn.CancelRequested = true
	line, err := c.Notify(provider.MethodSessionCancel, cancelParams{SessionID: c.Live().ACPSessionID})
	if err != nil {
		return nil, err
	}
	lines := [][]byte{line}
	for _, key := range slices.Sorted(maps.Keys(w.AgentRequests)) {
		if w.AgentRequests[key].Method != provider.MethodRequestPermission {
			continue
		}
		l, err := c.Respond(json.RawMessage(key), PermissionResponse{Outcome: provider.PermissionOutcome{Outcome: "cancelled"}})
		if err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	return lines, nil
}

// Feed consumes agent stdout bytes and returns the complete messages in
// order. Bytes after the last newline are kept in the record. A fatal
// stream error (ErrFrameExceeded, ErrTooManyBadLines, ErrUnknownResponse)
// is sticky; messages decoded before it are still returned.
func (c *Client) Feed(p []byte) ([]provider.Inbound, error) {
	if c.failed != nil {
		return nil, c.failed
	}
	out, err := provider.FeedLines(&c.wire().PartialLine, p, provider.MaxLineBytes, c.handleLine)
	if err != nil {
		return out, c.fail(err)
	}
	return out, nil
}

func (c *Client) fail(err error) error {
	c.failed = err
	c.LatchLoss(provider.LossReasonOf(err))
	c.log.Error("acp stdout stream failed", "err", err)
	return err
}

// EndOfStream reports stdout EOF (the agent exited or closed stdout). It
// returns nil if nothing was outstanding, else agent_disconnected.
func (c *Client) EndOfStream() error {
	w := c.wire()
	w.PartialLine = nil
	// Whether busy or idle, the agent is gone: a later turn fails at once.
	c.LatchLoss(provider.LossProviderExit)
	if w.Turn != nil || len(w.Pending) > 0 {
		return provider.NewFailure(provider.ClassAgentDisconnected, nil)
	}
	return nil
}

func (c *Client) handleLine(line []byte) ([]provider.Inbound, error) {
	w := c.wire()
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, nil
	}
	m, err := provider.DecodeMessage(line)
	if err != nil {
		w.SkippedLines++
		w.ConsecutiveBadLines++
		c.log.Warn("skipped non-json-rpc stdout line", "bytes", len(line), "consecutive", w.ConsecutiveBadLines, "skipped", w.SkippedLines)
		if w.ConsecutiveBadLines >= provider.MaxConsecutiveBadLines {
			return nil, provider.ErrTooManyBadLines
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

func (c *Client) handleRequest(m provider.WireMessage) []provider.Inbound {
	w := c.wire()
	key := provider.IDKey(m.ID)
	in := provider.Inbound{Kind: provider.KindRequest, ID: json.RawMessage(key), Method: m.Method, Params: m.Params}
	turnID := ""
	if w.Turn != nil {
		turnID = w.Turn.ID
	}
	if m.Method == provider.MethodRequestPermission {
		var p provider.PermissionRequest
		if err := json.Unmarshal(m.Params, &p); err == nil {
			in.Permission = &p
		}
	}
	in.TurnID = turnID
	w.AgentRequests[key] = provider.AgentRequest{Method: m.Method, TurnID: turnID}
	return []provider.Inbound{in}
}

func (c *Client) handleNotification(m provider.WireMessage) []provider.Inbound {
	w := c.wire()
	switch m.Method {
	case provider.MethodCancelRequest:
		var p cancelRequestParams
		if json.Unmarshal(m.Params, &p) != nil || len(p.RequestID) == 0 {
			return nil
		}
		key := provider.IDKey(p.RequestID)
		if _, ok := w.AgentRequests[key]; !ok {
			return nil // already answered: nothing to cancel
		}
		return []provider.Inbound{{Kind: provider.KindCancelRequest, ID: json.RawMessage(key), Method: w.AgentRequests[key].Method}}
	case provider.MethodSessionUpdate:
		var n sessionNotification
		if json.Unmarshal(m.Params, &n) != nil {
			w.SkippedLines++
			c.log.Warn("skipped undecodable session/update")
			return nil
		}
		u, err := provider.DecodeSessionUpdate(n.Update)
		if err != nil {
			w.SkippedLines++
			c.log.Warn("skipped undecodable session/update")
			return nil
		}
		if c.replaying() {
			w.ReplayedUpdates++
			return nil
		}
		if n.SessionID != c.Live().ACPSessionID || c.Live().ACPSessionID == "" {
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
			return []provider.Inbound{{Kind: provider.KindUpdate, Method: m.Method, Update: &u}}
		}
		return []provider.Inbound{{Kind: provider.KindUpdate, Method: m.Method, Update: &u, TurnID: w.Turn.ID}}
	default:
		// Unknown notifications, extensions included, are ignored.
		c.log.Debug("ignored notification", "method", safeMethod(m.Method))
		return nil
	}
}

// replaying reports a pending session/load: its updates are history.
func (c *Client) replaying() bool {
	for _, p := range c.wire().Pending {
		if p.Method == provider.MethodSessionLoad {
			return true
		}
	}
	return false
}

// turnScoped reports update kinds that belong to a turn; session-level
// kinds (mode, config, commands, info) are valid between turns.
func turnScoped(kind string) bool {
	switch kind {
	case provider.UpdateCurrentMode, provider.UpdateConfigOption, provider.UpdateAvailableCommands, provider.UpdateSessionInfo:
		return false
	}
	return true
}

func (c *Client) handleResponse(m provider.WireMessage) ([]provider.Inbound, error) {
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
		return nil, provider.ErrUnknownResponse
	}
	p, ok := w.Pending[id]
	if !ok {
		w.StaleResponses++
		c.log.Info("dropped response for a settled request", "id", id, "staleResponses", w.StaleResponses)
		return nil, nil
	}
	delete(w.Pending, id)
	if t := w.Turn; p.Method == provider.MethodSessionPrompt && t != nil && t.PromptRequestID == id {
		return c.settleTurn(id, p, m), nil
	}
	in := provider.Inbound{Kind: provider.KindResponse, ID: m.ID, Method: p.Method, Result: m.Result, RPCError: m.Error}
	if m.Error != nil {
		in.Err = classifyRPCError(p.Method, m.Error)
	} else {
		in.Err = c.applyResult(p.Method, m.Result)
	}
	return []provider.Inbound{in}, nil
}

// applyResult records what a handshake answer negotiated.
func (c *Client) applyResult(method string, result json.RawMessage) error {
	switch method {
	case provider.MethodInitialize:
		var r initializeResult
		if err := json.Unmarshal(result, &r); err != nil {
			return provider.NewFailure(provider.ClassACPSessionInitFailed, err)
		}
		if r.ProtocolVersion != protocolVersion {
			return provider.NewFailure(provider.ClassACPSessionInitFailed, fmt.Errorf("agent answered protocol version %d", r.ProtocolVersion))
		}
		c.Live().ProtocolVersion = r.ProtocolVersion
		c.Live().AgentCapabilities = r.AgentCapabilities
		c.Live().AgentInfo = r.AgentInfo
		c.applyGoalCapability(r.Meta)
	case provider.MethodSessionNew:
		var r sessionResult
		if err := json.Unmarshal(result, &r); err != nil || r.SessionID == "" {
			return provider.NewFailure(provider.ClassACPSessionInitFailed, errors.New("session/new answered without sessionId"))
		}
		c.Live().ACPSessionID = r.SessionID
		c.Live().AgentSessionID = r.Meta.AgentSessionID
		c.Live().Prompted = false
		c.Live().ResetOnNextEnsure = false
	case provider.MethodSessionLoad:
		var r sessionResult
		if len(result) > 0 && json.Unmarshal(result, &r) == nil && r.Meta.AgentSessionID != "" {
			c.Live().AgentSessionID = r.Meta.AgentSessionID
		}
	}
	return nil
}

func (c *Client) settleTurn(id int64, p provider.PendingRequest, m provider.WireMessage) []provider.Inbound {
	w := c.wire()
	t := w.Turn
	w.Turn = nil
	out := &provider.TurnOutcome{TurnID: t.ID}
	var r promptResult
	switch {
	case t.CancelRequested:
		// cancelled, -32800, any error and even end_turn (a known adapter
		// bug) settle as cancelled after a cancel (acp.md §4.4 step 3).
		out.StopReason, out.Cancelled = provider.StopCancelled, true
		if m.Error == nil && json.Unmarshal(m.Result, &r) == nil {
			out.Usage = r.Usage
		}
	case m.Error != nil:
		out.Err = classifyRPCError(provider.MethodSessionPrompt, m.Error)
	case json.Unmarshal(m.Result, &r) != nil || r.StopReason == "":
		out.Err = provider.NewFailure(provider.ClassTurnFailed, errors.New("prompt answered without stopReason"))
	default:
		out.StopReason, out.Usage = r.StopReason, r.Usage
		out.Cancelled = r.StopReason == provider.StopCancelled
	}
	return []provider.Inbound{{Kind: provider.KindTurnSettled, ID: m.ID, Method: p.Method, Outcome: out, Err: out.Err, RPCError: m.Error}}
}

// knownMethods are the method names that may be logged verbatim; any other
// name is peer text and could carry anything.
var knownMethods = map[string]bool{
	provider.MethodInitialize: true, provider.MethodAuthenticate: true, provider.MethodSessionNew: true, provider.MethodSessionLoad: true,
	provider.MethodSessionResume: true, provider.MethodSessionClose: true, provider.MethodSessionPrompt: true, provider.MethodSessionCancel: true,
	provider.MethodSessionUpdate: true, provider.MethodRequestPermission: true, provider.MethodCancelRequest: true,
}

// safeMethod returns a loggable stand-in for an untrusted method name.
func safeMethod(m string) string {
	if knownMethods[m] {
		return m
	}
	return "other(" + strconv.Itoa(len(m)) + " bytes)"
}
