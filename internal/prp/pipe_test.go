package prp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// wsPipe connects a client and a server WebSocket over net.Pipe, so transport
// tests run inside testing/synctest bubbles (the technique of coder/websocket's
// internal wstest.Pipe). The client side records inbound activity in act.
func wsPipe(t testing.TB, act *activity, serverOpts *websocket.AcceptOptions) (client *wsConn, server *websocket.Conn) {
	t.Helper()
	if serverOpts == nil {
		serverOpts = &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled}
	}
	opts := dialOptions(act)
	opts.HTTPClient = &http.Client{Transport: pipeTransport{accept: func(w http.ResponseWriter, r *http.Request) {
		var err error
		server, err = websocket.Accept(w, r, serverOpts)
		require.NoError(t, err)
	}}}
	c, _, err := websocket.Dial(context.Background(), "ws://pipe.test/", opts)
	require.NoError(t, err)
	return newWSConn(c, act, DefaultMaxFrameBytes), server
}

type pipeTransport struct{ accept http.HandlerFunc }

func (p pipeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	cc, sc := net.Pipe()
	rec := httptest.NewRecorder()
	p.accept(pipeHijacker{ResponseRecorder: rec, conn: sc}, r)
	resp := rec.Result()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = cc
	}
	return resp, nil
}

type pipeHijacker struct {
	*httptest.ResponseRecorder
	conn     net.Conn
	hijacked chan struct{}
}

func (h pipeHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h.hijacked != nil {
		close(h.hijacked)
	}
	return h.conn, bufio.NewReadWriter(bufio.NewReader(h.conn), bufio.NewWriter(h.conn)), nil
}

// asyncPipeTransport serves each round trip with a handler that keeps
// running after the upgrade (like Core.ServeHTTP, which authenticates on the
// hijacked connection), over net.Pipe. wg tracks the handler goroutines.
// Other packages use prptest.Transport, the exported form; package prp's
// own tests cannot import prptest (it imports prp) and need the pipe maker.
type asyncPipeTransport struct {
	h  http.Handler
	wg *sync.WaitGroup
	// pipe makes the connection pair; nil means net.Pipe.
	pipe func() (client, server net.Conn)
}

func (p asyncPipeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	mk := p.pipe
	if mk == nil {
		mk = net.Pipe
	}
	cc, sc := mk()
	r = r.Clone(r.Context())
	r.RequestURI = r.URL.RequestURI() // as a server sees it
	rec := httptest.NewRecorder()
	hj := pipeHijacker{ResponseRecorder: rec, conn: sc, hijacked: make(chan struct{})}
	done := make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(done)
		p.h.ServeHTTP(hj, r)
	}()
	select {
	case <-hj.hijacked:
	case <-done:
	}
	resp := rec.Result()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = cc
	} else {
		_ = cc.Close()
		_ = sc.Close()
	}
	return resp, nil
}

// pipeDialer returns a Dialer whose connections reach h over in-memory
// pipes made by mk (nil: net.Pipe).
func pipeDialer(t testing.TB, h http.Handler, wg *sync.WaitGroup, mk func() (net.Conn, net.Conn)) *Dialer {
	tg, err := ParseDialURL("ws://127.0.0.1" + testRunPath)
	require.NoError(t, err)
	return &Dialer{target: tg, client: &http.Client{Transport: asyncPipeTransport{h: h, wg: wg, pipe: mk}}}
}

// pipeListener is a Listener without a socket: tests hand it upgrades
// through its ServeHTTP over in-memory pipes. Close it with closePipeListener.
func pipeListener(path string) *Listener {
	l := &Listener{
		max:    DefaultMaxFrameBytes,
		conns:  make(chan accepted, acceptQueueLen),
		closed: make(chan struct{}),
		log:    slog.New(slog.DiscardHandler),
	}
	l.path.Store(&path)
	return l
}

func closePipeListener(l *Listener) {
	l.hmu.Lock()
	l.shutdown = true
	l.hmu.Unlock()
	close(l.closed)
	l.handlers.Wait()
	for {
		select {
		case a := <-l.conns:
			_ = a.ws.Close()
		default:
			return
		}
	}
}

// cuttablePipes makes pipe pairs joined by a relay that can be cut: after
// cut, bytes are swallowed both ways while both ends stay open, like a
// preview proxy that silently stops forwarding.
type cuttablePipes struct {
	mu   sync.Mutex
	cuts []chan struct{}
}

func (c *cuttablePipes) pipe() (net.Conn, net.Conn) {
	a1, a2 := net.Pipe()
	b1, b2 := net.Pipe()
	cut := make(chan struct{})
	c.mu.Lock()
	c.cuts = append(c.cuts, cut)
	c.mu.Unlock()
	go relay(a2, b1, cut)
	go relay(b1, a2, cut)
	return a1, b2
}

// cut stops forwarding on the i-th pair.
func (c *cuttablePipes) cut(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.cuts[i])
}

// relay copies src to dst through a buffer, as a kernel socket buffer
// would: without it, two peers writing control frames at each other over
// synchronous pipes could deadlock, which real TCP never does.
func relay(src, dst net.Conn, cut <-chan struct{}) {
	ch := make(chan []byte, 4096)
	go func() {
		defer close(ch)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			select {
			case <-cut:
				continue
			default:
			}
			ch <- append([]byte(nil), buf[:n]...)
		}
	}()
	for b := range ch {
		if _, err := dst.Write(b); err != nil {
			_ = src.Close()
			for range ch {
			}
			return
		}
	}
	select {
	case <-cut: // a dark path does not forward the close either
	default:
		_ = dst.Close()
	}
}

// plainSession stands in for an authenticated Session in transport tests:
// frames are the plaintext itself, and it counts what passed.
type plainSession struct{ sealed, opened atomic.Int64 }

func (p *plainSession) Seal(b []byte) ([]byte, error) { p.sealed.Add(1); return b, nil }
func (p *plainSession) Open(b []byte) ([]byte, error) { p.opened.Add(1); return b, nil }

// kindOf returns an envelope's kind.
func kindOf(b []byte) string {
	var k struct {
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(b, &k)
	return k.Kind
}

func inspectKinds(b []byte) (FrameAction, any, error) {
	if kindOf(b) == KindPing {
		return framePing, nil, nil
	}
	return FrameForward, bytes.Clone(b), nil
}
