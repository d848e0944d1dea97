package runner

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// pipeTransport serves each upgrade with the core's handler over net.Pipe,
// without a socket, so a runner and its core run inside one
// testing/synctest bubble: the idle, lifetime, fence and lease timers then
// take simulated time, not real seconds. (LEAD: switch to prptest's pipe
// once the prp package exports it.)
type pipeTransport struct {
	h  http.Handler
	wg *sync.WaitGroup // the handler goroutines
}

func (p pipeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	cc, sc := net.Pipe()
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

type pipeHijacker struct {
	*httptest.ResponseRecorder
	conn     net.Conn
	hijacked chan struct{}
}

func (h pipeHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	close(h.hijacked)
	return h.conn, bufio.NewReadWriter(bufio.NewReader(h.conn), bufio.NewWriter(h.conn)), nil
}

// simTest runs f in a synctest bubble with a harness whose core is reached
// over in-memory pipes. Every goroutine of the runner and the core must end
// before f returns; the harness's cleanups (run in the bubble) stop them.
func simTest(t *testing.T, tweak func(*prp.CoreConfig), f func(t *testing.T, h *harness)) {
	synctest.Test(t, func(t *testing.T) {
		h := newPipeHarness(t, tweak)
		f(t, h)
	})
}
