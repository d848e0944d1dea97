package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// testSecret is the bearer the test bridge demands; it must never show in
// a transcript or in the agent's messages.
const testSecret = "s3cr3t-bearer-of-the-test-bridge"

// testBridge is a go-sdk MCP server standing in for internal/mcpbridge:
// Streamable HTTP on loopback behind a bearer check.
type testBridge struct {
	srv    *httptest.Server
	server *mcp.Server
	mu     sync.Mutex
	inits  int      // initialize requests seen
	sids   []string // distinct Mcp-Session-Ids seen on tools/call
	calls  []string // tools/call arguments of "slow", in order
	// block, when set, holds every "slow" call until the bridge closes.
	block   bool
	entered chan struct{}   // a "slow" call started
	held    []chan struct{} // blocked calls, oldest first
	dead    bool            // close ran: no call blocks any more
	closed  sync.Once
}

func newTestBridge(t *testing.T, ln net.Listener, stateless bool) *testBridge {
	t.Helper()
	b := &testBridge{entered: make(chan struct{}, 8)}
	server := mcp.NewServer(&mcp.Implementation{Name: "paperclip-runner", Version: "1"}, nil)
	object := json.RawMessage(`{"type":"object"}`)
	server.AddTool(&mcp.Tool{Name: "issue.comment", Description: "comment", InputSchema: object},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return textResult("commented "+string(req.Params.Arguments), false), nil
		})
	server.AddTool(&mcp.Tool{Name: finishTool, Description: "finish", InputSchema: object},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return textResult(`{"success":true}`, false), nil
		})
	server.AddTool(&mcp.Tool{Name: blockTool, Description: "block", InputSchema: object},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return textResult("Invalid tool input: /blocker is required", true), nil
		})
	server.AddTool(&mcp.Tool{Name: "slow", Description: "slow", InputSchema: object},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			b.mu.Lock()
			var release chan struct{}
			if b.block && !b.dead {
				release = make(chan struct{})
				b.held = append(b.held, release)
			}
			b.calls = append(b.calls, string(req.Params.Arguments))
			b.mu.Unlock()
			b.entered <- struct{}{}
			if release != nil {
				<-release
				return textResult("Paperclip stopped the active provider turn", true), nil
			}
			return textResult("slow done "+string(req.Params.Arguments), false), nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{JSONResponse: true, Stateless: stateless})
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testSecret {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		b.observe(r.Header.Get("Mcp-Session-Id"), body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		h.ServeHTTP(w, r)
	}))
	b.server = server
	if ln != nil {
		_ = b.srv.Listener.Close()
		b.srv.Listener = ln
	}
	b.srv.Start()
	t.Cleanup(b.close)
	return b
}

func (b *testBridge) observe(sid string, body []byte) {
	var m struct {
		Method string `json:"method"`
	}
	_ = json.Unmarshal(body, &m)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch m.Method {
	case "initialize":
		b.inits++
	case "tools/call":
		for _, s := range b.sids {
			if s == sid {
				return
			}
		}
		b.sids = append(b.sids, sid)
	}
}

// close kills the bridge as a SIGKILL of runnerd would: connections cut,
// listener gone, server sessions dropped.
func (b *testBridge) close() {
	b.closed.Do(func() {
		// Listener first: no client may reach a dying bridge.
		_ = b.srv.Listener.Close()
		b.srv.CloseClientConnections()
		b.mu.Lock()
		b.dead = true
		for _, r := range b.held {
			close(r)
		}
		b.held = nil
		b.mu.Unlock()
		b.srv.Close()
		for ss := range b.server.Sessions() {
			_ = ss.Close()
		}
	})
}

// release lets the oldest blocked call answer (the go-sdk server does not
// cancel the handler of a cut request).
func (b *testBridge) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.held) > 0 {
		close(b.held[0])
		b.held = b.held[1:]
	}
}

func (b *testBridge) counts() (int, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inits, len(b.sids)
}

func (b *testBridge) servers(bearer string) []any {
	return []any{
		map[string]any{"type": "stdio", "name": "other", "command": "/bin/true", "args": []any{}, "env": []any{}},
		map[string]any{"type": "http", "name": "paperclip", "url": b.srv.URL + "/mcp",
			"headers": []any{map[string]any{"name": "Authorization", "value": "Bearer " + bearer}}},
	}
}

func textResult(text string, isError bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: isError}
}

