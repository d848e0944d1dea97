package prp

import (
	"context"
	"fmt"
	"sync"
)

// maxConcurrentHandshakes bounds listener peers authenticating at once
// (each for at most the auth bounds); more wait in the listener's queue.
const maxConcurrentHandshakes = 8

// acceptLoop authenticates listener peers, each in its own goroutine, so a
// stray or stalled peer never delays the server's upgrade. Bootstrap
// handshakes run one at a time, so one ticket is never in two handshakes; a
// peer failing before auth_response costs nothing and never touches the
// current connection (prp.md §1.2, §4 item 4).
func (c *Client) acceptLoop(ctx context.Context, authed chan<- *Conn) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxConcurrentHandshakes)
	boot := make(chan struct{}, 1) // held by the one bootstrap handshake in flight
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

// serveAccepted authenticates one listener peer. A bootstrap handshake
// waits for any other to finish first (so a stalled peer can delay the first
// authentication by up to the auth bounds); lease handshakes never wait.
func (c *Client) serveAccepted(ctx context.Context, a accepted, boot chan struct{}, authed chan<- *Conn) {
	c.mu.Lock()
	bootstrap := c.lease == nil
	c.mu.Unlock()
	if bootstrap {
		select {
		case boot <- struct{}{}:
			defer func() { <-boot }()
		case <-ctx.Done():
			_ = a.ws.Close()
			return
		}
	}
	actx, cancel := c.attemptCtx(ctx)
	sess, w, err := c.handshake(actx, a.ws)
	cancel()
	if err != nil {
		_ = a.ws.Close()
		if ctx.Err() == nil {
			c.handshakeFailed(err)
		}
		return
	}
	conn := c.adopt(a.ws, a.act, sess, w)
	select {
	case authed <- conn:
	case <-ctx.Done():
		conn.l.close(nil)
	}
}
