// Package prptest holds the in-memory fixtures other packages' tests use to
// run a runner against a real control.Core without sockets, so that a
// runner and its core share one testing/synctest bubble and every lease,
// idle, lifetime and reconnect timer takes simulated time.
//
//   - Transport is an http.RoundTripper that serves each request with an
//     http.Handler over net.Pipe. Pass it as prp.DialerConfig.Transport (the
//     runner's options.Transport) and the dialer's upgrade reaches the
//     handler without TCP.
//   - Core is a control.Core for one registration, reachable over a Transport
//     (inside a bubble) or over a loopback httptest server (for a runnerd in
//     another process), with bounded waits and decoded events.
//
// control.Core itself is a production type in package control (prpctl
// drives a real runnerd with it); this package adds only what tests need.
// Package prp's own in-package tests keep their unexported pipe fixtures
// (pipe_test.go): they reach unexported fields, and importing prptest from
// package prp would be an import cycle.
package prptest

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
)

// errClosed is what RoundTrip returns once the Transport is closed, as a
// refused connection would be: the dialer treats it as a failed attempt.
var errClosed = errors.New("prptest: transport closed")

// Transport serves every round trip with one handler over an in-memory pipe.
// An upgrade (101 Switching Protocols) hands the client the pipe's other
// end as the response body, the shape coder/websocket's dialer expects;
// any other answer closes the pipe. The handler keeps running after the
// upgrade on its own goroutine (control.Core authenticates on the hijacked
// connection), which Close waits for.
//
// A Transport is safe for concurrent use. net.Pipe is synchronous: a write
// returns only once the peer has read it, so both ends must keep a reader
// running, as prp's links do.
type Transport struct {
	h http.Handler

	// mu guards closed and conns: RoundTrip adds pipes while Close ends them.
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // both ends of every pipe still open
	wg     sync.WaitGroup        // the handler goroutines
}

// NewTransport returns a Transport serving each request with h.
func NewTransport(h http.Handler) *Transport {
	return &Transport{h: h, conns: map[net.Conn]struct{}{}}
}

// RoundTrip serves r with the handler. It returns once the handler has
// hijacked the connection or answered, or r's context ends.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errClosed
	}
	c1, c2 := net.Pipe()
	cc, sc := t.track(c1), t.track(c2)
	t.wg.Add(1)
	t.mu.Unlock()

	// The handler's request context is the server's, not the dialer's: a
	// dialer cancels its attempt context once the upgrade is done, while a
	// server keeps serving the hijacked connection. It ends when ServeHTTP
	// returns, as net/http's does.
	hctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	sr := r.Clone(hctx)
	sr.RequestURI = r.URL.RequestURI() // as a server sees it
	rec := httptest.NewRecorder()
	hj := &hijacker{ResponseRecorder: rec, conn: sc, hijacked: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer t.wg.Done()
		defer close(done)
		defer cancel()
		t.h.ServeHTTP(hj, sr)
	}()
	select {
	case <-hj.hijacked:
	case <-done:
	case <-r.Context().Done():
		_ = cc.Close()
		_ = sc.Close()
		return nil, r.Context().Err()
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

// Close refuses further round trips, closes both ends of every open pipe
// and waits for the handler goroutines to return. Close the handler's own
// long-lived work first (control.Core.Close): Close waits only for ServeHTTP.
func (t *Transport) Close() {
	t.mu.Lock()
	t.closed = true
	open := make([]net.Conn, 0, len(t.conns))
	for c := range t.conns {
		open = append(open, c)
	}
	t.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
	t.wg.Wait()
}

// track registers c until it is closed; t.mu held.
func (t *Transport) track(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, t: t}
	t.conns[tc] = struct{}{}
	return tc
}

// trackedConn leaves its Transport's open set when closed.
type trackedConn struct {
	net.Conn
	t    *Transport
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return err
}

// hijacker is the ResponseWriter the handler sees: a recorder for the
// status and headers, and the pipe's server end on Hijack.
type hijacker struct {
	*httptest.ResponseRecorder
	conn     net.Conn
	hijacked chan struct{}
	once     sync.Once
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h.once.Do(func() { close(h.hijacked) })
	return h.conn, bufio.NewReadWriter(bufio.NewReader(h.conn), bufio.NewWriter(h.conn)), nil
}
