package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/url"
	"strings"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/mcpbridge"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/toolcall"
)

// Tool errors the agent gets (tools.md §2–§4). They are fixed texts: never
// a value from the arguments or the server.
const (
	textNoTurn            = provider.TextNoTurn
	textIdentityConflict  = provider.TextIdentityConflict
	textStopped           = provider.TextStopped
	textAlreadyAccepted   = "A result was already accepted for this turn"
	textNotRecorded       = "Paperclip could not record the tool call."
	textInvalidInput      = "Invalid tool input: "
	textRefusedInput      = "Refused tool input: "
	bridgeServerName      = "paperclip"
	diagBridgeUnsupported = "tool_bridge_unsupported"
	diagBridgeLost        = "tool_bridge_lost"
)

// maxCatalogSide bounds the catalog side file read back after a restart:
// far above any run.prepare frame runnerd accepts (prp DefaultMaxFrameBytes
// 1 MiB, configurable), so only a corrupt file hits it.
const maxCatalogSide = 16 << 20

// Native MCP server variables of runnerd's environment (tools.md §2). They
// never reach the agent's environment (acpx.AgentEnv's allowlist) or the
// record.
const (
	envNativeName  = "PAPERCLIP_NATIVE_MCP_NAME"
	envNativeURL   = "PAPERCLIP_NATIVE_MCP_URL"
	envNativeToken = "PAPERCLIP_NATIVE_MCP_TOKEN"
)

// BridgeRecord is the live bridge of the provider session as persisted in
// the state store's records (runner-state.db, 0600; never in the
// runner-state.json projection the server reads): the port, bearer secret and MCP session id a
// hot restart listens with again, so the running agent still reaches it
// (tools.md §2). They appear nowhere else.
type BridgeRecord struct {
	Port      int    `json:"port"`
	Secret    string `json:"secret"`
	SessionID string `json:"sessionId"`
}

// toolState is the Manager's share of the tool bridge, guarded by
// Manager.mu.
type toolState struct {
	// cat is the run's catalog; nil when run.prepare had no
	// authorizedTools: then there is no bridge and no semantic event ever
	// (tools.md §3 item 9).
	cat *catalog.Catalog
	srv *mcpbridge.Server
	// waiters are the calls whose agent request still waits, by callId.
	waiters map[string]*toolWaiter
	// unsupported is set by an open whose agent takes no HTTP MCP server
	// while the catalog is not empty.
	unsupported bool
}

// toolWaiter is one agent request waiting in CallTool. Whoever removes it
// from toolState.waiters sends exactly one answer on ch (buffered), under
// Manager.mu, so the waiter never misses it.
type toolWaiter struct {
	callID string
	ch     chan toolAnswer
}

// CallID is the call w waits for (provider.ToolWait).
func (w *toolWaiter) CallID() string { return w.callID }

// toolAnswer is what a waiter answers the agent. taken is set when the
// answer settled the call: if the agent's request is gone by then, the
// waiter puts the result back for a re-call.
type toolAnswer struct {
	res   mcpbridge.Result
	taken *toolcall.Outcome
	call  toolcall.Call
}

func toolError(text string) mcpbridge.Result { return mcpbridge.Result{Text: text, IsError: true} }

func reserved(op string) bool { return op == catalog.FinishTool || op == catalog.BlockTool }

