package prp

import (
	"context"
	"encoding/json"
	"sync"
)

// Dispatch: two routines per connection hand inbound envelopes to the
// Client's user (ClientConfig.OnControl).
//
//   - The ack routine takes every frame the reader forwarded, in arrival
//     order. It applies ack, command_result_ack and
//     warm_transition_activated_ack itself and queues each command for the
//     command routine. Because it is the only consumer of the link's inbox,
//     a command is queued only after every ack that arrived before it was
//     applied: the per-connection order of acks and commands stays
//     observable to the core (prp.md §8.4, §8.5).
//   - The command routine runs OnAuthenticated, then (once the previous
//     connection's command routine returned) the commands, one at a time
//     in order. It may block for as long as a command takes (a
//     session.open waits up to 60 s) without delaying any ack, so provider
//     output gated on ACKs (prp.md §8.5 flow control) keeps flowing.
//
// The one effect that waits across the two routines: a command_result_ack
// for command X is applied only after the handler of X on this connection
// (or OnAuthenticated, while X is one of the welcome's pending commands) has
// returned, since it acknowledges the result that handler sent and the
// handler's bookkeeping after the send (the terminal fence of prp.md §7.4)
// must be in place first. Acks never wait for a command.
//
// PRP pings never reach either routine: the reader hands them to the
// writer's priority lane (link.go), so neither a blocked command nor a
// stalled ack handler delays a pong.

// dispatcher hands the newest connection to the dispatch goroutine without
// ever blocking the supervisor.
type dispatcher struct {
	// mu guards conn and gen.
	mu   sync.Mutex
	conn *Conn
	gen  int
	kick chan struct{}
}

func (d *dispatcher) set(c *Conn) {
	d.mu.Lock()
	d.conn, d.gen = c, d.gen+1
	d.mu.Unlock()
	kick(d.kick)
}

func (d *dispatcher) get() (*Conn, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conn, d.gen
}

// routineEnd reports the end of one connection's command routine.
type routineEnd struct {
	done   chan struct{} // closed once the routine returned
	failed bool          // the routine's hook failed; written before done closes
	q      *commandQueue // its commands, which a command_result_ack on the next connection waits for
}

// ended is the routineEnd of no routine (the first connection's previous).
func ended() *routineEnd {
	e := &routineEnd{done: make(chan struct{}), q: newCommandQueue(nil)}
	close(e.done)
	return e
}

// await waits for the routine's end; false when ctx ended first or the
// routine failed.
func (e *routineEnd) await(ctx context.Context) bool {
	select {
	case <-e.done:
		return !e.failed
	case <-ctx.Done():
		return false
	}
}

// dispatchLoop serves the newest connection until a newer one takes over or
// it ends, then the next. A command still running when its connection ends
// keeps running while the next connection authenticates (its wait may need
// that connection: agent output gated on ACKs, prp.md §8.5); the next
// connection's commands start only after it returned.
func (c *Client) dispatchLoop(ctx context.Context, d *dispatcher) {
	prev := ended()
	defer func() { <-prev.done }()
	seen := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		}
		conn, gen := d.get()
		if gen == seen || conn == nil {
			continue
		}
		seen = gen
		current := func() bool { _, g := d.get(); return g == gen }
		conn.prev, conn.authed = prev, make(chan struct{})
		next, err := c.serveConn(ctx, conn, current)
		prev = next
		if err != nil {
			c.failFatal(err)
			return
		}
		if !current() {
			kick(d.kick)
		}
	}
}

