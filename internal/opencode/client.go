package opencode

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pcrunner/pcrunner/internal/quote"
)

// errUnauthorized is a 401: the password is wrong (or the server is not
// the one runnerd started).
var errUnauthorized = errors.New("opencode server refused the credentials")

// statusError is a non-2xx answer. It holds the route and status only:
// the body is server text and stays out of errors.
type statusError struct {
	Route  string
	Status int
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s: http status %d", e.Route, e.Status)
}

// newPassword returns a random server password (passwordBytes of entropy,
// base64url).
func newPassword() (string, error) {
	b := make([]byte, passwordBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make server password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// serverEnv returns the one entry that hands the password to the opencode
// process; the caller appends it to the agent environment of that process
// only.
func serverEnv(password string) string { return envPassword + "=" + password }

// Client calls one `opencode serve` on loopback. Safe for concurrent use.
type Client struct {
	base     *url.URL
	password string
	http     *http.Client
}

// newClient returns a client of the server at baseURL (http on a loopback
// host only: the password must not leave the machine).
func newClient(baseURL, password string) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("parse server url: %w", err)
	}
	if u.Scheme != "http" || !isLoopback(u.Hostname()) {
		return nil, errors.New("parse server url: not http on a loopback address")
	}
	u.Path, u.RawQuery, u.Fragment = "", "", ""
	// No client-wide timeout: the event stream lives as long as its
	// context; every other call gets requestTimeout.
	tr := &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 4}
	return &Client{base: u, password: password, http: &http.Client{Transport: tr}}, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// baseURL is the server's URL.
func (c *Client) baseURL() string { return c.base.String() }

func (c *Client) request(ctx context.Context, method, route string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s: encode body: %w", route, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+route, rd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", route, err)
	}
	req.SetBasicAuth(username, c.password)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// do sends one bounded request and decodes a JSON answer into out (nil:
// the body is drained and ignored). route names the call in errors, with
// ids kept out ("/session/{id}/abort").
func (c *Client) do(ctx context.Context, method, path, route string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := c.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, route, scrubURL(err))
	}
	defer resp.Body.Close()
	if err := checkStatus(method+" "+route, resp.StatusCode); err != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
		return err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("%s %s: read body: %w", method, route, err)
	}
	if len(b) > maxResponseBytes {
		return fmt.Errorf("%s %s: body exceeds %d bytes", method, route, maxResponseBytes)
	}
	if out == nil || len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decode body: %w", method, route, err)
	}
	return nil
}

func checkStatus(route string, code int) error {
	switch {
	case code == http.StatusUnauthorized:
		return fmt.Errorf("%s: %w", route, errUnauthorized)
	case code < 200 || code > 299:
		return &statusError{Route: route, Status: code}
	}
	return nil
}

// scrubURL drops the URL from a transport error (it names the session id;
// never the password, which travels in a header, but keep errors short).
func scrubURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// createSession is POST /session.
func (c *Client) createSession(ctx context.Context, title string) (session, error) {
	body := map[string]any{}
	if title != "" {
		body["title"] = title
	}
	var s session
	if err := c.do(ctx, http.MethodPost, "/session", "/session", body, &s); err != nil {
		return session{}, err
	}
	if !strings.HasPrefix(s.ID, "ses") {
		return session{}, errors.New("POST /session: answer has no session id")
	}
	return s, nil
}

// Prompt is the body of prompt_async.
type Prompt struct {
	ProviderID, ModelID string // both or neither
	System              string
	Text                string
}

// promptAsync is POST /session/{id}/prompt_async: the turn starts and its
// output arrives on the event stream.
func (c *Client) promptAsync(ctx context.Context, sessionID string, p Prompt) error {
	body := map[string]any{"parts": []map[string]any{{"type": "text", "text": p.Text}}}
	if p.ProviderID != "" && p.ModelID != "" {
		body["model"] = map[string]string{"providerID": p.ProviderID, "modelID": p.ModelID}
	}
	if p.System != "" {
		body["system"] = p.System
	}
	return c.do(ctx, http.MethodPost, "/session/"+url.PathEscape(sessionID)+"/prompt_async",
		"/session/{id}/prompt_async", body, nil)
}

// abort is POST /session/{id}/abort.
func (c *Client) abort(ctx context.Context, sessionID string) error {
	var ok bool
	return c.do(ctx, http.MethodPost, "/session/"+url.PathEscape(sessionID)+"/abort", "/session/{id}/abort", nil, &ok)
}

