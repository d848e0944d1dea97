package mcpbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestTools02_ListToolsThroughGoSDKClient is tools.md §9 scenario 2, the
// bridge's half: tools/list through the Go SDK's client → the catalog then
// the two reserved tools (as Config.Tools gives them); no bearer → 401;
// GET → 405; wrong path → 404.
func TestTools02_ListToolsThroughGoSDKClient(t *testing.T) {
	s, _ := startServer(t, Config{})
	cs := connectSDK(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	list, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	require.Equal(t, []string{"issue.comment", "issue.update", "paperclip_finish", "paperclip_block"}, names)
	require.Equal(t, "Comment on the task", list.Tools[0].Description)
	schema, err := json.Marshal(list.Tools[0].InputSchema)
	require.NoError(t, err)
	require.JSONEq(t, string(testTools()[0].InputSchema), string(schema))
	init := cs.InitializeResult()
	require.Equal(t, "2025-03-26", init.ProtocolVersion)
	require.Equal(t, "paperclip-runner", init.ServerInfo.Name)
	require.Equal(t, "1", init.ServerInfo.Version)

	c := rawClient(t)
	status, hdr, _ := post(t, c, s, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, func(r *http.Request) { r.Header.Del("Authorization") })
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, "Bearer", hdr.Get("WWW-Authenticate"))

	status, hdr, _ = post(t, c, s, "", func(r *http.Request) { r.Method = http.MethodGet; r.Body = nil; r.ContentLength = 0 })
	require.Equal(t, http.StatusMethodNotAllowed, status)
	require.Equal(t, "POST", hdr.Get("Allow"))

	status, _, _ = post(t, c, s, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, func(r *http.Request) { r.URL.Path = "/other" })
	require.Equal(t, http.StatusNotFound, status)

	// The SDK session still works after the refusals.
	_, err = cs.ListTools(ctx, nil)
	require.NoError(t, err)
}