// serveConn runs the ack routine (on the calling goroutine) and the command
// routine of one connection. It returns once the ack routine ended (the
// connection ended, was superseded, or ctx ended), with the end of the
// command routine, which may still run a command: its fatal error is
// reported by failFatal. A failed ack hook is returned, after both ended.
func (c *Client) serveConn(ctx context.Context, conn *Conn, current func() bool) (*routineEnd, error) {
	ctx, cancel := context.WithCancel(ctx)
	q := newCommandQueue(conn.d.release)
	releaseWelcome := q.hold(commandIDs(conn.welcome.PendingCommands))
	cmdErr := make(chan error, 1)
	go func() { cmdErr <- c.commandLoop(ctx, cancel, conn, q, releaseWelcome, current) }()
	err := c.ackLoop(ctx, conn, q, current)
	if err != nil {
		cancel()
	}
	q.close()
	end := &routineEnd{done: make(chan struct{}), q: q}
	finish := func() error {
		defer close(end.done)
		defer cancel()
		cerr := <-cmdErr
		end.failed = cerr != nil
		return cerr
	}
	if err != nil {
		finish()
		return end, err
	}
	go func() {
		if cerr := finish(); cerr != nil {
			c.failFatal(cerr)
		}
	}()
	// The next connection's OnAuthenticated waits for this one's setup
	// (not for its commands), so the newest connection is set up last.
	select {
	case <-conn.authed:
	case <-ctx.Done():
	}
	return end, nil
}

// ackLoop is the ack routine: the link inbox's only consumer.
func (c *Client) ackLoop(ctx context.Context, conn *Conn, q *commandQueue, current func() bool) error {
	for {
		v, err := conn.l.recv(ctx)
		if err != nil {
			return nil // the connection or ctx ended: Run sorts out which
		}
		if !current() {
			return nil // superseded: the newer connection's replay covers the rest
		}
		in := v.(*inbound) // decoded by the reader (Client.inspect), owned here
		env := in.env
		switch env.Kind {
		case KindCommand:
			if !q.push(in, commandIDOf(env.Payload)) {
				conn.l.fail(errInboundOverflow)
				return nil
			}
			continue // settled when its handler returns (commandQueue.settle)
		case KindCommandResultAck:
			// Its handler may still run on the last connection's routine.
			id := commandIDOf(env.Payload)
			if !conn.prev.q.waitSettled(ctx, id) || !q.waitSettled(ctx, id) {
				return nil
			}
		}
		if c.cfg.OnControl != nil {
			if err := c.cfg.OnControl(ctx, conn, env); err != nil {
				return err
			}
		}
		conn.d.release(in)
	}
}

// commandLoop is the command routine: OnAuthenticated, then each queued
// command in order. A failure cancels the ack routine too.
func (c *Client) commandLoop(ctx context.Context, cancel context.CancelFunc, conn *Conn, q *commandQueue, releaseWelcome func(), current func() bool) error {
	defer q.abandon()
	err := func() error {
		defer releaseWelcome()
		defer conn.markAuthed()
		if c.cfg.OnAuthenticated == nil {
			return nil
		}
		return c.cfg.OnAuthenticated(ctx, conn, conn.welcome)
	}()
	if err != nil {
		cancel()
		return err
	}
	if !conn.prev.await(ctx) {
		return nil // the last connection's command failed: Run ends with it
	}
	for {
		it, ok := q.pop(ctx)
		if !ok || !current() {
			return nil // abandon releases it and the rest
		}
		if c.cfg.OnControl != nil {
			err = c.cfg.OnControl(ctx, conn, it.in.env)
		}
		q.settle(it)
		if err != nil {
			cancel()
			return err
		}
	}
}

// queuedCommand is a command waiting for or running on the command routine.
type queuedCommand struct {
	in   *inbound // nil for a welcome's pending command (hold)
	id   string
	done chan struct{} // closed once its handler returned or it was dropped
}

// commandQueue carries commands from the ack routine to the command
// routine and tracks which command ids are not yet settled, for the
// command_result_ack wait. It holds at most maxInboundQueue commands: the
// core keeps one command in flight, so more is a flooding peer.
type commandQueue struct {
	// mu guards items, running, closed and inflight.
	mu       sync.Mutex
	items    []*queuedCommand
	running  *queuedCommand // popped, not yet settled
	closed   bool
	kick     chan struct{}
	inflight map[string][]chan struct{} // commandId → done of each unsettled copy
	// released settles a command's frame in the connection's deferral
	// count once its handler returned or it was dropped; fixed at creation.
	released func(*inbound)
}

