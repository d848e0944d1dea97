package prp

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// maxConcurrentHandshakes bounds listener peers authenticating at once. It
// equals the listener's bound on unauthenticated connections, so a peer the
// listener admitted never waits for a slot behind strays: each handshake's
// first half runs at once.
const maxConcurrentHandshakes = maxUnauthenticatedPeers

// acceptLoop authenticates listener peers, each in its own goroutine, so a
// stray or stalled peer never delays the server's upgrade or handshake. A
// peer failing before auth_response costs nothing and never touches the
// current connection (prp.md §1.2, §4 item 4).
func (c *Client) acceptLoop(ctx context.Context, authed chan<- *Conn) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxConcurrentHandshakes)
	boot := make(chan struct{}, 1) // held by the one bootstrap auth_response in flight
	for {
		a, err := c.cfg.Listener.accept(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.failFatal(fmt.Errorf("accept: %w", err))
			}
			return
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			_ = a.ws.Close()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c.serveAccepted(ctx, a, boot, authed)
		}()
	}
}

// serveAccepted authenticates one listener peer. Every peer runs auth_hello
// and the challenge concurrently: a peer without the credential's key fails
// there, within one round trip of its own, and delays nobody. Only a peer
// whose server proof verified goes on to auth_response; for a bootstrap
// ticket those run one at a time, so the one-use ticket is never in two
// auth_responses (prp.md §2.4), and a prover that finds the ticket spent by
// an earlier one is dropped before it sends anything. Lease handshakes
// never wait.
func (c *Client) serveAccepted(ctx context.Context, a accepted, boot chan struct{}, authed chan<- *Conn) {
	// A held peer is not authenticated until the hold lifts (a state write
	// waiting for disk space, durability.md §6.2 item 4); Run's end
	// releases it.
	if !c.awaitReconnect(ctx) {
		_ = a.ws.Close()
		return
	}
	actx, cancel := c.attemptCtx(ctx)
	defer cancel()
	h := c.clientHandshake()
	proven, err := h.prove(actx, a.ws)
	if err != nil {
		c.acceptFailed(ctx, a, err)
		return
	}
	if proven.bootstrap() {
		select {
		case boot <- struct{}{}:
			defer func() { <-boot }()
		case <-ctx.Done():
			_ = a.ws.Close()
			return
		}
		c.mu.Lock()
		spent := c.lease != nil || c.ticket != h.Ticket
		c.mu.Unlock()
		if spent {
			_ = a.ws.Close()
			c.cfg.Listener.plog.log(c.log, slog.LevelInfo,
				"listener dropped a second bootstrap handshake; the ticket is already spent", a.addr)
			return
		}
	}
	sess, w, err := proven.respond(actx, a.ws)
	if err != nil {
		if proven.bootstrap() {
			c.mu.Lock()
			c.ticket = "" // possibly consumed: never offered again (prp.md §2.4)
			c.mu.Unlock()
		}
		c.acceptFailed(ctx, a, err)
		return
	}
	a.peer.release()
	conn := c.adopt(a.ws, a.act, sess, w)
	select {
	case authed <- conn:
	case <-ctx.Done():
		conn.l.close(nil)
	}
}

// acceptFailed closes a peer whose handshake failed and reports it: a fatal
// failure ends Run, any other is logged, rate-limited, with the peer's address.
func (c *Client) acceptFailed(ctx context.Context, a accepted, err error) {
	_ = a.ws.Close()
	if ctx.Err() != nil {
		return
	}
	if fatalHandshake(err) {
		c.failFatal(err)
		return
	}
	c.cfg.Listener.plog.log(c.log, slog.LevelWarn, "listener peer failed the handshake", a.addr, "err", peerErr(err))
}