// TestFixedAnswers pins the bytes of initialize (whatever version the
// client asks), ping, tools/list and an unknown method, and the session
// header on initialize.
func TestFixedAnswers(t *testing.T) {
	s, _ := startServer(t, Config{Tools: func() []Tool {
		return []Tool{{Name: "a<b", Description: "x&y"}}
	}})
	c := rawClient(t)
	for _, asked := range []string{"2025-03-26", "2025-11-25", "1999-01-01"} {
		status, hdr, body := post(t, c, s, `{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"`+asked+`","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
			func(r *http.Request) { r.Header.Del("Mcp-Session-Id") })
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "application/json", hdr.Get("Content-Type"))
		require.Equal(t, s.SessionID(), hdr.Get("Mcp-Session-Id"))
		require.Equal(t, `{"jsonrpc":"2.0","id":"i","result":{"protocolVersion":"2025-03-26","capabilities":{"tools":{"listChanged":false}},"serverInfo":{"name":"paperclip-runner","version":"1"}}}`, body)
	}
	for _, tc := range []struct{ req, want string }{
		{`{"jsonrpc":"2.0","id":2,"method":"ping"}`, `{"jsonrpc":"2.0","id":2,"result":{}}`},
		{`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{}}`, `{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"a<b","description":"x&y","inputSchema":{"type":"object"}}]}}`},
		{`{"jsonrpc":"2.0","id":4,"method":"resources/list"}`, `{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"Method not found"}}`},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"arguments":{}}}`, `{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"Invalid params: name must be a string"}}`},
		{`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"x","arguments":[1]}}`, `{"jsonrpc":"2.0","id":6,"error":{"code":-32602,"message":"Invalid params: arguments must be an object"}}`},
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}`, `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"x {}"}],"isError":false}}`},
	} {
		status, hdr, body := post(t, c, s, tc.req, nil)
		require.Equal(t, http.StatusOK, status, tc.req)
		require.Empty(t, hdr.Get("Mcp-Session-Id"), tc.req)
		require.Equal(t, tc.want, body, tc.req)
	}
	for _, n := range []string{
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":42}}`,
		`{"jsonrpc":"2.0","method":"notifications/whatever"}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
	} {
		status, _, body := post(t, c, s, n, nil)
		require.Equal(t, http.StatusAccepted, status, n)
		require.Empty(t, body, n)
	}
}

// TestCallToolRoundTripGoSDK: a tools/call through the Go SDK's client
// reaches the Handler with the session id, the JSON-RPC id, the name and
// the arguments, and the Handler's text and isError come back.
func TestCallToolRoundTripGoSDK(t *testing.T) {
	calls := make(chan Call, 4)
	s, _ := startServer(t, Config{Handler: handlerFunc(func(_ context.Context, c Call) Result {
		calls <- c
		return Result{Text: `{"ok":true,"n":` + string(c.Arguments) + `}`, IsError: c.Name == "issue.update"}
	})})
	cs := connectSDK(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	for _, name := range []string{"issue.comment", "issue.update"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"body": "hi <there>"}})
		require.NoError(t, err)
		require.Len(t, res.Content, 1)
		text, ok := res.Content[0].(*mcp.TextContent)
		require.True(t, ok)
		require.Equal(t, `{"ok":true,"n":{"body":"hi <there>"}}`, text.Text)
		require.Equal(t, name == "issue.update", res.IsError)
		c := recv(t, calls, "handler call")
		require.Equal(t, s.SessionID(), c.SessionID)
		require.Equal(t, name, c.Name)
		require.JSONEq(t, `{"body":"hi <there>"}`, string(c.Arguments))
		require.NotEmpty(t, c.RequestID)
	}
}

// TestBadInputKeepsServing: each bad request gets its status (and JSON-RPC
// error or tool error), the Handler is not called, and a good call succeeds
// afterwards.
func TestBadInputKeepsServing(t *testing.T) {
	called := make(chan Call, 64)
	s, _ := startServer(t, Config{Handler: handlerFunc(func(ctx context.Context, c Call) Result {
		if c.RequestID != nil && string(c.RequestID) != "99" {
			called <- c
		}
		return echo(ctx, c)
	})})
	c := rawClient(t)
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":"` + strings.Repeat("x", 2<<20) + `"}}}`
	cases := []struct {
		name   string
		body   string
		edit   func(*http.Request)
		status int
		want   string // exact body when set
	}{
		{name: "malformed", body: `{"jsonrpc":"2.0","id":1,"method":`, status: 400,
			want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`},
		{name: "empty body", body: ``, status: 400,
			want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`},
		{name: "batch", body: `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, status: 400,
			want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Batch requests are not supported"}}`},
		{name: "not an object", body: `"ping"`, status: 400,
			want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}`},
		{name: "wrong version", body: `{"jsonrpc":"1.0","id":1,"method":"ping"}`, status: 400,
			want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}`},
		{name: "case-folded key", body: `{"jsonrpc":"2.0","id":1,"Method":"ping"}`, status: 400,
			want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}`},
		{name: "null id", body: `{"jsonrpc":"2.0","id":null,"method":"ping"}`, status: 400,
			want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}`},
		{name: "wrong bearer", body: callBody(1, "x", `{}`), status: 401,
			edit: func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+s.Secret()+"x") }},
		{name: "basic auth", body: callBody(1, "x", `{}`), status: 401,
			edit: func(r *http.Request) { r.SetBasicAuth("u", s.Secret()) }},
		{name: "2 MiB", body: big, status: 413},
		{name: "2 MiB chunked", body: big, status: 413, edit: func(r *http.Request) {
			r.ContentLength = -1 // no Content-Length: the read stops at the limit
			r.Body = io.NopCloser(strings.NewReader(big))
		}},
		{name: "NUL in name", body: callBody(1, "issue.comment\x00", `{}`), status: 200,
			want: `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Unsupported tool."}],"isError":true}}`},
		{name: "control char in name", body: callBody(1, "issue.\u0085comment", `{}`), status: 200,
			want: `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Unsupported tool."}],"isError":true}}`},
		{name: "empty name", body: callBody(1, "", `{}`), status: 200,
			want: `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Unsupported tool."}],"isError":true}}`},
		{name: "wrong content type", body: callBody(1, "x", `{}`), status: 415,
			edit: func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }},
		{name: "no content type", body: callBody(1, "x", `{}`), status: 415,
			edit: func(r *http.Request) { r.Header.Del("Content-Type") }},
		{name: "origin", body: callBody(1, "x", `{}`), status: 403,
			edit: func(r *http.Request) { r.Header.Set("Origin", "http://127.0.0.1") }},
		{name: "empty origin", body: callBody(1, "x", `{}`), status: 403,
			edit: func(r *http.Request) { r.Header["Origin"] = []string{""} }},
		{name: "host", body: callBody(1, "x", `{}`), status: 403,
			edit: func(r *http.Request) { r.Host = "evil.example:" + strconv.Itoa(s.Port()) }},
		{name: "host without port", body: callBody(1, "x", `{}`), status: 403,
			edit: func(r *http.Request) { r.Host = "127.0.0.1" }},
		{name: "other session", body: callBody(1, "x", `{}`), status: 404,
			edit: func(r *http.Request) { r.Header.Set("Mcp-Session-Id", "other") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := post(t, c, s, tc.body, tc.edit)
			require.Equal(t, tc.status, status)
			if tc.want != "" {
				require.Equal(t, tc.want, body)
			}
			goodCall(t, c, s)
		})
	}
	// Parameters on the media type are allowed, and localhost is a good Host.
	status, _, _ := post(t, c, s, callBody(1, "x", `{}`), func(r *http.Request) {
		r.Header.Set("Content-Type", "application/json; charset=utf-8")
		r.Host = "localhost:" + strconv.Itoa(s.Port())
	})
	require.Equal(t, http.StatusOK, status)
	recv(t, called, "the good call")
	require.Empty(t, called, "a refused request reached the handler")
}