// wireAgent drives the in-process agent with raw JSON-RPC lines, so the
// test can send mcpServers in the shape it wants.
type wireAgent struct {
	t  *testing.T
	in *io.PipeWriter
	// permission answers session/request_permission: an optionId, or
	// "cancelled"; asked records each request's params.
	permission string
	asked      []json.RawMessage
	lines      chan json.RawMessage
	done       chan int
	next       int
	once       sync.Once
}

func startWire(t *testing.T, cfg config) *wireAgent {
	t.Helper()
	// fakeacp frees a session only after its prompt's answer is written;
	// queueing makes a prompt sent right after an answer wait for that.
	cfg.busyPrompt = "queue"
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	w := &wireAgent{t: t, in: inW, lines: make(chan json.RawMessage, 1024), done: make(chan int, 1)}
	go func() {
		code := run(cfg, inR, outW, io.Discard)
		_ = outW.Close()
		w.done <- code
	}()
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			w.lines <- json.RawMessage(append([]byte(nil), sc.Bytes()...))
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *wireAgent) stop() {
	w.once.Do(func() {
		_ = w.in.Close()
		select {
		case <-w.done:
		case <-time.After(testWait):
			w.t.Error("fakeacp did not exit on stdin EOF")
		}
		for range w.lines {
		}
	})
}

type wireMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Update map[string]any `json:"update"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *rpcError       `json:"error"`
}

// call sends a request and returns its answer and the updates before it.
func (w *wireAgent) call(method string, params any, timeout time.Duration) (wireMsg, []map[string]any) {
	w.t.Helper()
	return w.await(w.send(method, params), timeout, nil)
}

func (w *wireAgent) send(method string, params any) int {
	w.t.Helper()
	w.next++
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": w.next, "method": method, "params": params})
	require.NoError(w.t, err)
	_, err = w.in.Write(append(b, '\n'))
	require.NoError(w.t, err)
	return w.next
}

// await reads until the answer to id, or until until(update) is true
// (then the answer is the zero wireMsg).
func (w *wireAgent) await(id int, timeout time.Duration, until func(map[string]any) bool) (wireMsg, []map[string]any) {
	w.t.Helper()
	var updates []map[string]any
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-w.lines:
			require.True(w.t, ok, "agent stdout closed")
			var m wireMsg
			require.NoError(w.t, json.Unmarshal(line, &m))
			if m.Method == "session/request_permission" {
				w.answerPermission(m.ID, line)
				continue
			}
			if m.Method == "session/update" {
				updates = append(updates, m.Params.Update)
				if until != nil && until(m.Params.Update) {
					return wireMsg{}, updates
				}
				continue
			}
			if m.Method == "" && string(m.ID) == fmt.Sprint(id) {
				return m, updates
			}
		case <-deadline:
			w.t.Fatalf("request %d: no answer", id)
		}
	}
}

func (w *wireAgent) answerPermission(id json.RawMessage, line json.RawMessage) {
	w.t.Helper()
	var req struct {
		Params json.RawMessage `json:"params"`
	}
	require.NoError(w.t, json.Unmarshal(line, &req))
	w.asked = append(w.asked, req.Params)
	outcome := map[string]any{"outcome": "selected", "optionId": w.permission}
	if w.permission == "cancelled" {
		outcome = map[string]any{"outcome": "cancelled"}
	}
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{"outcome": outcome}})
	require.NoError(w.t, err)
	_, err = w.in.Write(append(b, '\n'))
	require.NoError(w.t, err)
}

func (w *wireAgent) open(servers []any) string {
	w.t.Helper()
	m, _ := w.call("initialize", map[string]any{"protocolVersion": 1}, testWait)
	require.Nil(w.t, m.Error)
	m, _ = w.call("session/new", map[string]any{"cwd": "/work/repo", "mcpServers": servers}, testWait)
	require.Nil(w.t, m.Error)
	var r struct {
		SessionID string `json:"sessionId"`
	}
	require.NoError(w.t, json.Unmarshal(m.Result, &r))
	return r.SessionID
}

// prompt runs one turn and returns its stop reason and message text.
func (w *wireAgent) prompt(sid, text string, timeout time.Duration) (string, string, []map[string]any) {
	w.t.Helper()
	m, updates := w.call("session/prompt", map[string]any{"sessionId": sid,
		"prompt": []any{map[string]any{"type": "text", "text": text}}}, timeout)
	require.Nil(w.t, m.Error)
	var r struct {
		StopReason string `json:"stopReason"`
	}
	require.NoError(w.t, json.Unmarshal(m.Result, &r))
	return r.StopReason, messageText(updates), updates
}

func messageText(updates []map[string]any) string {
	var sb strings.Builder
	for _, u := range updates {
		if u["sessionUpdate"] == "agent_message_chunk" {
			sb.WriteString(u["content"].(map[string]any)["text"].(string))
		}
	}
	return sb.String()
}

func TestMCPCapabilityAdvertisedOnlyWithTheSwitch(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := defaults(t)
		cfg.mcpHTTP = on
		w := startWire(t, cfg)
		m, _ := w.call("initialize", map[string]any{"protocolVersion": 1}, testWait)
		var r struct {
			AgentCapabilities map[string]json.RawMessage `json:"agentCapabilities"`
		}
		require.NoError(t, json.Unmarshal(m.Result, &r))
		caps, has := r.AgentCapabilities["mcpCapabilities"]
		require.Equal(t, on, has)
		if on {
			require.JSONEq(t, `{"http":true,"sse":false}`, string(caps))
		}
		w.stop()
	}
	c, err := parseConfig(nil, func(k string) string { return map[string]string{"FAKEACP_MCP_HTTP": "true"}[k] })
	require.NoError(t, err)
	require.True(t, c.mcpHTTP, "the switch is also an env var")
}

// TestMCPScriptCallsTheBridge: a script lists the tools, calls a catalog
// tool, paperclip_finish and paperclip_block through the real go-sdk client
// with the bearer from mcpServers; results and isError reach the message
// text and tool_call updates; one client session serves every step of two
// prompts; the transcript holds mcpServers with the bearer redacted.
func TestMCPScriptCallsTheBridge(t *testing.T) {
	b := newTestBridge(t, nil, false)
	cfg := defaults(t)
	cfg.mcpHTTP = true
	cfg.transcript = filepath.Join(t.TempDir(), "wire.ndjson")
	w := startWire(t, cfg)
	sid := w.open(b.servers(testSecret))

	stop, text, updates := w.prompt(sid, `list-tools mcp-call issue.comment {"body": "hi there"}`+"\n"+
		`finish {"reportedWorkDisposition":"done","summary":"ok"} block {"reportedWorkDisposition":"blocked"}`, testWait)
	require.Equal(t, "end_turn", stop)
	require.Equal(t, "tools issue.comment,paperclip_block,paperclip_finish,slow\n"+
		`tool issue.comment isError=false: commented {"body":"hi there"}`+"\n"+
		`tool paperclip_finish isError=false: {"success":true}`+"\n"+
		"tool paperclip_block isError=true: Invalid tool input: /blocker is required\n", text)

	var calls, done []map[string]any
	for _, u := range updates {
		switch u["sessionUpdate"] {
		case "tool_call":
			calls = append(calls, u)
		case "tool_call_update":
			done = append(done, u)
		}
	}
	require.Len(t, calls, 3)
	require.Equal(t, "mcp__paperclip__issue.comment", calls[0]["title"])
	require.Equal(t, map[string]any{"body": "hi there"}, calls[0]["rawInput"])
	require.Len(t, done, 3)
	require.Equal(t, []any{"completed", "completed", "failed"}, []any{done[0]["status"], done[1]["status"], done[2]["status"]})

	_, text, _ = w.prompt(sid, `mcp-call issue.comment {} mcp-servers`, testWait)
	require.Contains(t, text, "tool issue.comment isError=false: commented {}\n")
	require.Contains(t, text, `"value":"<redacted>"`)
	require.NotContains(t, text, testSecret)
	inits, sessions := b.counts()
	require.Equal(t, 1, inits, "one MCP client session across steps and prompts")
	require.Equal(t, 1, sessions)

	w.stop()
	raw, err := os.ReadFile(cfg.transcript)
	require.NoError(t, err)
	require.NotContains(t, string(raw), testSecret)
	require.Contains(t, string(raw), `"mcpServers":[{"args":[],"command":"/bin/true"`)
	// The transcript is JSON: "<redacted>" reads \u003credacted\u003e there.
	require.Contains(t, string(raw), `{"name":"Authorization","value":"\u003credacted\u003e"}`)
	require.Contains(t, string(raw), `"url":"`+b.srv.URL+`/mcp"`)
}

// TestMCPWrongBearerIsACallFailure: a 401 is reported as a failed call,
// with no secret in the message; the agent keeps serving.
func TestMCPWrongBearerIsACallFailure(t *testing.T) {
	b := newTestBridge(t, nil, false)
	w := startWire(t, defaults(t))
	sid := w.open(b.servers("wrong-bearer"))
	stop, text, _ := w.prompt(sid, `mcp-call issue.comment {} list-tools`, testWait)
	require.Equal(t, "end_turn", stop)
	require.Contains(t, text, "tool issue.comment failed: connect mcp:")
	require.Contains(t, text, "tools failed: connect mcp:")
	require.NotContains(t, text, "wrong-bearer")
	_, text, _ = w.prompt(sid, "echo still here", testWait)
	require.Equal(t, "still here", text)
}

// TestMCPNoBridgeEntry: without a "paperclip" http entry a call fails
// cleanly.
func TestMCPNoBridgeEntry(t *testing.T) {
	w := startWire(t, defaults(t))
	sid := w.open([]any{})
	_, text, _ := w.prompt(sid, `finish {"summary":"x"}`, testWait)
	require.Equal(t, "tool paperclip_finish failed: no mcpServers entry named paperclip\n", text)
}

// TestMCPCallRetryAfterConnectionError is the agent side of the hot
// restart (tools.md §9 scenario 5): the bridge dies while a call waits;
// the call fails with a transport error; the agent waits for a bridge on
// the same port and repeats the call once, with the same arguments,
// through the old client session when the new server accepts it (a
// bridge that kept its session id; here a stateless one) or a fresh one.
func TestMCPCallRetryAfterConnectionError(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stateless bool
		inits     int // initialize requests the restarted bridge sees
	}{{"fresh session", false, 1}, {"same session", true, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			b1 := newTestBridge(t, nil, tc.stateless)
			w := startWire(t, defaults(t))
			sid := w.open(b1.servers(testSecret))
			_, text, _ := w.prompt(sid, "list-tools", testWait) // the client session is open
			require.Contains(t, text, "tools issue.comment")
			b1.mu.Lock()
			b1.block = true
			b1.mu.Unlock()

			id := w.send("session/prompt", map[string]any{"sessionId": sid,
				"prompt": []any{map[string]any{"type": "text", "text": `mcp-call-retry slow {"n": 1}`}}})
			select {
			case <-b1.entered:
			case <-time.After(testWait):
				t.Fatal("the call did not reach the bridge")
			}
			addr := b1.srv.Listener.Addr().String()
			b1.close()
			var sb strings.Builder
			w.await(id, testWait, func(u map[string]any) bool {
				sb.WriteString(messageText([]map[string]any{u}))
				return strings.Contains(sb.String(), "; repeating\n")
			})
			require.Regexp(t, `^tool slow failed: call tool: .*; repeating\n$`, sb.String())
			require.NotContains(t, sb.String(), testSecret)

			ln, err := net.Listen("tcp", addr) // the restarted bridge, same port
			require.NoError(t, err)
			b2 := newTestBridge(t, ln, tc.stateless)
			m, updates := w.await(id, testWait, nil)
			require.Nil(t, m.Error)
			require.Equal(t, `tool slow isError=false: slow done {"n":1}`+"\n", messageText(updates))
			b2.mu.Lock()
			require.Equal(t, []string{`{"n":1}`}, b2.calls, "repeated once, same arguments")
			require.Equal(t, tc.inits, b2.inits)
			b2.mu.Unlock()
		})
	}
}

// TestMCPRetryIsBoundedToOneRepeat: a repeat that fails too is reported,
// not repeated again.
func TestMCPRetryIsBoundedToOneRepeat(t *testing.T) {
	b := newTestBridge(t, nil, false)
	b.block = true
	w := startWire(t, defaults(t))
	sid := w.open(b.servers(testSecret))
	id := w.send("session/prompt", map[string]any{"sessionId": sid,
		"prompt": []any{map[string]any{"type": "text", "text": `mcp-call-retry slow {}`}}})
	for range 2 {
		select {
		case <-b.entered:
		case <-time.After(testWait):
			t.Fatal("the call did not reach the bridge")
		}
		// Cut the call's connection only; the bridge stays up. The cut
		// call's handler is then let go (else the session's DELETE waits
		// for it).
		b.srv.CloseClientConnections()
		b.release()
	}
	m, updates := w.await(id, testWait, nil)
	require.Nil(t, m.Error)
	text := messageText(updates)
	require.Equal(t, 2, strings.Count(text, "tool slow failed:"), text)
	require.Equal(t, 1, strings.Count(text, "repeating"), text)
	b.mu.Lock()
	require.Len(t, b.calls, 2)
	b.mu.Unlock()
}

func TestParseMCPScript(t *testing.T) {
	steps, err := parseMCPScript(`mcp-call a.b {"x": "y z"} finish {"s":1}` + "\n" + `block {} list-tools mcp-call-retry c [1] mcp-servers`)
	require.NoError(t, err)
	require.Equal(t, []mcpStep{
		{word: "mcp-call", tool: "a.b", args: json.RawMessage(`{"x": "y z"}`)},
		{word: "finish", tool: finishTool, args: json.RawMessage(`{"s":1}`)},
		{word: "block", tool: blockTool, args: json.RawMessage(`{}`)},
		{word: "list-tools"},
		{word: "mcp-call-retry", tool: "c", args: json.RawMessage(`[1]`), retry: true},
		{word: "mcp-servers"},
	}, steps)
	for _, bad := range []string{"mcp-call", "mcp-call x", "finish {", "finish {} echo hi", "list-tools bogus"} {
		_, err := parseMCPScript(bad)
		require.Error(t, err, bad)
	}
}

func FuzzParseMCPScript(f *testing.F) {
	f.Add(`mcp-call a {"x":1} finish {} block {"y":[1,2]} list-tools mcp-servers`)
	f.Add(`mcp-call-retry x "s"`)
	f.Add(`finish {"a":`)
	f.Fuzz(func(t *testing.T, text string) {
		steps, err := parseMCPScript(text)
		if err != nil {
			return
		}
		for _, st := range steps {
			if !mcpWords[st.word] {
				t.Fatalf("unknown word %q accepted", st.word)
			}
			if (st.tool != "") != (st.args != nil) || (st.tool != "" && !json.Valid(st.args)) {
				t.Fatalf("step %+v", st)
			}
		}
	})
}

// TestRedactLine: a line with mcpServers headers is rewritten with every
// value redacted; any other line is kept byte for byte.
func TestRedactLine(t *testing.T) {
	line := `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w","mcpServers":[{"type":"http","name":"paperclip","url":"http://127.0.0.1:1/mcp","headers":[{"name":"Authorization","value":"Bearer ` + testSecret + `"}]}]}}`
	got := redactLine(line)
	require.NotContains(t, got, testSecret)
	require.JSONEq(t, strings.ReplaceAll(line, "Bearer "+testSecret, redactedValue), got)
	for _, keep := range []string{
		`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}`,
		`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w","mcpServers":[{"type":"http","name":"p","url":"u","headers":[]}]}}`,
		`not json "mcpServers"`,
	} {
		require.Equal(t, keep, redactLine(keep))
	}
	odd := `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"mcpServers":["Bearer ` + testSecret + `"]}}`
	require.NotContains(t, redactLine(odd), testSecret, "an unreadable mcpServers is hidden whole")
}

func FuzzRedactLine(f *testing.F) {
	f.Add(`{"params":{"mcpServers":[{"headers":[{"name":"A","value":"v"}]}]}}`)
	f.Add(`{"params":{"mcpServers":[{"headers":"x"}]}}`)
	f.Fuzz(func(t *testing.T, line string) {
		got := redactLine(line)
		if got != line && !json.Valid([]byte(got)) {
			t.Fatalf("rewrote to invalid JSON: %q", got)
		}
	})
}

// TestMCPCancelWaitsForTheBridgesAnswer: session/cancel does not abandon a
// pending call: the agent still reports the bridge's answer (tools.md §3
// item 6, the stop error), then ends the turn cancelled.
func TestMCPCancelWaitsForTheBridgesAnswer(t *testing.T) {
	b := newTestBridge(t, nil, false)
	b.block = true
	w := startWire(t, defaults(t))
	sid := w.open(b.servers(testSecret))
	id := w.send("session/prompt", map[string]any{"sessionId": sid,
		"prompt": []any{map[string]any{"type": "text", "text": `mcp-call slow {}`}}})
	select {
	case <-b.entered:
	case <-time.After(testWait):
		t.Fatal("the call did not reach the bridge")
	}
	b2, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "session/cancel", "params": map[string]any{"sessionId": sid}})
	require.NoError(t, err)
	_, err = w.in.Write(append(b2, '\n'))
	require.NoError(t, err)
	// Lines are handled in order: an answer to a later request proves the
	// cancel was seen.
	m, _ := w.await(w.send("_vendor/x", map[string]any{}), testWait, nil)
	require.NotNil(t, m.Error)
	b.release() // the bridge answers with its stop error
	m, updates := w.await(id, testWait, nil)
	require.Nil(t, m.Error)
	require.JSONEq(t, `{"stopReason":"cancelled"}`, string(m.Result))
	require.Equal(t, "tool slow isError=true: Paperclip stopped the active provider turn\n", messageText(updates))
}