// prepareCatalog reads run.prepare's authorizedTools (tools.md §1). Absent
// (or null) → nil: the run has no bridge. Else it must parse; the raw
// catalog is stored as a write-once side file and b names it.
func prepareCatalog(stateDir string, payload json.RawMessage, b *Binding) (*catalog.Catalog, error) {
	var p struct {
		AuthorizedTools json.RawMessage `json:"authorizedTools"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, failed("run.prepare payload is malformed")
	}
	raw := bytes.TrimSpace(p.AuthorizedTools)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	cat, err := catalog.Parse(raw)
	if err != nil {
		return nil, failed(err.Error()) // the catalog's messages name the problem, never tool text
	}
	name, err := state.WriteSide(stateDir, raw)
	if err != nil {
		return nil, failed("the tool catalog could not be stored")
	}
	b.CatalogDigest, b.CatalogSide = cat.Digest(), name
	return cat, nil
}

// loadCatalog re-parses the catalog side file after a restart.
func (m *Manager) loadCatalog() {
	b := m.st.Binding
	if b == nil || b.CatalogSide == "" {
		return
	}
	raw, err := state.ReadSide(m.cfg.StateDir, b.CatalogSide, maxCatalogSide)
	if err == nil {
		m.tools.cat, err = catalog.Parse(raw)
	}
	if err != nil {
		m.log.Error("the run's tool catalog cannot be read back; its tools are unavailable", "err", err)
	}
}

// setCatalogLocked binds the catalog run.prepare parsed. m.mu held.
func (m *Manager) setCatalogLocked(cat *catalog.Catalog) { m.tools.cat = cat }

// mcpServersLocked returns session/new's (and load's, resume's) mcpServers
// for the agent whose initialize answered caps, starting the bridge if the
// run has a catalog and the agent takes HTTP MCP servers (tools.md §2). The
// bridge's port, secret and session id go into the record, which the
// commit before the session line persists. m.mu held.
func (m *Manager) mcpServersLocked(caps provider.AgentCapabilities) []acpx.MCPServer {
	m.tools.unsupported = false
	if !caps.MCPCapabilities.HTTP {
		m.tools.unsupported = m.tools.cat != nil && m.tools.cat.Len() > 0
		return nil
	}
	var out []acpx.MCPServer
	if cat := m.tools.cat; cat != nil {
		if m.tools.srv == nil {
			srv, err := mcpbridge.Listen(mcpbridge.Config{Tools: bridgeTools(cat), Handler: bridgeHandler{m}, Logger: m.log})
			if err != nil {
				m.log.Error("the tool bridge cannot listen; the agent gets no Paperclip tools", "err", err)
			} else {
				m.tools.srv = srv
				m.st.Bridge = &BridgeRecord{Port: srv.Port(), Secret: srv.Secret(), SessionID: srv.SessionID()}
			}
		}
		if srv := m.tools.srv; srv != nil {
			out = append(out, acpx.MCPServer{Type: acpx.MCPTransportHTTP, Name: bridgeServerName, URL: srv.URL(),
				Headers: []acpx.HTTPHeader{{Name: "Authorization", Value: "Bearer " + srv.Secret()}}})
		}
	}
	if n, ok := nativeServer(m.cfg.Environ); ok {
		out = append(out, n)
	}
	return out
}

// bridgeTools is tools/list: the catalog then the reserved tools.
func bridgeTools(cat *catalog.Catalog) func() []mcpbridge.Tool {
	var list []mcpbridge.Tool
	for _, t := range cat.Tools() {
		list = append(list, mcpbridge.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return func() []mcpbridge.Tool { return list }
}

// nativeServer is the second, native MCP server from runnerd's environment
// (tools.md §2): all three variables set, a name other than paperclip, and
// an HTTPS URL or an HTTP one on loopback.
func nativeServer(environ []string) (acpx.MCPServer, bool) {
	env := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case envNativeName, envNativeURL, envNativeToken:
			env[k] = v
		}
	}
	name, raw, token := env[envNativeName], env[envNativeURL], env[envNativeToken]
	if name == "" || raw == "" || token == "" || name == bridgeServerName {
		return acpx.MCPServer{}, false
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil {
		return acpx.MCPServer{}, false
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !loopbackHost(u.Hostname()) {
			return acpx.MCPServer{}, false
		}
	default:
		return acpx.MCPServer{}, false
	}
	return acpx.MCPServer{Type: acpx.MCPTransportHTTP, Name: name, URL: raw,
		Headers: []acpx.HTTPHeader{{Name: "Authorization", Value: "Bearer " + token}}}, true
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// toolDiagnosticsLocked is what session.open adds: tool_bridge_unsupported
// when the agent cannot take the bridge and the catalog is not empty
// (tools.md §2). m.mu held.
func (m *Manager) toolDiagnosticsLocked() []provider.Event {
	if !m.tools.unsupported {
		return nil
	}
	return []provider.Event{{EventType: prp.EventHarnessDiagnostic, Priority: provider.P1,
		Payload: map[string]any{"code": diagBridgeUnsupported, "message": "the agent does not take HTTP MCP servers; the run's Paperclip tools are unavailable"}}}
}

// restartBridgeLocked brings the bridge back after a hot restart that
// re-adopted a live agent (acp.md §3.5): the same port, secret and session
// id the agent holds. Every call of the previous life is detached (its
// HTTP request died with it). A taken port is the loss sequence, reason
// other, with tool_bridge_lost (tools.md §2). m.mu held.
func (m *Manager) restartBridgeLocked(p *process) []provider.Event {
	if m.st.Tools != nil {
		m.st.Tools.DetachAll()
	}
	br := m.st.Bridge
	if br == nil || m.tools.cat == nil || m.tools.srv != nil {
		return nil
	}
	srv, err := mcpbridge.Listen(mcpbridge.Config{Port: br.Port, Secret: br.Secret, SessionID: br.SessionID,
		Tools: bridgeTools(m.tools.cat), Handler: bridgeHandler{m}, Logger: m.log})
	if err == nil {
		m.tools.srv = srv
		return nil
	}
	m.log.Error("the tool bridge cannot listen on its port again; ending the turn", "err", err)
	m.st.Bridge = nil
	evs := []provider.Event{{EventType: prp.EventHarnessDiagnostic, Priority: provider.P0,
		Payload: map[string]any{"code": diagBridgeLost, "message": "the tool bridge could not be restored on its port"}}}
	return append(evs, m.lostLocked(p, provider.LossOther)...)
}

// takeBridgeLocked stops the open calls with the stop error and detaches
// the bridge from the manager; the caller closes it after releasing m.mu
// (Close waits for the handlers, which take m.mu). m.mu held.
func (m *Manager) takeBridgeLocked() *mcpbridge.Server {
	m.stopToolCallsLocked()
	srv := m.tools.srv
	m.tools.srv = nil
	m.st.Bridge = nil
	return srv
}

// closeBridgeOf closes the bridge of process p's session when p is still
// the live process: its session is ending.
func (m *Manager) closeBridgeOf(p *process) {
	m.mu.Lock()
	var srv *mcpbridge.Server
	if m.proc == p {
		srv = m.takeBridgeLocked()
	}
	m.mu.Unlock()
	closeBridge(m, srv)
}

func closeBridge(m *Manager, srv *mcpbridge.Server) {
	if srv == nil {
		return
	}
	if err := srv.Close(); err != nil {
		m.log.Warn("close tool bridge", "err", err)
	}
}

// stopToolCallsLocked answers every call whose agent still waits with the
// stop error; the calls become detached, so a late result is recorded
// (tools.md §3 item 6). The caller's commit persists the table. m.mu held.
func (m *Manager) stopToolCallsLocked() {
	for id, w := range m.tools.waiters {
		delete(m.tools.waiters, id)
		if m.st.Tools != nil {
			m.st.Tools.Detach(id)
		}
		w.ch <- toolAnswer{res: toolError(textStopped)}
	}
}

func (m *Manager) tableLocked() *toolcall.Table {
	if m.st.Tools == nil {
		m.st.Tools = &toolcall.Table{}
	}
	return m.st.Tools
}

func (m *Manager) correlation() toolcall.Correlation {
	if m.cfg.Correlation == nil {
		return toolcall.Correlation{}
	}
	return m.cfg.Correlation()
}

// bridgeHandler is the Manager as the bridge's Handler.
type bridgeHandler struct{ m *Manager }

// CallTool implements mcpbridge.Handler (tools.md §2–§4). It never holds
// the Manager's mutex while it waits: commands, the semantic_tool.result
// that answers this call among them, run meanwhile.
func (h bridgeHandler) CallTool(ctx context.Context, call mcpbridge.Call) mcpbridge.Result {
	m := h.m
	w, res := m.admitCall(call)
	if w == nil {
		if err := m.Sync(); err != nil { // the answer follows its durable record
			return toolError(textNotRecorded)
		}
		return res
	}
	select {
	case a := <-w.ch:
		if a.taken != nil && ctx.Err() != nil {
			m.putBack(a)
			return mcpbridge.Result{}
		}
		return a.res
	case <-ctx.Done():
	}
	// The agent's request is gone: the call is detached (tools.md §3 item 1).
	m.mu.Lock()
	if m.tools.waiters[w.callID] == w {
		delete(m.tools.waiters, w.callID)
		m.tableLocked().Detach(w.callID)
		if err := m.commitThenWriteLocked(nil, nil); err != nil {
			m.log.Error("commit detached tool call", "err", err)
		}
		m.mu.Unlock()
		return mcpbridge.Result{}
	}
	m.mu.Unlock()
	if a := <-w.ch; a.taken != nil { // an answer raced the cancel
		m.putBack(a)
	}
	return mcpbridge.Result{}
}

// putBack keeps a result whose agent request went away while it was
// handed over, as a detached call's recorded result for a re-call.
func (m *Manager) putBack(a toolAnswer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tableLocked().Restore(a.call, *a.taken)
	if err := m.commitThenWriteLocked(nil, nil); err != nil {
		m.log.Error("commit detached tool call", "err", err)
	}
}

// admitCall checks and records one tools/call. It returns the waiter of a
// call that waits for its result, or (nil, the answer).
func (m *Manager) admitCall(call mcpbridge.Call) (*toolWaiter, mcpbridge.Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.admitCallLocked(call)
}

// admitCallLocked is admitCall with m.mu held (a driver that gets tool
// calls on the agent's own stream: codex.go).
func (m *Manager) admitCallLocked(call mcpbridge.Call) (*toolWaiter, mcpbridge.Result) {
	cat := m.tools.cat
	if cat == nil || m.cl == nil || m.proc == nil || m.cl.ActiveTurn() == "" {
		return nil, toolError(textNoTurn)
	}
	turn := m.cl.ActiveTurn()
	op, ok := cat.Resolve(call.Name)
	if !ok {
		return nil, toolError(mcpbridge.TextUnsupportedTool)
	}
	args := call.Arguments
	if reserved(op) {
		n, err := catalog.NormalizeResult(op, args)
		if err != nil {
			return nil, toolError(textInvalidInput + err.Error())
		}
		args = n
	}
	if err := catalog.CheckInput(args); err != nil {
		return nil, toolError(textRefusedInput + err.Error())
	}
	if !reserved(op) {
		if err := cat.ValidateInput(op, args); err != nil {
			return nil, toolError(textInvalidInput + err.Error())
		}
	}
	input, digest, err := toolcall.CanonicalInput(args)
	if err != nil {
		return nil, toolError(textInvalidInput + "the input cannot be encoded as canonical JSON")
	}
	id := toolcall.Identity{SessionKey: toolcall.SessionKey(call.SessionID), RequestID: bytes.Clone(call.RequestID), Process: m.proc.uuid}
	tb := m.tableLocked()
	c := tb.ByIdentity(id)
	if c != nil && (c.OperationID != op || c.InputDigest != digest || c.Tool != call.Name) {
		return nil, toolError(textIdentityConflict)
	}
	if c == nil {
		c = tb.Reattachable(turn, op, digest)
	}
	if c != nil {
		return m.reattachLocked(c, id)
	}
	if reserved(op) && m.cl.Map().SemanticResult != nil {
		return nil, toolError(textAlreadyAccepted)
	}
	c = &toolcall.Call{CallID: toolcall.NewCallID(), OperationID: op, Tool: call.Name, InputDigest: digest, TurnID: turn, Agent: id}
	if reserved(op) {
		c.Input = input // the turn's semantic result once the server accepts it
	}
	if err := tb.Add(c); err != nil {
		return nil, toolError(mcpbridge.TextTooManyPending)
	}
	// Durable before it is sent: the call and its P0 input event in one
	// write (tools.md §3 item 3).
	ev := provider.Event{EventType: prp.EventSemanticToolInput, Priority: provider.P0, Payload: toolcall.InputPayload(c, m.correlation(), input),
		ExecutorID: prp.EventSemanticToolInput + ":" + c.CallID}
	if err := m.commitThenWriteLocked([]provider.Event{ev}, nil); err != nil {
		m.log.Error("commit tool call", "err", err)
		tb.Drop(c.CallID)
		return nil, toolError(textNotRecorded)
	}
	return m.waitLocked(c.CallID), mcpbridge.Result{}
}

// reattachLocked answers a re-call of a detached call (or a resend of a
// pending one) from its recorded result, once, or waits for it; no new
// semantic_tool.input (tools.md §3 items 1, 8). m.mu held.
func (m *Manager) reattachLocked(c *toolcall.Call, id toolcall.Identity) (*toolWaiter, mcpbridge.Result) {
	if _, busy := m.tools.waiters[c.CallID]; busy {
		return nil, toolError(textIdentityConflict) // another request of the agent already waits for it
	}
	tb := m.tableLocked()
	c.Agent = id
	if o := c.Recorded; o != nil {
		res := m.answerLocked(c, *o)
		tb.MarkAnswered(c.CallID, *o)
		if err := m.commitThenWriteLocked(nil, nil); err != nil {
			m.log.Error("commit settled tool call", "err", err)
		}
		return nil, res
	}
	c.State = toolcall.Pending
	if err := m.commitThenWriteLocked(nil, nil); err != nil {
		m.log.Error("commit re-attached tool call", "err", err)
	}
	return m.waitLocked(c.CallID), mcpbridge.Result{}
}

func (m *Manager) waitLocked(callID string) *toolWaiter {
	w := &toolWaiter{callID: callID, ch: make(chan toolAnswer, 1)}
	if m.tools.waiters == nil {
		m.tools.waiters = map[string]*toolWaiter{}
	}
	m.tools.waiters[callID] = w
	return w
}

// answerLocked is the agent's answer for call c with outcome o (tools.md
// §3 item 4, §4): the result as JSON text, isError mirrored; a rejected
// reserved call gets the server's feedback. m.mu held.
func (m *Manager) answerLocked(c *toolcall.Call, o toolcall.Outcome) mcpbridge.Result {
	if reserved(c.OperationID) && o.IsError {
		return toolError(catalog.ServerFeedback(o.Result))
	}
	return mcpbridge.Result{Text: toolcall.AgentText(o.Result), IsError: o.IsError}
}

// ToolResult runs the semantic_tool.result command commandID (tools.md §3
// items 4–6, §4): match, validate, then one write with the P0
// semantic_tool.result event, the table and the command's outcome; then
// the waiting agent request gets its answer.
// It returns once what it changed is durable (Sync).
func (m *Manager) ToolResult(commandID string, payload json.RawMessage) (json.RawMessage, error) {
	return m.durable(m.toolResult(commandID, payload))
}

// toolResult is ToolResult without the wait for durability.
func (m *Manager) toolResult(commandID string, payload json.RawMessage) (json.RawMessage, error) {
	cmd, err := toolcall.DecodeResultCommand(payload)
	if err != nil {
		return nil, failed(err.Error()) // names the field, never a value
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tools.cat == nil {
		return nil, &CommandError{Code: toolcall.CodeNotPending, Message: "this run has no tool catalog"}
	}
	tb := m.tableLocked()
	d := tb.Decide(cmd, func(id string) bool { _, ok := m.tools.waiters[id]; return ok })
	switch d.Verdict {
	case toolcall.NotPending:
		return nil, &CommandError{Code: toolcall.CodeNotPending, Message: d.Reason}
	case toolcall.Conflict:
		return nil, &CommandError{Code: toolcall.CodeResultConflict, Message: d.Reason}
	case toolcall.Duplicate:
		return toolcall.StatusResult(d.Verdict.Status(), cmd.CallID), nil
	}
	c := d.Call
	if !cmd.IsError && !reserved(c.OperationID) {
		if err := m.tools.cat.ValidateResult(c.OperationID, cmd.Result); err != nil {
			return nil, failed("semantic_tool.result: " + err.Error())
		}
	}
	o := cmd.Outcome()
	evs := []provider.Event{{EventType: prp.EventSemanticToolResult, Priority: provider.P0, Payload: toolcall.ResultPayload(c, m.correlation(), o),
		ExecutorID: prp.EventSemanticToolResult + ":" + c.CallID}}
	var prevSemantic json.RawMessage
	accepted := reserved(c.OperationID) && !o.IsError && m.cl != nil && m.proc != nil && c.TurnID == m.cl.ActiveTurn()
	if accepted {
		// The server accepted the agent's report: the turn's one result,
		// emitted at its settle (tools.md §4).
		prevSemantic = m.cl.Map().SemanticResult
		m.cl.Map().SemanticResult = bytes.Clone(c.Input)
	}
	var w *toolWaiter
	var answer toolAnswer
	if d.Verdict == toolcall.Deliver {
		w = m.tools.waiters[c.CallID]
		delete(m.tools.waiters, c.CallID)
		answer = toolAnswer{res: m.answerLocked(c, o), taken: &o, call: *c}
		// Durably the result stays recorded for a repeated call until the
		// runner's write of the command's final result (settled, in
		// runner); in memory the call is settled once this batch is
		// prepared.
		tb.Answering(c.CallID, commandID, o)
	} else {
		tb.Record(c.CallID, o)
	}
	result := toolcall.StatusResult(d.Verdict.Status(), c.CallID)
	if err := m.commits.err(); err != nil {
		if accepted {
			m.cl.Map().SemanticResult = prevSemantic
		}
		if w != nil {
			w.ch <- toolAnswer{res: toolError(textNotRecorded)} // a storage failure: the runner stops
		}
		return nil, err
	}
	if w != nil {
		m.wakeAfterCommitLocked(func() { w.ch <- answer }) // the answer follows its durable record
	}
	if err := m.commitThenWriteEffectLocked(evs, nil, &commandEffect{commandID: commandID, result: result}); err != nil {
		return nil, err
	}
	if w != nil {
		tb.MarkAnswered(c.CallID, o)
	}
	return result, nil
}

// SettleAnswer drops the crash mark of the tool calls commandID answered:
// call it in the write that records the command's result after the
// executor returned, once the answer was handed to the agent. It reports
// whether st changed.
func (st *Stored) SettleAnswer(commandID string) bool {
	return st.Tools != nil && st.Tools.SettleAnswered(commandID)
}