// TestLogsHoldNoSecret: the debug log of a session with refusals and calls
// holds neither the secret, nor the session id, nor any body or tool name.
func TestLogsHoldNoSecret(t *testing.T) {
	s, logs := startServer(t, Config{})
	c := rawClient(t)
	marker := "BODYMARKER"
	post(t, c, s, callBody(1, "tool"+marker, `{"k":"`+marker+`"}`), nil)
	post(t, c, s, callBody(1, "x", `{}`), func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+s.Secret()[:20]+marker) })
	post(t, c, s, `{"jsonrpc":`+marker, nil)
	post(t, c, s, callBody(1, "x", `{}`), func(r *http.Request) { r.Header.Set("Mcp-Session-Id", s.SessionID()+marker) })
	post(t, c, s, callBody(1, "x\x00"+marker, `{}`), nil)
	post(t, c, s, `{"jsonrpc":"2.0","id":1,"method":"`+marker+`"}`, nil)
	cs := connectSDK(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "issue.comment", Arguments: map[string]any{"body": marker}})
	require.NoError(t, err)
	out := logs.String()
	require.Contains(t, out, `"status":401`, "the refusals are logged")
	for _, secret := range []string{s.Secret(), s.Secret()[:20], s.SessionID(), marker} {
		require.NotContains(t, out, secret)
	}
}

