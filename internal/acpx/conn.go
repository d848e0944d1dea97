package acpx

import (
	"github.com/pcrunner/pcrunner/internal/clock"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// MaxQueuedInbound bounds the Conn's inbound queue (the Go SDK's
// notification queue size); overflow fails the connection loudly.
const MaxQueuedInbound = 1024

// readChunk is the stdout read size.
const readChunk = 64 << 10

// Conn errors.
var (
	// ErrClosed means the agent's stdout ended or the stream failed.
	ErrClosed = errors.New("acp connection closed")
	// ErrInboxOverflow means the consumer fell MaxQueuedInbound behind.
	ErrInboxOverflow = errors.New("acp inbound queue overflow")
	// ErrWrite means a line could not be written to the agent's stdin (a
	// write_error loss).
	ErrWrite = errors.New("write agent stdin")
	// ErrCancelGraceExpired means the prompt did not settle within the
	// cancel grace; the caller stops the agent (acp.md §4.4 step 4).
	ErrCancelGraceExpired = errors.New("cancel grace expired")
)

// ConnOptions configures a Conn.
type ConnOptions struct {
	Logger *slog.Logger
	Clock  clock.Clock
	Info   Implementation
	// Record resumes a durable record (zero value: fresh).
	Record Record
	// Permissions, when set, answers permission requests by policy; the
	// request is still delivered (already answered) for mapping.
	Permissions PermissionMode
	// HoldUnsupported keeps fs/* and terminal/* requests pending for the
	// consumer instead of answering -32601 (runnerd advertises neither).
	HoldUnsupported bool
	// Persist is called with the record before every write: the
	// durability point of acp.md §3.2. An error aborts the write.
	Persist func(Record) error
}

// Conn runs a Client over a byte stream (an agent's stdin/stdout pipes).
// runnerd drives the Client through pcwrap session files instead; Conn
// serves tests, tools and the real-peer checks. One goroutine reads; writes
// are serialised.
type Conn struct {
	opts  ConnOptions
	log   *slog.Logger
	clock clock.Clock
	w     io.Writer

	mu      sync.Mutex
	cl      *Client
	waiters map[int64]chan Inbound
	turn    chan TurnOutcome
	err     error

	writeMu sync.Mutex
	inbox   chan Inbound
	done    chan struct{}
}

// NewConn starts reading r (the agent's stdout) and writes to w (its
// stdin). The reader stops at EOF or a fatal stream error; Done is closed
// then.
func NewConn(r io.Reader, w io.Writer, opts ConnOptions) *Conn {
	if opts.Clock == nil {
		opts.Clock = clock.System
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Conn{
		opts:    opts,
		log:     log,
		clock:   opts.Clock,
		w:       w,
		cl:      NewClient(opts.Record, ClientOptions{Logger: log, Info: opts.Info}),
		waiters: map[int64]chan Inbound{},
		inbox:   make(chan Inbound, MaxQueuedInbound),
		done:    make(chan struct{}),
	}
	go c.readLoop(r)
	return c
}

// Inbox delivers updates, agent requests and settled turns in stream
// order. It is closed when the connection ends.
func (c *Conn) Inbox() <-chan Inbound { return c.inbox }

// Done is closed when the reader stopped.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is the reason the connection ended (nil while open, or after a
// clean EOF with nothing outstanding).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Record returns the durable record.
func (c *Conn) Record() Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cl.Record()
}

// Wait waits for the reader to stop, bounded by ctx.
func (c *Conn) Wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.Err()
	case <-ctx.Done():
		return fmt.Errorf("wait acp reader: %w", ctx.Err())
	}
}

func (c *Conn) readLoop(r io.Reader) {
	defer close(c.done)
	defer close(c.inbox)
	buf := make([]byte, readChunk)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err := c.feed(buf[:n]); err != nil {
				c.finish(err)
				return
			}
		}
		if rerr != nil {
			c.mu.Lock()
			err := c.cl.EndOfStream()
			c.mu.Unlock()
			c.finish(err)
			return
		}
	}
}

