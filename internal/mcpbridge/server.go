package mcpbridge

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bounds of tools.md §2 and our own, each named for its source.
const (
	// maxBody is the largest request body read (tools.md §2: over 1 MiB → 413).
	maxBody = 1 << 20
	// readHeaderTimeout bounds a request's header read (tools.md §2).
	readHeaderTimeout = 10 * time.Second
	// maxHeaderBytes bounds a request's header block (tools.md §2).
	maxHeaderBytes = 16 << 10
	// idleTimeout closes a keep-alive connection left idle (tools.md §2).
	idleTimeout = 30 * time.Second
	// maxPending is the number of tools/call answers one server waits for at
	// once (tools.md §2: at most 32 calls pending per session; the server is
	// per session).
	maxPending = 32
	// closeTimeout bounds Close's wait for in-flight exchanges once their
	// calls are cancelled; after it the connections are cut (ours: a
	// hot restart must not hang on a slow handler).
	closeTimeout = 2 * time.Second
	// path is the one MCP endpoint (tools.md §2: URL http://127.0.0.1:<port>/mcp).
	path = "/mcp"
)

// errPortTaken is Listen's error when Config.Port is already in use (the
// hot restart's persisted port, tools.md §2: the turn then ends with
// tool_bridge_lost).
var errPortTaken = errors.New("listen mcp bridge: port taken")

// Handler runs the tools/call the bridge cannot answer alone (it answers
// initialize, ping, tools/list, notifications itself, and refuses bad names
// and bodies itself).
type Handler interface {
	// CallTool blocks until the call's answer. ctx is cancelled when the HTTP
	// connection closes, the client sends notifications/cancelled for this
	// request id, or the server closes: the handler then treats the call as
	// detached (tools.md §3 item 1) and returns anything (ignored).
	//
	// The answer is written only if ctx is still live when CallTool returns
	// (a cancelled call gets no JSON-RPC response). A handler that hands
	// over a result should therefore look at ctx.Err() last, after taking the
	// result and before recording it as delivered; what remains is the
	// window between that look and the bridge's, and a connection that dies
	// while the answer is written, which no HTTP server can see.
	CallTool(ctx context.Context, call Call) Result
}

// Call is one tools/call as the agent sent it.
type Call struct {
	SessionID string          // the Mcp-Session-Id
	RequestID json.RawMessage // the JSON-RPC id, verbatim
	Name      string          // as the client sent it
	Arguments json.RawMessage // verbatim; "{}" when absent or null
}

// Result is a tools/call answer: one text content item.
type Result struct {
	Text    string
	IsError bool
}

// Tool is one tools/list entry. It has the catalog's tool fields and JSON, so
// that this package needs nothing from internal/catalog; the caller converts.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Config is what Listen needs.
type Config struct {
	Port      int           // 0: pick a free port; else listen on exactly this port (hot restart)
	Secret    string        // "" → newSecret(); else printable ASCII
	SessionID string        // "" → a fresh id; persisted ones are passed back after a restart
	Tools     func() []Tool // tools/list, asked at each call; nil → no tools
	Handler   Handler       // tools/call; required
	Logger    *slog.Logger  // nil → discard; never gets the secret, the session id, bodies
}

// Server is one listening bridge. Its methods may be called concurrently.
type Server struct {
	port      int
	url       string
	secret    string
	secretSum [sha256.Size]byte
	sessionID string
	hosts     [2]string // the Host values accepted
	tools     func() []Tool
	handler   Handler
	log       *slog.Logger
	http      *http.Server
	served    chan struct{} // closed when Serve returns
	closeOnce sync.Once
	closeErr  error // set once, inside closeOnce

	// mu guards closed, pending and npending.
	mu       sync.Mutex
	closed   bool                                 // guarded by mu
	pending  map[string]map[*pendingCall]struct{} // by JSON-RPC id (compact bytes); guarded by mu
	npending int                                  // guarded by mu
}

// newSecret returns 32 random bytes, base64url without padding (tools.md §2).
func newSecret() string { return randomToken(32) }