// TestCancelOnDisconnect: a client that goes away mid-call cancels the
// Handler's ctx; the server keeps serving.
func TestCancelOnDisconnect(t *testing.T) {
	b := newBlocker()
	s, _ := startServer(t, Config{Handler: b})
	defer b.releaseAll()
	c := rawClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL(), strings.NewReader(callBody(1, "x", `{}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+s.Secret())
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	recv(t, b.entered, "handler entry")
	cancel()
	require.Error(t, recv(t, done, "client return"))
	got := recv(t, b.cancelled, "handler ctx cancelled")
	require.Equal(t, "1", string(got.RequestID))
	b.releaseAll()
	status, _, body := post(t, c, s, callBody(2, "x", `{}`), nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `"text":"released"`)
}

// TestCancelThroughGoSDK: the Go SDK's client abandons a call when its ctx
// ends (it sends notifications/cancelled and drops the request): the
// Handler's ctx is cancelled, and the session keeps working.
func TestCancelThroughGoSDK(t *testing.T) {
	b := newBlocker()
	s, _ := startServer(t, Config{Handler: b})
	defer b.releaseAll()
	cs := connectSDK(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "x", Arguments: map[string]any{}})
		done <- err
	}()
	recv(t, b.entered, "handler entry")
	cancel()
	require.Error(t, recv(t, done, "client return"))
	recv(t, b.cancelled, "handler ctx cancelled")
	b.releaseAll()
	ctx2, cancel2 := context.WithTimeout(context.Background(), waitBound)
	defer cancel2()
	res, err := cs.CallTool(ctx2, &mcp.CallToolParams{Name: "y", Arguments: map[string]any{}})
	require.NoError(t, err)
	require.Equal(t, "released", res.Content[0].(*mcp.TextContent).Text)
}

// TestCancelledNotification: notifications/cancelled {requestId} cancels
// that call's ctx (not another one) while its connection stays open, and
// the cancelled request gets no JSON-RPC answer.
func TestCancelledNotification(t *testing.T) {
	b := newBlocker()
	s, _ := startServer(t, Config{Handler: b})
	defer b.releaseAll()
	c := rawClient(t)
	type answer struct {
		status int
		body   string
		err    error
	}
	answers := make(chan answer, 2)
	for _, id := range []int{7, 8} {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, s.URL(), strings.NewReader(callBody(id, "x", `{}`)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+s.Secret())
			resp, err := c.Do(req)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			answers <- answer{resp.StatusCode, string(body), err}
		}()
	}
	recv(t, b.entered, "handler entry")
	recv(t, b.entered, "handler entry")
	status, _, body := post(t, c, s, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}}`, nil)
	require.Equal(t, http.StatusAccepted, status)
	require.Empty(t, body)
	got := recv(t, b.cancelled, "handler ctx cancelled")
	require.Equal(t, "7", string(got.RequestID))
	a := recv(t, answers, "cancelled call's exchange to end")
	require.Error(t, a.err, "a cancelled call gets no answer")
	b.releaseAll()
	a = recv(t, answers, "the other call's answer")
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status)
	require.Contains(t, a.body, `"id":8`)
	require.Contains(t, a.body, `released`)
}

