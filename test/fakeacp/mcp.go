package main

// The MCP side of fakeacp (tools.md §2, §9): the agent
// advertises mcpCapabilities.http on request, remembers the mcpServers its
// session/new, session/load and session/resume carry, and its prompt
// scripts call tools on the entry named "paperclip" through the official
// go-sdk MCP client over Streamable HTTP, as a real agent would. The
// header values of those entries (the bridge's bearer) never reach the
// transcript, the message text or stderr.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bridgeServerName is the mcpServers entry the scripts call (tools.md §2).
const bridgeServerName = "paperclip"

// Reserved tool names the finish and block shorthands call (tools.md §4).
const (
	finishTool = "paperclip_finish"
	blockTool  = "paperclip_block"
)

// mcpProtocolVersion is what fakeacp asks for in initialize: the bridge's
// own version (tools.md §2). The SDK's default would first probe the newer
// stateless server/discover, which agents in the field do not send.
const mcpProtocolVersion = "2025-03-26"

// redactedValue replaces every mcpServers header value in the transcript
// and in the mcp-servers step (tools.md §2: the secret appears nowhere).
const redactedValue = "<redacted>"

// mcpCancelGrace is how long a tool call still waits for its answer after
// session/cancel: long enough for the bridge's own stop error (tools.md §3
// item 6), which a scenario wants the agent to see, bounded so a bridge
// that never answers cannot hold the turn.
const mcpCancelGrace = 10 * time.Second

// mcpReconnectWait bounds how long the repeat of mcp-call-retry waits for
// the bridge to come back (a runnerd hot restart: acp.md §3.5), polling
// every mcpReconnectPoll. Waiting for the server is not a retry of the
// call: the call itself is repeated once.
const (
	mcpReconnectWait = 60 * time.Second
	mcpReconnectPoll = 100 * time.Millisecond
)

// mcpHeader and mcpServerEntry are ACP's McpServer (http variant); other
// variants decode too and are simply never called.
type mcpHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type mcpServerEntry struct {
	Type    string      `json:"type"`
	Name    string      `json:"name"`
	URL     string      `json:"url"`
	Headers []mcpHeader `json:"headers"`
}

// mcpLink is one ACP session's MCP client session to its "paperclip"
// server: opened at the first step that needs it, kept across steps and
// prompts, replaced only when a call fails or the server entry changes.
type mcpLink struct {
	mu      sync.Mutex
	servers []json.RawMessage // as received, for the mcp-servers step
	entry   *mcpServerEntry
	cs      *mcp.ClientSession
	tr      *http.Transport
}

// headerTransport adds the entry's headers (the bearer) to every request
// the SDK sends, without touching the caller's request.
type headerTransport struct {
	base    http.RoundTripper
	headers []mcpHeader
}

func (h *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	for _, hd := range h.headers {
		r.Header.Set(hd.Name, hd.Value)
	}
	return h.base.RoundTrip(r)
}

// setServers records the mcpServers of session/new, load or resume. A new
// or changed "paperclip" entry drops the open client session.
func (a *agent) setServers(s *session, raw json.RawMessage) {
	var servers []json.RawMessage
	_ = json.Unmarshal(raw, &servers)
	var entry *mcpServerEntry
	for _, r := range servers {
		var e mcpServerEntry
		if json.Unmarshal(r, &e) == nil && e.Name == bridgeServerName && e.URL != "" {
			entry = &e
			break
		}
	}
	a.mu.Lock()
	if s.mcp == nil {
		s.mcp = &mcpLink{}
	}
	l := s.mcp
	a.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.servers = servers
	if !sameEntry(l.entry, entry) {
		l.closeLocked()
	}
	l.entry = entry
}

func sameEntry(a, b *mcpServerEntry) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Type == b.Type && a.URL == b.URL && slices.Equal(a.Headers, b.Headers)
}

func (l *mcpLink) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closeLocked()
}

func (l *mcpLink) closeLocked() {
	if l.cs != nil {
		_ = l.cs.Close()
		l.cs = nil
	}
	if l.tr != nil {
		l.tr.CloseIdleConnections()
		l.tr = nil
	}
}

