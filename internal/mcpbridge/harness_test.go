package mcpbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitBound bounds every wait of these tests on an observable signal.
const waitBound = 10 * time.Second

// handlerFunc adapts a function to Handler.
type handlerFunc func(ctx context.Context, call Call) Result

func (f handlerFunc) CallTool(ctx context.Context, call Call) Result { return f(ctx, call) }

// echo answers at once with the call's name and arguments.
var echo = handlerFunc(func(_ context.Context, c Call) Result {
	return Result{Text: c.Name + " " + string(c.Arguments)}
})

// testTools is a catalog as tools/list shows it: catalog ops, then the two
// reserved tools.
func testTools() []Tool {
	return []Tool{
		{Name: "issue.comment", Description: "Comment on the task", InputSchema: json.RawMessage(`{"type":"object","properties":{"body":{"type":"string"}},"required":["body"]}`)},
		{Name: "issue.update", Description: "Update the task", InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Name: "paperclip_finish", Description: "Report the result", InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Name: "paperclip_block", Description: "Report a blocker", InputSchema: json.RawMessage(`{"type":"object"}`)},
	}
}

// startServer starts a bridge with the test's handler (echo if nil) and a
// captured debug log; Close runs at cleanup.
func startServer(t testing.TB, cfg Config) (*Server, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	if cfg.Handler == nil {
		cfg.Handler = echo
	}
	if cfg.Tools == nil {
		cfg.Tools = testTools
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s, err := Listen(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s, logs
}

// bearer adds the Authorization header, as an agent's mcpServers entry
// does (tools.md §2: headers [{name: "Authorization", value: "Bearer …"}]).
type bearer struct {
	secret string
	base   http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.secret)
	return b.base.RoundTrip(r)
}

// connectSDK connects the Go SDK's Streamable HTTP client to s, with
// nothing custom but the Authorization header.
func connectSDK(t testing.TB, s *Server) *mcp.ClientSession {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := mcp.NewClient(&mcp.Implementation{Name: "bridge-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   s.URL(),
		HTTPClient: &http.Client{Transport: bearer{secret: s.Secret(), base: tr}},
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// rawClient is a plain HTTP client for the bridge, closed at cleanup.
func rawClient(t testing.TB) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitBound}
}

// post sends body to url with the bridge's headers unless edit changes them.
func post(t testing.TB, c *http.Client, s *Server, body string, edit func(*http.Request)) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL(), bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+s.Secret())
	req.Header.Set("Mcp-Session-Id", s.SessionID())
	if edit != nil {
		edit(req)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// callBody is a tools/call request.
func callBody(id int, name, args string) string {
	n, _ := json.Marshal(name)
	return `{"jsonrpc":"2.0","id":` + itoa(id) + `,"method":"tools/call","params":{"name":` + string(n) + `,"arguments":` + args + `}}`
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// goodCall checks that the server still answers a good call.
func goodCall(t testing.TB, c *http.Client, s *Server) {
	t.Helper()
	status, _, body := post(t, c, s, callBody(99, "issue.comment", `{"body":"ok"}`), nil)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"jsonrpc":"2.0","id":99,"result":{"content":[{"type":"text","text":"issue.comment {\"body\":\"ok\"}"}],"isError":false}}`, body)
}

// blocker is a Handler whose calls wait until released or cancelled, and
// that reports each entry and each cancellation.
type blocker struct {
	entered   chan Call
	cancelled chan Call
	release   chan struct{}
	once      sync.Once
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan Call, 64), cancelled: make(chan Call, 64), release: make(chan struct{})}
}

func (b *blocker) CallTool(ctx context.Context, c Call) Result {
	b.entered <- c
	select {
	case <-ctx.Done():
		b.cancelled <- c
		return Result{Text: "ignored"}
	case <-b.release:
		return Result{Text: "released"}
	}
}

func (b *blocker) releaseAll() { b.once.Do(func() { close(b.release) }) }

func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitBound):
		t.Fatalf("no %s within %v", what, waitBound)
		panic("unreachable")
	}
}
