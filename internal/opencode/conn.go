package opencode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// errStreamLost means the event stream could not be reopened within
// maxReconnects attempts.
var errStreamLost = errors.New("opencode event stream lost")

// Sink receives translated messages in stream order with the state they
// leave, from Conn.run's goroutine only. The caller commits both in one
// durable write (the events to the outbox, the state to the record):
// that is what makes a replayed or recovered part exactly once in PRP.
type Sink func(st State, in []provider.Inbound)

// Conn drives one OpenCode session over a running server: the operations
// an agent driver needs (open, prompt, cancel, answer a permission) and
// the supervised event stream (run). All methods may be called
// concurrently; run must be called once.
type Conn struct {
	cl   *Client
	sink Sink
	// wait is the pause between reconnects (tests inject a short one).
	wait func(context.Context, time.Duration) error

	// ready is closed once the event stream is first open: a prompt
	// waits for it, so no event of its turn precedes the stream.
	ready     chan struct{}
	readyOnce sync.Once

	mu sync.Mutex // guards st
	st State      // guarded by mu
}

// NewConn returns a Conn resuming st (zero for a new session).
func NewConn(cl *Client, st State, sink Sink) *Conn {
	return &Conn{cl: cl, sink: sink, st: st, wait: sleepCtx, ready: make(chan struct{})}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// state returns a copy of the translation state.
func (c *Conn) state() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.clone()
}

func (st State) clone() State {
	out := st
	out.Assistant = append([]string(nil), st.Assistant...)
	out.Order = append([]string(nil), st.Order...)
	out.Asked = append([]string(nil), st.Asked...)
	if st.Parts != nil {
		out.Parts = make(map[string]*PartState, len(st.Parts))
		for k, v := range st.Parts {
			p := *v
			out.Parts[k] = &p
		}
	}
	return out
}

// Open creates the OpenCode session (a new session; a resumed Conn
// already has its id).
func (c *Conn) Open(ctx context.Context, title string) (string, error) {
	c.mu.Lock()
	if id := c.st.SessionID; id != "" {
		c.mu.Unlock()
		return id, nil
	}
	c.mu.Unlock()
	s, err := c.cl.createSession(ctx, title)
	if err != nil {
		return "", fmt.Errorf("open session: %w", err)
	}
	c.mu.Lock()
	c.st.SessionID = s.ID
	c.mu.Unlock()
	return s.ID, nil
}

// prompt starts turn turnID once the event stream is open (run). The
// turn is marked active before the request, so no event of it can be
// missed; a refused request unmarks it.
func (c *Conn) prompt(ctx context.Context, turnID string, p Prompt) error {
	t := time.NewTimer(requestTimeout)
	defer t.Stop()
	select {
	case <-c.ready:
	case <-ctx.Done():
		return fmt.Errorf("start turn: %w", ctx.Err())
	case <-t.C:
		return errors.New("start turn: the event stream did not open within the request bound")
	}
	c.mu.Lock()
	if c.st.SessionID == "" {
		c.mu.Unlock()
		return provider.ErrNoSession
	}
	if c.st.TurnID != "" {
		c.mu.Unlock()
		return provider.ErrTurnActive
	}
	c.st.startTurn(turnID)
	sid := c.st.SessionID
	c.mu.Unlock()
	if err := c.cl.promptAsync(ctx, sid, p); err != nil {
		c.mu.Lock()
		if c.st.TurnID == turnID && !c.st.Busy {
			c.st.TurnID = ""
		}
		c.mu.Unlock()
		return fmt.Errorf("start turn: %w", err)
	}
	return nil
}

// cancel aborts the active turn; its settlement arrives through the sink
// with Cancelled set. The server keeps running (the session lives on).
func (c *Conn) cancel(ctx context.Context) error {
	c.mu.Lock()
	if c.st.TurnID == "" {
		c.mu.Unlock()
		return provider.ErrNoTurn
	}
	c.st.markAborting()
	sid := c.st.SessionID
	c.mu.Unlock()
	if err := c.cl.abort(ctx, sid); err != nil {
		return fmt.Errorf("cancel turn: %w", err)
	}
	return nil
}

// reply answers permission request id with the chosen option id.
func (c *Conn) reply(ctx context.Context, requestID, optionID string) error {
	return c.cl.replyPermission(ctx, requestID, replyFor(optionID))
}

// run supervises the event stream until ctx ends: it opens GET /event,
// recovers what an active turn missed from the message list, translates
// every event, reconciles at each idle, and on a drop reopens the stream
// after reconnectDelay (errStreamLost after maxReconnects consecutive
// failures). The sink is called from this goroutine only.
func (c *Conn) run(ctx context.Context) error {
	failures := 0
	for {
		err := c.stream(ctx, &failures)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errUnauthorized) {
			return err
		}
		failures++
		if failures > maxReconnects {
			return fmt.Errorf("%w: %w", errStreamLost, err)
		}
		if err := c.wait(ctx, reconnectDelay); err != nil {
			return err
		}
	}
}

// stream runs one connection of the event stream.
func (c *Conn) stream(ctx context.Context, failures *int) error {
	s, err := c.cl.events(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	// The stream is open before the list is read, so nothing falls in
	// between; what both carry is deduplicated by part id.
	if err := c.reconcile(ctx); err != nil {
		return err
	}
	*failures = 0
	c.readyOnce.Do(func() { close(c.ready) })
	// Messages of events already buffered join one delivery, so a burst
	// of deltas costs a few durable writes, not one each; a delivery
	// never waits for bytes not yet received.
	var pending []provider.Inbound
	for {
		ev, err := s.next()
		if err != nil {
			if len(pending) > 0 { // a buffered event failed to decode, then the stream ended
				c.sink(c.state(), pending)
			}
			if err == io.EOF {
				return errors.New("read event stream: closed by the server")
			}
			return err
		}
		c.mu.Lock()
		pending = append(pending, translate(&c.st, ev)...)
		idle := c.st.Idle
		deliver := len(pending) > 0 && (idle || len(pending) >= maxDeliverBatch || !s.ready())
		var snap State
		if deliver {
			snap = c.st.clone()
		}
		c.mu.Unlock()
		if deliver {
			c.sink(snap, pending)
			pending = nil
		}
		if idle {
			if err := c.reconcile(ctx); err != nil {
				return err
			}
		}
	}
}

// reconcile reads the message list and status and emits what the stream
// missed, settling an idle turn.
func (c *Conn) reconcile(ctx context.Context) error {
	c.mu.Lock()
	active, sid := c.st.TurnID != "", c.st.SessionID
	c.mu.Unlock()
	if !active {
		return nil
	}
	msgs, err := c.cl.messages(ctx, sid)
	if err != nil {
		return err
	}
	status, err := c.cl.status(ctx)
	if err != nil {
		return err
	}
	pending, err := c.cl.permissions(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	in := Recover(&c.st, msgs, status, pending)
	snap := c.st.clone()
	c.mu.Unlock()
	if len(in) > 0 {
		c.sink(snap, in)
	}
	return nil
}