// finish records the end and wakes every waiter.
func (c *Conn) finish(err error) {
	if err != nil {
		c.log.Warn("acp connection ended", "err", err) // fixed texts only
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	for id, ch := range c.waiters {
		close(ch)
		delete(c.waiters, id)
	}
	if c.turn != nil {
		close(c.turn)
		c.turn = nil
	}
}

func (c *Conn) feed(p []byte) error {
	c.mu.Lock()
	msgs, ferr := c.cl.Feed(p)
	var lines [][]byte
	var deliver []Inbound
	for _, m := range msgs {
		switch m.Kind {
		case KindResponse:
			id := m.responseID()
			if ch, ok := c.waiters[id]; ok {
				ch <- m
				delete(c.waiters, id)
			}
			continue
		case KindTurnSettled:
			if c.turn != nil {
				c.turn <- *m.Outcome
				c.turn = nil
			}
		case KindCancelRequest:
			if l, err := c.cl.RespondError(m.ID, CodeRequestCancelled, "request cancelled"); err == nil {
				lines = append(lines, l)
			}
		case KindRequest:
			if l := c.autoAnswer(&m); l != nil {
				lines = append(lines, l)
			}
		}
		deliver = append(deliver, m)
	}
	var perr error
	if len(lines) > 0 {
		perr = c.persistLocked()
	}
	c.mu.Unlock()
	if perr != nil {
		return perr
	}
	for _, l := range lines {
		if err := c.write(l); err != nil {
			return err
		}
	}
	for _, m := range deliver {
		select {
		case c.inbox <- m:
		default:
			return ErrInboxOverflow
		}
	}
	return ferr
}

// autoAnswer answers what runnerd answers without a consumer: unsupported
// methods, and permissions under a policy. It returns the line or nil.
func (c *Conn) autoAnswer(m *Inbound) []byte {
	switch {
	case m.Method == MethodRequestPermission && c.opts.Permissions != "" && m.Permission != nil:
		o := ChoosePermission(c.opts.Permissions, *m.Permission)
		l, err := c.cl.Respond(m.ID, PermissionResponse{Outcome: o})
		if err != nil {
			return nil
		}
		m.Result, _ = json.Marshal(PermissionResponse{Outcome: o})
		return l
	case m.Method == MethodRequestPermission:
		return nil
	case (strings.HasPrefix(m.Method, "fs/") || strings.HasPrefix(m.Method, "terminal/")) && c.opts.HoldUnsupported:
		return nil
	}
	l, err := c.cl.RespondError(m.ID, CodeMethodNotFound, "method not found")
	if err != nil {
		return nil
	}
	m.RPCError = &RPCError{Code: CodeMethodNotFound}
	return l
}

func (m Inbound) responseID() int64 {
	var id int64
	_ = json.Unmarshal(m.ID, &id)
	return id
}

func (c *Conn) persistLocked() error {
	if c.opts.Persist == nil {
		return nil
	}
	if err := c.opts.Persist(c.cl.Record()); err != nil {
		return fmt.Errorf("persist acp record: %w", err)
	}
	return nil
}

func (c *Conn) write(line []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if _, err := c.w.Write(line); err != nil {
		err = fmt.Errorf("%w: %w", ErrWrite, err)
		c.mu.Lock()
		c.cl.LatchLoss(LossWriteError)
		c.mu.Unlock()
		return err
	}
	return nil
}

// send encodes with the client under the lock, persists, then writes.
func (c *Conn) send(encode func(*Client) ([]byte, error)) error {
	c.mu.Lock()
	if c.err != nil || isClosed(c.done) {
		c.mu.Unlock()
		return ErrClosed
	}
	line, err := encode(c.cl)
	if err == nil {
		err = c.persistLocked()
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.write(line)
}

// errDeadline is the handshake bound firing inside callWith.
var errDeadline = errors.New("deadline")

func (c *Conn) closedErr() error {
	if err := c.Err(); err != nil {
		return err
	}
	return NewFailure(ClassAgentDisconnected, ErrClosed)
}

// Call sends an arbitrary request and waits for its answer (bounded by ctx).
func (c *Conn) Call(ctx context.Context, method string, params any) (Inbound, error) {
	return c.callWith(ctx, nil, func(cl *Client) (Call, error) { return cl.Request(method, params, "") })
}

// Notify sends a notification.
func (c *Conn) Notify(method string, params any) error {
	return c.send(func(cl *Client) ([]byte, error) { return cl.Notify(method, params) })
}

// OpenOptions selects the session.open path.
type OpenOptions struct {
	Agent   string
	Command string
	Args    []string
	Cwd     string
	// Resume resumes the record's session (session/resume if advertised,
	// else session/load) instead of session/new.
	Resume  bool
	Servers []MCPServer
}

// Open runs the handshake of acp.md §4.1 under the agent's bound from the
// injected clock: initialize (v1 only), then session/new, or
// session/resume / session/load. On expiry it returns a
// session_handshake_timeout failure and marks the record
// resetOnNextEnsure; the caller stops the agent and emits no provider
// event.
func (c *Conn) Open(ctx context.Context, o OpenOptions) error {
	bound := OpenBound(o.Agent, o.Resume)
	t := c.clock.NewTimer(bound)
	defer t.Stop()
	c.mu.Lock()
	c.cl.rec.Agent, c.cl.rec.Command, c.cl.rec.Args = o.Agent, o.Command, append([]string(nil), o.Args...)
	c.mu.Unlock()
	err := c.open(ctx, t.C(), o)
	if errors.Is(err, errDeadline) {
		c.mu.Lock()
		c.cl.rec.ResetOnNextEnsure = true
		c.mu.Unlock()
		return HandshakeTimeout(o.Command, bound.Milliseconds())
	}
	return err
}

func (c *Conn) open(ctx context.Context, deadline <-chan time.Time, o OpenOptions) error {
	if _, err := c.callWith(ctx, deadline, (*Client).Initialize); err != nil {
		return err
	}
	if !o.Resume {
		_, err := c.callWith(ctx, deadline, func(cl *Client) (Call, error) { return cl.NewSession(o.Cwd, o.Servers) })
		return err
	}
	c.mu.Lock()
	caps := c.cl.Capabilities()
	c.mu.Unlock()
	switch {
	case caps.SessionCapabilities.Resume != nil:
		_, err := c.callWith(ctx, deadline, func(cl *Client) (Call, error) { return cl.ResumeSession(o.Servers) })
		return err
	case caps.LoadSession:
		_, err := c.callWith(ctx, deadline, func(cl *Client) (Call, error) { return cl.LoadSession(o.Servers) })
		return err
	}
	return NewFailure(ClassSessionResumeRequired, errors.New("agent supports neither session/resume nor session/load"))
}

// callWith sends the request mk encodes and waits for its answer, ctx, or
// deadline (nil: none).
func (c *Conn) callWith(ctx context.Context, deadline <-chan time.Time, mk func(*Client) (Call, error)) (Inbound, error) {
	ch := make(chan Inbound, 1)
	err := c.send(func(cl *Client) ([]byte, error) {
		call, err := mk(cl)
		if err != nil {
			return nil, err
		}
		c.waiters[call.ID] = ch
		return call.Line, nil
	})
	if err != nil {
		return Inbound{}, err
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return Inbound{}, c.closedErr()
		}
		return m, m.Err
	case <-deadline:
		return Inbound{}, errDeadline
	case <-ctx.Done():
		return Inbound{}, fmt.Errorf("await acp response: %w", ctx.Err())
	}
}

// Prompt starts a turn. The returned channel yields the outcome once (it
// is closed without a value if the connection ends first); the settled
// turn is also delivered on Inbox in stream order.
func (c *Conn) Prompt(turnID, text string) (<-chan TurnOutcome, error) {
	ch := make(chan TurnOutcome, 1)
	err := c.send(func(cl *Client) ([]byte, error) {
		call, err := cl.Prompt(turnID, text)
		if err != nil {
			return nil, err
		}
		c.turn = ch
		return call.Line, nil
	})
	if err != nil {
		return nil, err
	}
	return ch, nil
}

// Cancel cancels the active turn (acp.md §4.4): session/cancel, cancelled
// answers to pending permission requests, then a wait of at most
// CancelGrace on the injected clock. If the prompt does not settle in time
// the turn is abandoned as cancelled and ErrCancelGraceExpired is returned:
// the caller stops the agent. Either way the record is marked
// resetOnNextEnsure.
func (c *Conn) Cancel(ctx context.Context) (TurnOutcome, error) {
	c.mu.Lock()
	ch := c.turn
	lines, err := c.cl.Cancel()
	if err == nil {
		c.cl.rec.ResetOnNextEnsure = true
		err = c.persistLocked()
	}
	c.mu.Unlock()
	if err != nil {
		return TurnOutcome{}, err
	}
	for _, l := range lines {
		if err := c.write(l); err != nil {
			return TurnOutcome{}, err
		}
	}
	t := c.clock.NewTimer(CancelGrace)
	defer t.Stop()
	select {
	case out, ok := <-ch:
		if ok {
			return out, nil
		}
		return c.abandon(), nil
	case <-t.C():
		return c.abandon(), ErrCancelGraceExpired
	case <-ctx.Done():
		return c.abandon(), fmt.Errorf("cancel turn: %w", ctx.Err())
	}
}

func (c *Conn) abandon() TurnOutcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.turn = nil
	if out := c.cl.AbandonTurn(); out != nil {
		return *out
	}
	return TurnOutcome{StopReason: StopCancelled, Cancelled: true}
}

// Respond answers a held agent request.
func (c *Conn) Respond(id json.RawMessage, result any) error {
	return c.send(func(cl *Client) ([]byte, error) { return cl.Respond(id, result) })
}

// RespondError answers a held agent request with an error.
func (c *Conn) RespondError(id json.RawMessage, code int, message string) error {
	return c.send(func(cl *Client) ([]byte, error) { return cl.RespondError(id, code, message) })
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