// newSessionID returns a fresh Mcp-Session-Id: 16 random bytes base64url,
// visible ASCII as MCP requires.
func newSessionID() string { return randomToken(16) }

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Listen starts a bridge on 127.0.0.1 (never another address) and serves it
// until Close. With Config.Port set it listens on exactly that port or
// returns errPortTaken.
func Listen(cfg Config) (*Server, error) {
	if cfg.Handler == nil {
		return nil, errors.New("listen mcp bridge: no handler")
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, errors.New("listen mcp bridge: port out of range")
	}
	if cfg.Secret == "" {
		cfg.Secret = newSecret()
	}
	if cfg.SessionID == "" {
		cfg.SessionID = newSessionID()
	}
	if !visibleASCII(cfg.Secret) {
		return nil, errors.New("listen mcp bridge: secret is not visible ASCII")
	}
	if !visibleASCII(cfg.SessionID) {
		return nil, errors.New("listen mcp bridge: session id is not visible ASCII")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.Port)))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, errPortTaken
		}
		return nil, fmt.Errorf("listen mcp bridge: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	s := &Server{
		port:      port,
		url:       "http://127.0.0.1:" + strconv.Itoa(port) + path,
		secret:    cfg.Secret,
		secretSum: sha256.Sum256([]byte(cfg.Secret)),
		sessionID: cfg.SessionID,
		hosts:     [2]string{"127.0.0.1:" + strconv.Itoa(port), "localhost:" + strconv.Itoa(port)},
		tools:     cfg.Tools,
		handler:   cfg.Handler,
		log:       logger,
		served:    make(chan struct{}),
		pending:   make(map[string]map[*pendingCall]struct{}),
	}
	s.http = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		IdleTimeout:       idleTimeout,
		// net/http's own messages (accept errors, bad requests) carry no
		// header values or bodies.
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(s.served)
		_ = s.http.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return s, nil
}

func visibleASCII(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Port is the port the server listens on.
func (s *Server) Port() int { return s.port }

// URL is http://127.0.0.1:<port>/mcp.
func (s *Server) URL() string { return s.url }

// Secret is the bearer secret every request must carry.
func (s *Server) Secret() string { return s.secret }

// SessionID is the Mcp-Session-Id the server hands out and accepts.
func (s *Server) SessionID() string { return s.sessionID }

// Close stops the listener, cancels every pending call's ctx, and waits at
// most closeTimeout for the exchanges in flight before cutting their
// connections. The port is free for a new Listen when Close returns.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		for _, calls := range s.pending {
			for c := range calls {
				c.cancel()
			}
		}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := s.http.Shutdown(ctx); err != nil {
			// A handler ignored its cancelled ctx: cut the connections.
			_ = s.http.Close()
			s.closeErr = fmt.Errorf("close mcp bridge: %w", err)
		}
		<-s.served
	})
	return s.closeErr
}

// ServeHTTP applies the HTTP checks of tools.md §2 in the order doc.go
// gives, then answers the JSON-RPC message.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := r.Header["Origin"]; ok || !s.hostOK(r.Host) {
		s.refuse(w, http.StatusForbidden, "origin or host")
		return
	}
	if !s.bearerOK(r.Header.Get("Authorization")) {
		w.Header().Set("WWW-Authenticate", "Bearer")
		s.refuse(w, http.StatusUnauthorized, "bearer")
		return
	}
	if r.URL.Path != path {
		s.refuse(w, http.StatusNotFound, "path")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.refuse(w, http.StatusMethodNotAllowed, "method")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		s.refuse(w, http.StatusUnsupportedMediaType, "media type")
		return
	}
	if ids, ok := r.Header["Mcp-Session-Id"]; ok && (len(ids) != 1 || ids[0] != s.sessionID) {
		s.refuse(w, http.StatusNotFound, "session id")
		return
	}
	if r.ContentLength > maxBody {
		s.refuse(w, http.StatusRequestEntityTooLarge, "body size")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.refuse(w, http.StatusRequestEntityTooLarge, "body size")
			return
		}
		s.log.Debug("mcp request body unreadable")
		return // the connection is gone
	}
	s.serveMessage(w, r, body)
}

func (s *Server) hostOK(host string) bool {
	return host == s.hosts[0] || strings.EqualFold(host, s.hosts[1])
}

// bearerOK compares the presented token with the secret in constant time;
// hashing both first keeps the time independent of the token's length too.
func (s *Server) bearerOK(auth string) bool {
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], s.secretSum[:]) == 1
}

// refuse answers an HTTP-level refusal with a fixed text and logs its reason
// (a fixed word, never a header value). Debug level: a well-behaved client
// draws 405s (the Go SDK opens a GET stream and sends DELETE on close), and
// a peer without the secret must not be able to flood the log.
func (s *Server) refuse(w http.ResponseWriter, status int, reason string) {
	s.log.Debug("mcp request refused", "status", status, "reason", reason)
	http.Error(w, http.StatusText(status), status)
}
