package prp_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// pipeHijacker is package prp's fixture of the same name: a recorder whose
// Hijack hands over one end of an in-memory pipe.
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
// prptest.Transport is the same without a pipe maker, which the
// simulated-time tests need to cut a path.
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

// pipeDialer returns a Dialer to path whose connections reach h over
// in-memory pipes made by mk (nil: net.Pipe).
func pipeDialer(t testing.TB, h http.Handler, wg *sync.WaitGroup, mk func() (net.Conn, net.Conn), path string) *prp.Dialer {
	t.Helper()
	d, err := prp.NewDialer(context.Background(), prp.DialerConfig{
		URL: "ws://127.0.0.1" + path, Transport: asyncPipeTransport{h: h, wg: wg, pipe: mk},
	})
	require.NoError(t, err)
	return d
}

// cuttablePipes makes pipe pairs joined by a relay that can be cut: after
// cut, bytes are swallowed both ways while both ends stay open, like a
// preview proxy that silently stops forwarding.
type cuttablePipes struct {
	mu   sync.Mutex // guards cuts: pipe appends from the dialer's goroutines
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