// closeMCP closes a session's MCP link (session/close); closeAllMCP every
// link (stdin EOF).
func (a *agent) closeMCP(s *session) {
	a.mu.Lock()
	l := s.mcp
	a.mu.Unlock()
	if l != nil {
		l.close()
	}
}

func (a *agent) closeAllMCP() {
	a.mu.Lock()
	var links []*mcpLink
	for _, s := range a.sessions {
		if s.mcp != nil {
			links = append(links, s.mcp)
		}
	}
	a.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// connectLocked opens the client session; l.mu is held.
func (l *mcpLink) connectLocked(ctx context.Context) error {
	if l.cs != nil {
		return nil
	}
	if l.entry == nil {
		return errors.New("no mcpServers entry named paperclip")
	}
	if l.entry.Type != "http" {
		return fmt.Errorf("mcpServers entry paperclip has type %q, not http", l.entry.Type)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	client := mcp.NewClient(&mcp.Implementation{Name: "fakeacp", Version: "1.0.0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   l.entry.URL,
		HTTPClient: &http.Client{Transport: &headerTransport{base: tr, headers: l.entry.Headers}},
	}, &mcp.ClientSessionOptions{ProtocolVersion: mcpProtocolVersion})
	if err != nil {
		tr.CloseIdleConnections()
		return fmt.Errorf("connect mcp: %w", err)
	}
	l.cs, l.tr = cs, tr
	return nil
}

// toolOutcome is one tools/call as the agent saw it.
type toolOutcome struct {
	text    string
	isError bool
	err     error // transport or protocol failure: no result
}

func (l *mcpLink) call(ctx context.Context, name string, args json.RawMessage) toolOutcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.connectLocked(ctx); err != nil {
		return toolOutcome{err: err}
	}
	res, err := l.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return toolOutcome{err: fmt.Errorf("call tool: %w", err)}
	}
	return toolOutcome{text: contentText(res.Content), isError: res.IsError}
}

func contentText(content []mcp.Content) string {
	var parts []string
	for _, c := range content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// recover brings the link back after a failed call, within
// mcpReconnectWait: the same client session when the server answers a
// ping on it (a hot-restarted bridge that kept its session id), else a
// fresh one. While the port refuses connections it only waits.
func (l *mcpLink) recover(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, mcpReconnectWait)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		var err error
		if l.cs != nil {
			if err = l.cs.Ping(ctx, nil); err == nil {
				return nil
			}
			if !refused(err) {
				l.closeLocked()
			}
		}
		if l.cs == nil {
			if err = l.connectLocked(ctx); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reconnect mcp: %w", errors.Join(err, ctx.Err()))
		case <-time.After(mcpReconnectPoll):
		}
	}
}

// refused reports a dial refusal: the server is not listening (yet), which
// says nothing about the client session.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// mcpStep is one step of an MCP prompt script.
type mcpStep struct {
	word  string
	tool  string
	args  json.RawMessage
	retry bool
}

// mcpWords are the first words that make a prompt an MCP script.
var mcpWords = map[string]bool{"mcp-call": true, "mcp-call-retry": true, "finish": true, "block": true,
	"list-tools": true, "mcp-servers": true}

// parseMCPScript reads a sequence of steps separated by white space:
//
//	mcp-call NAME JSON        call tool NAME with arguments JSON
//	mcp-call-retry NAME JSON  the same; after a transport failure wait for the
//	                          server and repeat the call once
//	finish JSON               mcp-call paperclip_finish JSON
//	block JSON                mcp-call paperclip_block JSON
//	list-tools                say the listed tool names
//	mcp-servers               say the received mcpServers (header values redacted)
//
// Each JSON is one JSON value, read by a decoder, so it may hold spaces.
func parseMCPScript(text string) ([]mcpStep, error) {
	var steps []mcpStep
	rest := strings.TrimSpace(text)
	for rest != "" {
		var word string
		word, rest = cutWord(rest)
		st := mcpStep{word: word}
		switch word {
		case "mcp-call", "mcp-call-retry":
			st.retry = word == "mcp-call-retry"
			st.tool, rest = cutWord(rest)
			if st.tool == "" {
				return nil, fmt.Errorf("%s needs a tool name", word)
			}
		case "finish":
			st.tool = finishTool
		case "block":
			st.tool = blockTool
		case "list-tools", "mcp-servers":
		default:
			return nil, fmt.Errorf("unknown step %q", word)
		}
		if st.tool != "" {
			dec := json.NewDecoder(strings.NewReader(rest))
			if err := dec.Decode(&st.args); err != nil {
				return nil, fmt.Errorf("%s %s needs JSON arguments: %w", word, st.tool, err)
			}
			rest = strings.TrimSpace(rest[dec.InputOffset():])
		}
		steps = append(steps, st)
	}
	return steps, nil
}

