package prp

import (
	"context"
	"sync"
)

// Conn is one authenticated connection as the Client's user sees it.
//
// Concurrency: every method may be called from any goroutine, concurrently
// with the others and with the Client's own routines. Send and SendControl
// only queue: the link's single writer owns the socket and seals frames in
// the order they were queued, so two goroutines that send concurrently get
// some interleaving of their frames, each goroutine's in its own order.
// Session and Welcome return values the Conn owns; callers read them and
// never modify them. The Client owns the Conn's lifetime: it closes the
// link when the connection is lost or superseded, after which Done is
// closed and sends fail with the link's error.
//
// Inbound buffers: the link's reader opens every frame into one reused
// plaintext buffer, valid only until the reader's next read (linkConfig.
// Inspect). What reaches the user never aliases it: the Client decodes each
// frame into an *Envelope (every field copied) before handing it to
// OnControl, so an Envelope and its Payload may be kept for as long as the
// user likes. Code that takes frames from a link itself (the Core) copies
// what it keeps.
type Conn struct {
	l       *link
	sess    *Session
	welcome *Welcome
	d       *deferral // the inbound frames not yet settled (deferral.go)
	// prev is the previous connection's command routine, which may still
	// run a command when this connection authenticates; set before this
	// connection's routines start, read-only after.
	prev *routineEnd
	// authed is closed once OnAuthenticated called AwaitPrevious or
	// returned (markAuthed): the next connection's OnAuthenticated starts
	// only then. Made before this connection's routines start.
	authed     chan struct{}
	authedOnce sync.Once
}

// AwaitPrevious waits until the previous connection's command routine has
// returned (its command, if one still ran, recorded its result). The
// connection's OnAuthenticated calls it once it has set the connection up
// and before it admits a command; its queued commands wait for it anyway.
// What the hook does before the call never overlaps a newer connection's
// OnAuthenticated. False: ctx ended first, or that routine failed (Run is
// ending with its error).
func (c *Conn) AwaitPrevious(ctx context.Context) bool {
	c.markAuthed()
	return c.prev.await(ctx)
}

func (c *Conn) markAuthed() { c.authedOnce.Do(func() { close(c.authed) }) }

// Session returns the connection's secure session.
func (c *Conn) Session() *Session { return c.sess }

// Welcome returns the checked welcome that opened the connection.
func (c *Conn) Welcome() *Welcome { return c.welcome }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.l.Done() }

// Send queues one envelope plaintext (an event or command_result kept
// durably, byte for byte) for the single writer, which seals frames in
// send order. It returns once queued. The writer holds an event while more
// than maxUnackedEventBytes of events await the core's ACK (sendWindow), so
// a burst waits in the queue, behind which Send blocks, rather than in the
// socket ahead of a pong.
func (c *Conn) Send(ctx context.Context, plaintext []byte) error { return c.l.send(ctx, plaintext) }

// TrySend is Send that never waits: queued is false, and nothing was
// queued, when the send queue is full.
func (c *Conn) TrySend(plaintext []byte) (queued bool, err error) { return c.l.trySend(plaintext) }

// SendControl builds a control envelope of kind on this connection and queues it.
func (c *Conn) SendControl(ctx context.Context, kind string, payload any) error {
	env, err := c.sess.NewControl(kind, payload)
	if err != nil {
		return err
	}
	b, err := MarshalEnvelope(env)
	if err != nil {
		return err
	}
	return c.l.send(ctx, b)
}