// TestMCPAskPermissionBeforeEachCall: with --mcp-ask-permission the agent
// asks before each bridge tool call, naming the tool as Claude Code does
// (title and _meta.claudeCode.toolName mcp__paperclip__<tool>); only an
// allow option leads to the call.
func TestMCPAskPermissionBeforeEachCall(t *testing.T) {
	b := newTestBridge(t, nil, false)
	for _, tc := range []struct{ answer, text string }{
		{"allow", "tool issue.comment isError=false: commented {}\n"},
		{"reject", "tool issue.comment permission denied: reject\n"},
		{"cancelled", "tool issue.comment permission cancelled\n"},
	} {
		cfg := defaults(t)
		cfg.mcpAskPermission = true
		w := startWire(t, cfg)
		w.permission = tc.answer
		sid := w.open(b.servers(testSecret))
		_, text, _ := w.prompt(sid, `mcp-call issue.comment {}`, testWait)
		require.Equal(t, tc.text, text, tc.answer)
		require.Len(t, w.asked, 1)
		var p struct {
			SessionID string `json:"sessionId"`
			ToolCall  struct {
				Title string `json:"title"`
				Meta  struct {
					ClaudeCode struct {
						ToolName string `json:"toolName"`
					} `json:"claudeCode"`
				} `json:"_meta"`
			} `json:"toolCall"`
		}
		require.NoError(t, json.Unmarshal(w.asked[0], &p))
		require.Equal(t, sid, p.SessionID)
		require.Equal(t, "mcp__paperclip__issue.comment", p.ToolCall.Title)
		require.Equal(t, "mcp__paperclip__issue.comment", p.ToolCall.Meta.ClaudeCode.ToolName)
		w.stop()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Len(t, b.sids, 1, "only the allowed call reached the bridge")
}

// TestMCPSessionCloseDropsTheLink: session/close closes the session's MCP
// client (goleak checks nothing is left) and is answered at once.
func TestMCPSessionCloseDropsTheLink(t *testing.T) {
	b := newTestBridge(t, nil, false)
	cfg := defaults(t)
	cfg.supportsClose = true
	w := startWire(t, cfg)
	sid := w.open(b.servers(testSecret))
	_, text, _ := w.prompt(sid, `mcp-call issue.comment {}`, testWait)
	require.Contains(t, text, "isError=false")
	m, _ := w.call("session/close", map[string]any{"sessionId": sid}, testWait)
	require.Nil(t, m.Error)
	w.stop()
}

// TestMCPSessionCloseAnsweredWhileACallWaits: session/close is answered
// while a tool call still waits for the bridge (the cancel mode ignores
// the cancel, so only the bridge could end the call): closing the link
// must not hold the agent's input.
func TestMCPSessionCloseAnsweredWhileACallWaits(t *testing.T) {
	b := newTestBridge(t, nil, false)
	b.block = true
	cfg := defaults(t)
	cfg.supportsClose = true
	cfg.cancelMode = "ignore"
	w := startWire(t, cfg)
	t.Cleanup(b.close) // before w.stop: a stalled agent is let go, so a failure ends
	sid := w.open(b.servers(testSecret))
	id := w.send("session/prompt", map[string]any{"sessionId": sid,
		"prompt": []any{map[string]any{"type": "text", "text": `mcp-call slow {}`}}})
	select {
	case <-b.entered:
	case <-time.After(testWait):
		t.Fatal("the call did not reach the bridge")
	}
	m, _ := w.await(w.send("session/close", map[string]any{"sessionId": sid}), testWait, nil)
	require.Nil(t, m.Error)
	b.release()
	m, updates := w.await(id, testWait, nil)
	require.Nil(t, m.Error)
	require.Equal(t, "tool slow isError=true: Paperclip stopped the active provider turn\n", messageText(updates))
}