// TestCloseCancelsPending: Close cancels the pending calls' ctx and
// returns; the port is free again.
func TestCloseCancelsPending(t *testing.T) {
	b := newBlocker()
	s, err := Listen(Config{Handler: b})
	require.NoError(t, err)
	c := rawClient(t)
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, s.URL(), strings.NewReader(callBody(1, "x", `{}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+s.Secret())
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	recv(t, b.entered, "handler entry")
	require.NoError(t, s.Close())
	recv(t, b.cancelled, "handler ctx cancelled")
	require.Error(t, recv(t, done, "client return"))
	require.NoError(t, s.Close(), "Close is idempotent")
}

// TestRestartKeepsPortSecretSession: after Close, Listen with the same
// port, secret and session id serves the client that still holds them;
// a client with the old session id is not told to start over.
func TestRestartKeepsPortSecretSession(t *testing.T) {
	s1, err := Listen(Config{Handler: echo})
	require.NoError(t, err)
	port, secret, session := s1.Port(), s1.Secret(), s1.SessionID()
	// A client that keeps no connection across the restart (a kept-alive
	// POST on a connection the old server closed is not retried by net/http).
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: waitBound}
	goodCall(t, c, s1)
	require.NoError(t, s1.Close())

	s2, err := Listen(Config{Port: port, Secret: secret, SessionID: session, Handler: echo, Tools: testTools})
	require.NoError(t, err)
	defer s2.Close()
	require.Equal(t, port, s2.Port())
	require.Equal(t, s1.URL(), s2.URL())
	require.Equal(t, secret, s2.Secret())
	require.Equal(t, session, s2.SessionID())
	goodCall(t, c, s2) // post sends the old session id and secret
	status, _, _ := post(t, c, s2, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil)
	require.Equal(t, http.StatusOK, status)

	// Listening again on a port in use is errPortTaken.
	_, err = Listen(Config{Port: port, Handler: echo})
	require.ErrorIs(t, err, errPortTaken)
}

// TestPortTakenByOtherProcess: a port held by another listener is
// errPortTaken.
func TestPortTakenByOtherProcess(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, err = Listen(Config{Port: ln.Addr().(*net.TCPAddr).Port, Handler: echo})
	require.True(t, errors.Is(err, errPortTaken), "%v", err)
}

// TestListenRefusesBadConfig: no handler, a port out of range, a secret or
// session id that cannot go in a header.
func TestListenRefusesBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Handler: echo, Port: -1},
		{Handler: echo, Port: 70000},
		{Handler: echo, Secret: "a b"},
		{Handler: echo, SessionID: "a\nb"},
	} {
		_, err := Listen(cfg)
		require.Error(t, err)
	}
	require.Len(t, newSecret(), 43) // 32 bytes base64url, unpadded
	require.NotEqual(t, newSecret(), newSecret())
}

// TestTooManyPending: with maxPending calls waiting, one more gets the tool
// error without reaching the Handler; after they end, calls pass again.
func TestTooManyPending(t *testing.T) {
	b := newBlocker()
	s, _ := startServer(t, Config{Handler: b})
	defer b.releaseAll()
	c := rawClient(t)
	var wg sync.WaitGroup
	bodies := make(chan string, maxPending)
	for i := range maxPending {
		wg.Go(func() {
			_, _, body := post(t, c, s, callBody(i+1, "x", `{}`), nil)
			bodies <- body
		})
	}
	for range maxPending {
		recv(t, b.entered, "handler entry")
	}
	status, _, body := post(t, c, s, callBody(100, "x", `{}`), nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, `{"jsonrpc":"2.0","id":100,"result":{"content":[{"type":"text","text":"Too many pending tool calls."}],"isError":true}}`, body)
	require.Empty(t, b.entered)
	b.releaseAll()
	wg.Wait()
	for range maxPending {
		require.Contains(t, <-bodies, `"text":"released"`)
	}
	status, _, body = post(t, c, s, callBody(101, "x", `{}`), nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `"text":"released"`)
}

// TestBodyAtLimitIsRead: a body of exactly maxBody bytes is read (the bound
// is "over 1 MiB").
func TestBodyAtLimitIsRead(t *testing.T) {
	s, _ := startServer(t, Config{Handler: handlerFunc(func(context.Context, Call) Result { return Result{Text: "ok"} })})
	c := rawClient(t)
	head := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":"`
	tail := `"}}}`
	body := head + strings.Repeat("x", maxBody-len(head)-len(tail)) + tail
	require.Len(t, body, maxBody)
	status, _, resp := post(t, c, s, body, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, resp, `"text":"ok"`)
	status, _, _ = post(t, c, s, body+" ", nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
}

// TestArgumentsVerbatim: the Handler gets the arguments' bytes as sent.
func TestArgumentsVerbatim(t *testing.T) {
	got := make(chan Call, 1)
	s, _ := startServer(t, Config{Handler: handlerFunc(func(_ context.Context, c Call) Result { got <- c; return Result{} })})
	c := rawClient(t)
	args := `{ "b" : 1.50, "a":"\u00e9" }`
	post(t, c, s, `{"jsonrpc":"2.0","id":"req-1","method":"tools/call","params":{"name":"paperclip__x","arguments":`+args+`,"_meta":{"k":1}}}`, nil)
	call := recv(t, got, "handler call")
	require.Equal(t, args, string(call.Arguments))
	require.Equal(t, `"req-1"`, string(call.RequestID))
	require.Equal(t, "paperclip__x", call.Name)
	require.True(t, bytes.Equal([]byte(s.SessionID()), []byte(call.SessionID)))
}

// TestIdleServerRunsOneGoroutine: an idle bridge costs one goroutine, the
// listener's Serve loop (no goroutine per session beyond it).
func TestIdleServerRunsOneGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	s, err := Listen(Config{Handler: echo})
	require.NoError(t, err)
	serve := goleak.IgnoreAnyFunction("github.com/pcrunner/pcrunner/internal/mcpbridge.Listen.func1")
	require.NoError(t, goleak.Find(before, serve), "a goroutine beyond Serve")
	require.Error(t, goleak.Find(before), "the Serve goroutine runs")
	require.NoError(t, s.Close())
	require.NoError(t, goleak.Find(before), "Close leaves no goroutine")
}

// TestRestartGoSDKSessionKeepsWorking: the hot restart as the agent's Go
// SDK client sees it. A call pending when the bridge closes fails on the
// client (its exchange is cut); after Listen on the same port with the
// same secret and session id, the same client session calls again without
// re-initializing.
func TestRestartGoSDKSessionKeepsWorking(t *testing.T) {
	b := newBlocker()
	defer b.releaseAll()
	s1, err := Listen(Config{Handler: b, Tools: testTools})
	require.NoError(t, err)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := mcp.NewClient(&mcp.Implementation{Name: "bridge-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   s1.URL(),
		HTTPClient: &http.Client{Transport: bearer{secret: s1.Secret(), base: tr}},
	}, nil)
	require.NoError(t, err)
	defer cs.Close()
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "x", Arguments: map[string]any{}})
		done <- err
	}()
	recv(t, b.entered, "handler entry")
	require.NoError(t, s1.Close())
	recv(t, b.cancelled, "handler ctx cancelled")
	cutErr := recv(t, done, "the cut call's error")
	require.Error(t, cutErr)
	t.Log("cut call:", cutErr)
	// The agent's transport has seen its connections close (a restart
	// takes far longer than that); drop them here instead of racing it.
	tr.CloseIdleConnections()

	s2, err := Listen(Config{Port: s1.Port(), Secret: s1.Secret(), SessionID: s1.SessionID(), Handler: echo, Tools: testTools})
	require.NoError(t, err)
	defer s2.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "issue.comment", Arguments: map[string]any{"body": "again"}})
	require.NoError(t, err)
	require.Equal(t, `issue.comment {"body":"again"}`, res.Content[0].(*mcp.TextContent).Text)
	_, err = cs.ListTools(ctx, nil)
	require.NoError(t, err)
}

