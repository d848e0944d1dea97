package prp

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/pcrunner/pcrunner/internal/clock"
)

// peerLogInterval rate-limits the lines about listener peers that are not
// the core (rejected upgrades, evictions, failed handshakes): any process in
// the sandbox can open connections, so at most one line per kind of event
// per interval, the next one carrying how many were suppressed. 10 s keeps a
// flood visible without letting it fill the diagnostics file.
const peerLogInterval = 10 * time.Second

// peerLog writes rate-limited lines naming the peer's address. Its zero
// value is ready; clk nil means the system clock. Lines never carry a
// credential, a token or the peer's bytes.
type peerLog struct {
	clk clock.Clock

	// mu guards kinds.
	mu    sync.Mutex
	kinds map[string]*peerLogKind // by message; guarded by mu
}

type peerLogKind struct {
	next       time.Time
	suppressed int
}

// log writes msg at level with the peer's address unless a line with the
// same msg was written less than peerLogInterval ago.
func (p *peerLog) log(l *slog.Logger, level slog.Level, msg, addr string, attrs ...any) {
	now := clock.Or(p.clk).Now()
	p.mu.Lock()
	if p.kinds == nil {
		p.kinds = map[string]*peerLogKind{}
	}
	k := p.kinds[msg]
	if k == nil {
		k = &peerLogKind{}
		p.kinds[msg] = k
	}
	if now.Before(k.next) {
		k.suppressed++
		p.mu.Unlock()
		return
	}
	suppressed := k.suppressed
	k.next, k.suppressed = now.Add(peerLogInterval), 0
	p.mu.Unlock()
	attrs = append([]any{"peer", addr}, attrs...)
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	l.Log(context.Background(), level, msg, attrs...)
}

// peerErr describes a handshake failure without peer text: a WebSocket
// close reason is the peer's bytes, so only its code is kept.
func peerErr(err error) string {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return "peer closed the websocket with status " + strconv.Itoa(int(ce.Code))
	}
	return err.Error()
}
