package prp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Listener defaults and bounds (prp.md §1.2, §12).
const (
	// defaultListenAddress and defaultListenPort are the only values the reference accepts.
	defaultListenAddress = "0.0.0.0"
	defaultListenPort    = 43127
	// UpgradeTimeout bounds the WebSocket upgrade (AUTH_TIMEOUT in R-transport).
	UpgradeTimeout = 2 * time.Second
	// acceptQueueLen bounds upgraded connections waiting for Accept.
	acceptQueueLen = 8
)

// bindConflictCode prefixes bind and path errors on stderr; the server maps
// the text to runner_ingress_bind_conflict (prp.md §1.2, §11).
const bindConflictCode = "runner_ingress_bind_conflict"

// errListenerClosed reports Accept on a closed Listener.
var errListenerClosed = errors.New("listener closed")

// errBindConflict reports a listener bind or path problem; its text starts with bindConflictCode.
var errBindConflict = errors.New(bindConflictCode)

// ListenConfig configures Listen.
type ListenConfig struct {
	Address       string // default defaultListenAddress
	Port          int    // 0 picks a free port (tests); the reference uses defaultListenPort
	Path          string // connectPathPrefix + runId
	MaxFrameBytes int    // default defaultMaxFrameBytes
	Logger        *slog.Logger
}

// Listener accepts PRP WebSocket upgrades on exactly one path (listen mode,
// prp.md §1.2). Anything that is not that exact upgrade gets HTTP 400. It
// keeps accepting while a connection is up; the path rotates in place.
type Listener struct {
	ln     net.Listener
	srv    *http.Server
	path   atomic.Pointer[string]
	max    int
	conns  chan accepted
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup // the Serve goroutine
	log    *slog.Logger

	// hmu guards shutdown, so no handlers.Add follows Close's handlers.Wait.
	hmu      sync.Mutex
	shutdown bool
	handlers sync.WaitGroup // ServeHTTP calls; hijacked ones are not tracked by http.Server

	// peers bounds unauthenticated connections; nil without a socket (tests).
	peers *peerSet
	plog  peerLog
}

type accepted struct {
	ws   *wsConn
	act  *activity
	peer *peer  // nil without a socket (tests)
	addr string // the peer's address, for logs
}

// peerKey carries a connection's *peer from ConnContext to ServeHTTP.
type peerKey struct{}

// Listen binds the listener and starts serving. A bind failure wraps
// errBindConflict. An address or port other than 0.0.0.0:43127 is accepted
// (prp.md §15 scenario 46); runnerd's configuration logs the one warning
// about it.
func Listen(cfg ListenConfig) (*Listener, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxFrameBytes == 0 {
		cfg.MaxFrameBytes = defaultMaxFrameBytes
	}
	if !validMaxFrameBytes(cfg.MaxFrameBytes) {
		return nil, fmt.Errorf("listen: max frame bytes out of range")
	}
	if cfg.Address == "" {
		cfg.Address = defaultListenAddress
	}
	if _, err := ValidateListenPath(cfg.Path); err != nil {
		return nil, fmt.Errorf("%w: %w", errBindConflict, err)
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("%w: listen port out of range", errBindConflict)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, fmt.Errorf("%w: bind: %w", errBindConflict, err)
	}
	l := &Listener{
		ln:     ln,
		max:    cfg.MaxFrameBytes,
		conns:  make(chan accepted, acceptQueueLen),
		closed: make(chan struct{}),
		log:    cfg.Logger,
	}
	p := cfg.Path
	l.path.Store(&p)
	l.peers = &peerSet{max: maxUnauthenticatedPeers}
	limited := &limitListener{Listener: ln, set: l.peers, dropped: func(what string, addr net.Addr) {
		l.plog.log(l.log, slog.LevelWarn, "listener "+what+" a connection: too many unauthenticated peers",
			addr.String(), "limit", maxUnauthenticatedPeers)
	}}
	l.srv = &http.Server{
		Handler: l,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if p, ok := c.(*peer); ok {
				return context.WithValue(ctx, peerKey{}, p)
			}
			return ctx
		},
		ReadHeaderTimeout: UpgradeTimeout,
		ReadTimeout:       UpgradeTimeout,
		WriteTimeout:      UpgradeTimeout,
		MaxHeaderBytes:    maxUpgradeHeaderBytes,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		_ = l.srv.Serve(limited)
	}()
	return l, nil
}

// Addr returns the bound address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Path returns the path currently accepted.
func (l *Listener) Path() string { return *l.path.Load() }

// SetPath rotates the accepted path without rebinding (warm run.attach, prp.md §1.2).
func (l *Listener) SetPath(path string) error {
	if _, err := ValidateListenPath(path); err != nil {
		return err
	}
	l.path.Store(&path)
	return nil
}

// ServeHTTP answers 400 to anything but the exact upgrade on the configured
// path: no query, no Sec-WebSocket-Extensions, GET with Upgrade: websocket.
func (l *Listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.hmu.Lock()
	if l.shutdown {
		l.hmu.Unlock()
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	l.handlers.Add(1)
	l.hmu.Unlock()
	defer l.handlers.Done()
	if !l.exactUpgrade(r) {
		// The request line and headers are the peer's text: none is logged.
		l.plog.log(l.log, slog.LevelInfo, "listener refused a request that is not the exact upgrade", r.RemoteAddr,
			"status", http.StatusBadRequest)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	act := newActivity()
	c, err := websocket.Accept(w, r, acceptOptions(act))
	if err != nil {
		l.plog.log(l.log, slog.LevelInfo, "listener websocket upgrade failed", r.RemoteAddr, "err", peerErr(err))
		return
	}
	p, _ := r.Context().Value(peerKey{}).(*peer)
	p.upgraded()
	a := accepted{ws: newWSConn(c, act, l.max), act: act, peer: p, addr: r.RemoteAddr}
	// Hand over within the upgrade bound; nobody accepting means the owner is gone or saturated.
	t := time.NewTimer(UpgradeTimeout)
	defer t.Stop()
	select {
	case l.conns <- a:
	case <-t.C:
		l.plog.log(l.log, slog.LevelWarn, "listener dropped an upgraded connection nobody accepted", a.addr)
		_ = a.ws.Close()
	case <-l.closed:
		_ = a.ws.Close()
	}
}

func (l *Listener) exactUpgrade(r *http.Request) bool {
	if r.Method != http.MethodGet || r.RequestURI != l.Path() {
		return false
	}
	if _, ok := r.Header["Sec-Websocket-Extensions"]; ok {
		return false
	}
	if _, ok := r.Header["Sec-Websocket-Protocol"]; ok {
		return false
	}
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket")
}

// accept returns the next upgraded connection.
func (l *Listener) accept(ctx context.Context) (accepted, error) {
	select {
	case a := <-l.conns:
		return a, nil
	case <-l.closed:
		return accepted{}, errListenerClosed
	case <-ctx.Done():
		return accepted{}, ctx.Err()
	}
}

// Close stops accepting, drops queued connections and waits for the server.
// Connections already handed out are their owners' to close.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		l.hmu.Lock()
		l.shutdown = true
		l.hmu.Unlock()
		close(l.closed)
		err = l.srv.Close()
		l.wg.Wait()
		l.handlers.Wait()
		for {
			select {
			case a := <-l.conns:
				_ = a.ws.Close()
			default:
				return
			}
		}
	})
	return err
}