func cutWord(s string) (string, string) {
	s = strings.TrimSpace(s)
	i := strings.IndexAny(s, " \t\r\n")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// runMCP plays an MCP script; every step's outcome is one line of the
// turn's agent message.
func (t *turn) runMCP(text string) (string, any, *rpcError) {
	steps, err := parseMCPScript(text)
	if err != nil {
		return "", nil, &rpcError{Code: -32602, Message: "mcp script: " + err.Error()}
	}
	t.a.mu.Lock()
	if t.s.mcp == nil {
		t.s.mcp = &mcpLink{}
	}
	l := t.s.mcp
	t.a.mu.Unlock()
	for _, st := range steps {
		switch st.word {
		case "mcp-servers":
			t.say("mcp-servers " + redactServers(l.serversSnapshot()) + "\n")
		case "list-tools":
			t.say(t.listTools(l) + "\n")
		default:
			t.mcpCall(l, st)
		}
	}
	return "end_turn", nil, nil
}

func (l *mcpLink) serversSnapshot() []json.RawMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.servers)
}

func (t *turn) listTools(l *mcpLink) string {
	ctx, stop := t.callContext()
	defer stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.connectLocked(ctx)
	var names []string
	if err == nil {
		var res *mcp.ListToolsResult
		if res, err = l.cs.ListTools(ctx, nil); err == nil {
			for _, tl := range res.Tools {
				names = append(names, tl.Name)
			}
		}
	}
	if err != nil {
		l.closeLocked() // a failed request drops the session: reconnect next time
		return "tools failed: " + err.Error()
	}
	return "tools " + strings.Join(names, ",")
}

// mcpCall runs one tools/call step with its tool_call updates.
func (t *turn) mcpCall(l *mcpLink, st mcpStep) {
	id := t.a.next("call")
	title := "mcp__" + bridgeServerName + "__" + st.tool
	t.a.update(t.s, map[string]any{"sessionUpdate": "tool_call", "toolCallId": id,
		"title": title, "kind": "other", "status": "pending", "rawInput": st.args})
	if t.a.cfg.mcpAskPermission && !t.askToolPermission(id, title, st) {
		return
	}
	ctx, stop := t.callContext()
	defer stop()
	out := l.call(ctx, st.tool, st.args)
	if out.err != nil && st.retry && ctx.Err() == nil {
		t.say(fmt.Sprintf("tool %s failed: %v; repeating\n", st.tool, out.err))
		if err := l.recover(ctx); err != nil {
			out = toolOutcome{err: err}
		} else {
			out = l.call(ctx, st.tool, st.args)
		}
	}
	if out.err != nil {
		l.close() // the next call opens a fresh client session
		t.toolDone(id, "failed", "")
		t.say(fmt.Sprintf("tool %s failed: %v\n", st.tool, out.err))
		return
	}
	status := "completed"
	if out.isError {
		status = "failed"
	}
	t.toolDone(id, status, out.text)
	t.say(fmt.Sprintf("tool %s isError=%t: %s\n", st.tool, out.isError, out.text))
}