func newCommandQueue(released func(*inbound)) *commandQueue {
	return &commandQueue{kick: make(chan struct{}, 1), inflight: map[string][]chan struct{}{}, released: released}
}

// hold marks ids as in flight until the returned release runs (the
// welcome's pending commands, which OnAuthenticated admits itself).
func (q *commandQueue) hold(ids []string) (release func()) {
	done := make(chan struct{})
	q.mu.Lock()
	for _, id := range ids {
		q.inflight[id] = append(q.inflight[id], done)
	}
	q.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			for _, id := range ids {
				q.forgetLocked(id, done)
			}
			q.mu.Unlock()
			close(done)
		})
	}
}

// push queues a command; false means the queue is full.
func (q *commandQueue) push(in *inbound, id string) bool {
	q.mu.Lock()
	if len(q.items) >= maxInboundQueue {
		q.mu.Unlock()
		return false
	}
	it := &queuedCommand{in: in, id: id, done: make(chan struct{})}
	q.items = append(q.items, it)
	q.inflight[id] = append(q.inflight[id], it.done)
	q.mu.Unlock()
	kick(q.kick)
	return true
}

// pop returns the next command; false once the queue is closed and empty
// or ctx ended.
func (q *commandQueue) pop(ctx context.Context) (*queuedCommand, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			it := q.items[0]
			q.items[0] = nil
			q.items = q.items[1:]
			q.running = it // settled by settle, or by abandon if the routine stops first
			q.mu.Unlock()
			return it, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, false
		}
		select {
		case <-q.kick:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// settle marks a command's handler as returned.
func (q *commandQueue) settle(it *queuedCommand) {
	q.mu.Lock()
	q.forgetLocked(it.id, it.done)
	if q.running == it {
		q.running = nil
	}
	q.mu.Unlock()
	close(it.done)
	if it.in != nil && q.released != nil {
		q.released(it.in)
	}
}

// abandon settles whatever the command routine will not run.
func (q *commandQueue) abandon() {
	q.mu.Lock()
	left := q.items
	if q.running != nil {
		left = append(left, q.running)
	}
	q.items, q.running, q.closed = nil, nil, true
	q.mu.Unlock()
	for _, it := range left {
		q.settle(it)
	}
}

// close says no more commands will be pushed.
func (q *commandQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	kick(q.kick)
}

// waitSettled waits until no command with id is queued or running; false
// means ctx ended first.
func (q *commandQueue) waitSettled(ctx context.Context, id string) bool {
	q.mu.Lock()
	wait := append([]chan struct{}(nil), q.inflight[id]...)
	q.mu.Unlock()
	for _, done := range wait {
		select {
		case <-done:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func (q *commandQueue) forgetLocked(id string, done chan struct{}) {
	chs := q.inflight[id]
	for i, ch := range chs {
		if ch == done {
			chs = append(chs[:i], chs[i+1:]...)
			break
		}
	}
	if len(chs) == 0 {
		delete(q.inflight, id)
	} else {
		q.inflight[id] = chs
	}
}

// commandIDOf reads the commandId of a command or command_result_ack
// payload; "" when absent (such a frame waits for nothing).
func commandIDOf(payload json.RawMessage) string {
	var p struct {
		CommandID string `json:"commandId"`
	}
	_ = json.Unmarshal(payload, &p)
	return p.CommandID
}

func commandIDs(raws []json.RawMessage) []string {
	ids := make([]string, 0, len(raws))
	for _, r := range raws {
		ids = append(ids, commandIDOf(r))
	}
	return ids
}
