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
	return newWSConn(c, act, defaultMaxFrameBytes), server
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

// pipeListener is a Listener without a socket: tests hand it upgrades
// through its ServeHTTP over in-memory pipes. Close it with closePipeListener.
func pipeListener(path string) *Listener {
	l := &Listener{
		max:    defaultMaxFrameBytes,
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