// askToolPermission asks the client before a bridge tool call, as Claude
// Code does (tools.md §6: the request names the tool by toolCall.title and
// _meta.claudeCode.toolName); a refusal ends the step without a call.
func (t *turn) askToolPermission(id, title string, st mcpStep) bool {
	m := t.call("session/request_permission", map[string]any{
		"toolCall": map[string]any{"toolCallId": id, "title": title, "kind": "other", "status": "pending",
			"rawInput": st.args, "_meta": map[string]any{"claudeCode": map[string]any{"toolName": title}}},
		"options": []any{
			map[string]any{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
			map[string]any{"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
			map[string]any{"optionId": "reject", "name": "Reject", "kind": "reject_once"},
		},
	})
	var r struct {
		Outcome struct {
			Outcome  string `json:"outcome"`
			OptionID string `json:"optionId"`
		} `json:"outcome"`
	}
	_ = json.Unmarshal(m.Result, &r)
	switch {
	case m.Error != nil || r.Outcome.Outcome != "selected":
		t.toolDone(id, "failed", "permission cancelled")
		t.say(fmt.Sprintf("tool %s permission cancelled\n", st.tool))
		return false
	case !strings.HasPrefix(r.Outcome.OptionID, "allow"):
		t.toolDone(id, "failed", "permission denied: "+r.Outcome.OptionID)
		t.say(fmt.Sprintf("tool %s permission denied: %s\n", st.tool, r.Outcome.OptionID))
		return false
	}
	return true
}

// callContext is a tool call's context: cancelled at stdin EOF, and
// mcpCancelGrace after session/cancel (unless the cancel mode ignores it).
func (t *turn) callContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	cancelCh := t.cancel
	if t.a.cfg.cancelMode == "ignore" {
		cancelCh = nil
	}
	go func() {
		defer cancel()
		select {
		case <-done:
			return
		case <-t.a.quit:
			return
		case <-cancelCh:
		}
		grace := time.NewTimer(mcpCancelGrace)
		defer grace.Stop()
		select {
		case <-done:
		case <-t.a.quit:
		case <-grace.C:
		}
	}()
	var once sync.Once
	return ctx, func() { once.Do(func() { close(done) }) }
}

// redactServers renders mcpServers with every header value replaced; an
// entry it cannot read is not shown at all.
func redactServers(servers []json.RawMessage) string {
	if servers == nil {
		servers = []json.RawMessage{}
	}
	b, _ := marshalPlain(servers)
	r, changed, err := redactServerHeaders(b)
	switch {
	case err != nil:
		return `"unreadable"`
	case changed:
		return string(r)
	}
	return string(b)
}

// redactServerHeaders replaces every headers[].value of an mcpServers
// array; changed is false when there was nothing to redact.
func redactServerHeaders(raw json.RawMessage) (json.RawMessage, bool, error) {
	var servers []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &servers); err != nil {
		return nil, false, fmt.Errorf("decode mcpServers: %w", err)
	}
	changed := false
	for _, srv := range servers {
		raw, has := srv["headers"]
		if !has {
			continue
		}
		var headers []map[string]json.RawMessage
		if json.Unmarshal(raw, &headers) != nil {
			srv["headers"] = json.RawMessage(`"` + redactedValue + `"`) // unreadable: hide it all
			changed = true
			continue
		}
		mine := false
		for _, h := range headers {
			if _, has := h["value"]; has {
				h["value"] = json.RawMessage(`"` + redactedValue + `"`)
				mine = true
			}
		}
		if mine {
			srv["headers"], _ = marshalPlain(headers)
			changed = true
		}
	}
	if !changed {
		return nil, false, nil
	}
	b, err := marshalPlain(servers)
	if err != nil {
		return nil, false, fmt.Errorf("encode mcpServers: %w", err)
	}
	return b, true, nil
}

// redactLine rewrites an incoming wire line for the transcript when its
// params carry mcpServers headers; every other line is kept byte for byte.
func redactLine(line string) string {
	if !strings.Contains(line, `"mcpServers"`) {
		return line
	}
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(line), &m) != nil {
		return line
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(m["params"], &params) != nil {
		return line
	}
	r, changed, err := redactServerHeaders(params["mcpServers"])
	switch {
	case err != nil:
		r = json.RawMessage(`"` + redactedValue + `"`) // unreadable: hide it all
	case !changed:
		return line
	}
	params["mcpServers"] = r
	m["params"], _ = marshalPlain(params)
	b, err := marshalPlain(m)
	if err != nil {
		return line
	}
	return string(b)
}

// marshalPlain is json.Marshal without HTML escaping, so "<redacted>"
// reads as written.
func marshalPlain(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