// TestCheckOrder pins doc.go's order: Origin/Host before the bearer, the
// bearer before path, method and media type, so that a peer without the
// secret learns nothing but 401.
func TestCheckOrder(t *testing.T) {
	s, _ := startServer(t, Config{})
	c := rawClient(t)
	noBearer := func(r *http.Request) { r.Header.Del("Authorization") }
	for _, tc := range []struct {
		name   string
		edit   func(*http.Request)
		status int
	}{
		{"origin without bearer", func(r *http.Request) { noBearer(r); r.Header.Set("Origin", "http://x") }, 403},
		{"GET without bearer", func(r *http.Request) { noBearer(r); r.Method = http.MethodGet }, 401},
		{"wrong path without bearer", func(r *http.Request) { noBearer(r); r.URL.Path = "/x" }, 401},
		{"wrong type without bearer", func(r *http.Request) { noBearer(r); r.Header.Set("Content-Type", "text/plain") }, 401},
		{"GET on wrong path", func(r *http.Request) { r.Method = http.MethodGet; r.URL.Path = "/x" }, 404},
		{"GET with wrong type", func(r *http.Request) { r.Method = http.MethodGet; r.Header.Set("Content-Type", "text/plain") }, 405},
		{"DELETE", func(r *http.Request) { r.Method = http.MethodDelete }, 405},
		{"wrong type and other session", func(r *http.Request) {
			r.Header.Set("Content-Type", "text/plain")
			r.Header.Set("Mcp-Session-Id", "other")
		}, 415},
	} {
		status, _, _ := post(t, c, s, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, tc.edit)
		require.Equal(t, tc.status, status, tc.name)
	}
}