// messages is GET /session/{id}/message: the whole session, oldest first.
func (c *Client) messages(ctx context.Context, sessionID string) ([]Message, error) {
	var ms []Message
	err := c.do(ctx, http.MethodGet, "/session/"+url.PathEscape(sessionID)+"/message", "/session/{id}/message", nil, &ms)
	return ms, err
}

// status is GET /session/status: the status type of each non-idle
// session (OpenCode lists busy and retrying sessions; absent is idle).
func (c *Client) status(ctx context.Context) (map[string]string, error) {
	var raw map[string]struct {
		Type string `json:"type"`
	}
	if err := c.do(ctx, http.MethodGet, "/session/status", "/session/status", nil, &raw); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		out[k] = v.Type
	}
	return out, nil
}

// permissions is GET /permission: the pending permission requests of
// every session (recovery of a permission.asked the stream missed).
func (c *Client) permissions(ctx context.Context) ([]PermissionAsked, error) {
	var ps []PermissionAsked
	err := c.do(ctx, http.MethodGet, "/permission", "/permission", nil, &ps)
	return ps, err
}

// replyPermission is POST /permission/{id}/reply.
func (c *Client) replyPermission(ctx context.Context, requestID, reply string) error {
	switch reply {
	case replyOnce, replyAlways, replyReject:
	default:
		return fmt.Errorf("reply permission: unknown reply %s", quote.Text(reply))
	}
	var ok bool
	return c.do(ctx, http.MethodPost, "/permission/"+url.PathEscape(requestID)+"/reply", "/permission/{id}/reply",
		map[string]string{"reply": reply}, &ok)
}

// stream is an open GET /event.
type stream struct {
	body io.ReadCloser
	sse  *sseReader
}

// events opens GET /event. The stream lives until ctx ends, the server
// closes it, or Close; only the connect waits at most requestTimeout.
func (c *Client) events(ctx context.Context) (*stream, error) {
	req, err := c.request(ctx, http.MethodGet, "/event", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	// The response headers must come within requestTimeout; the body then
	// streams for as long as ctx lives.
	connectCtx, cancel := context.WithCancel(ctx)
	req = req.WithContext(connectCtx)
	t := time.AfterFunc(requestTimeout, cancel)
	resp, err := c.http.Do(req)
	if !t.Stop() {
		if err == nil {
			resp.Body.Close()
		}
		return nil, errors.New("GET /event: no answer within the request bound")
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("GET /event: %w", scrubURL(err))
	}
	if err := checkStatus("GET /event", resp.StatusCode); err != nil {
		resp.Body.Close()
		cancel()
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		cancel()
		return nil, errors.New("GET /event: not an event stream")
	}
	return &stream{body: cancelBody{resp.Body, cancel}, sse: newSSEReader(resp.Body, maxEventBytes)}, nil
}

// next returns the next event; io.EOF when the server closed the stream.
// Events that do not decode are skipped and counted in skipped.
func (s *stream) next() (event, error) {
	for {
		data, err := s.sse.next()
		if err != nil {
			return event{}, err
		}
		ev, err := decodeEvent(data)
		if err != nil {
			continue
		}
		return ev, nil
	}
}

// ready reports whether next would return an event's data without
// reading the connection (an event that then fails to decode is skipped,
// and next reads on).
func (s *stream) ready() bool { return s.sse.ready() }

// Close ends the stream.
func (s *stream) Close() error { return s.body.Close() }

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// listenURL finds OpenCode's "opencode server listening on URL" line in
// its stdout and returns the URL and port; ok=false until the line is
// complete.
func listenURL(stdout []byte) (u string, port int, ok bool) {
	if len(stdout) > maxListenLine {
		stdout = stdout[:maxListenLine]
	}
	const marker = "server listening on "
	for len(stdout) > 0 {
		line := stdout
		i := bytes.IndexByte(stdout, '\n')
		if i < 0 {
			return "", 0, false // the line is not complete yet
		}
		line, stdout = stdout[:i], stdout[i+1:]
		j := bytes.Index(line, []byte(marker))
		if j < 0 {
			continue
		}
		raw := strings.TrimSpace(string(line[j+len(marker):]))
		pu, err := url.Parse(raw)
		if err != nil || pu.Scheme != "http" || !isLoopback(pu.Hostname()) {
			continue
		}
		p, err := strconv.Atoi(pu.Port())
		if err != nil || p <= 0 || p > 65535 {
			continue
		}
		return "http://" + net.JoinHostPort(pu.Hostname(), pu.Port()), p, true
	}
	return "", 0, false
}
