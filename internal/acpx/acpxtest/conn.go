// Package acpxtest drives an acpx.Client over plain pipes, for tests and
// the real-peer checks. runnerd never uses it: its agent.Manager moves the
// same lines through pcwrap session files (acp.md §3.2–§3.3). Production
// code must not import this package.
package acpxtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/provider"
)

// maxQueuedInbound bounds the Conn's inbound queue (the Go SDK's
// notification queue size); overflow fails the connection loudly.
const maxQueuedInbound = 1024

// readChunk is the stdout read size.
const readChunk = 64 << 10

// Conn errors.
var (
	// errClosed means the agent's stdout ended or the stream failed.
	errClosed = errors.New("acp connection closed")
	// errInboxOverflow means the consumer fell maxQueuedInbound behind.
	errInboxOverflow = errors.New("acp inbound queue overflow")
	// errCancelGraceExpired means the prompt did not settle within the
	// cancel grace; the caller stops the agent (acp.md §4.4 step 4).
	errCancelGraceExpired = errors.New("cancel grace expired")
)

// ConnOptions configures a Conn.
type ConnOptions struct {
	Logger *slog.Logger
	Clock  clock.Clock
	Info   provider.Implementation
	// Record resumes a durable record (zero value: fresh).
	Record provider.Record
	// Permissions, when set, answers permission requests by policy; the
	// request is still delivered (already answered) for mapping.
	Permissions provider.PermissionMode
	// HoldUnsupported keeps fs/* and terminal/* requests pending for the
	// consumer instead of answering -32601 (runnerd advertises neither).
	HoldUnsupported bool
	// Persist is called with the record before every write: the
	// durability point of acp.md §3.2. An error aborts the write.
	Persist func(provider.Record) error
}

// Conn runs a Client over a byte stream (an agent's stdin/stdout pipes).
// runnerd drives the Client through pcwrap session files instead; Conn
// serves tests and the real-peer checks. One goroutine reads; writes are
// serialised; every method may be called concurrently.
type Conn struct {
	opts  ConnOptions
	log   *slog.Logger
	clock clock.Clock
	w     io.Writer

	mu      sync.Mutex // guards cl, waiters, turn and err
	cl      *acpx.Client
	waiters map[int64]chan provider.Inbound
	turn    chan provider.TurnOutcome
	err     error

	writeMu sync.Mutex // serialises writes to w, so lines never interleave
	inbox   chan provider.Inbound
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
		cl:      acpx.NewClient(opts.Record, acpx.ClientOptions{Logger: log, Info: opts.Info}),
		waiters: map[int64]chan provider.Inbound{},
		inbox:   make(chan provider.Inbound, maxQueuedInbound),
		done:    make(chan struct{}),
	}
	go c.readLoop(r)
	return c
}

// Inbox delivers updates, agent requests and settled turns in stream
// order. It is closed when the connection ends.
func (c *Conn) Inbox() <-chan provider.Inbound { return c.inbox }

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
func (c *Conn) Record() provider.Record {
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
	var deliver []provider.Inbound
	for _, m := range msgs {
		switch m.Kind {
		case provider.KindResponse:
			id := responseID(m)
			if ch, ok := c.waiters[id]; ok {
				ch <- m
				delete(c.waiters, id)
			}
			continue
		case provider.KindTurnSettled:
			if c.turn != nil {
				c.turn <- *m.Outcome
				c.turn = nil
			}
		case provider.KindCancelRequest:
			if l, err := c.cl.RespondError(m.ID, provider.CodeRequestCancelled, "request cancelled"); err == nil {
				lines = append(lines, l)
			}
		case provider.KindRequest:
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
			return errInboxOverflow
		}
	}
	return ferr
}

// autoAnswer answers what runnerd answers without a consumer: unsupported
// methods, and permissions under a policy. It returns the line or nil.
func (c *Conn) autoAnswer(m *provider.Inbound) []byte {
	switch {
	case m.Method == provider.MethodRequestPermission && c.opts.Permissions != "" && m.Permission != nil:
		o := provider.ChoosePermission(c.opts.Permissions, *m.Permission)
		l, err := c.cl.Respond(m.ID, acpx.PermissionResponse{Outcome: o})
		if err != nil {
			return nil
		}
		m.Result, _ = json.Marshal(acpx.PermissionResponse{Outcome: o})
		return l
	case m.Method == provider.MethodRequestPermission:
		return nil
	case (strings.HasPrefix(m.Method, "fs/") || strings.HasPrefix(m.Method, "terminal/")) && c.opts.HoldUnsupported:
		return nil
	}
	l, err := c.cl.RespondError(m.ID, provider.CodeMethodNotFound, "method not found")
	if err != nil {
		return nil
	}
	m.RPCError = &provider.RPCError{Code: provider.CodeMethodNotFound}
	return l
}

// responseID is a response's numeric id (the Client numbers its requests).
func responseID(m provider.Inbound) int64 {
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
		err = fmt.Errorf("%w: %w", provider.ErrWrite, err)
		c.mu.Lock()
		c.cl.LatchLoss(provider.LossWriteError)
		c.mu.Unlock()
		return err
	}
	return nil
}

// send encodes with the client under the lock, persists, then writes.
func (c *Conn) send(encode func(*acpx.Client) ([]byte, error)) error {
	c.mu.Lock()
	if c.err != nil || isClosed(c.done) {
		// The reader may have ended before the first send (a banner
		// that trips the bad-line bound arrives at once): say why.
		cause := c.err
		c.mu.Unlock()
		if cause != nil {
			return fmt.Errorf("%w: %w", errClosed, cause)
		}
		return errClosed
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
	return provider.NewFailure(provider.ClassAgentDisconnected, errClosed)
}

// Call sends an arbitrary request and waits for its answer (bounded by ctx).
func (c *Conn) Call(ctx context.Context, method string, params any) (provider.Inbound, error) {
	return c.callWith(ctx, nil, func(cl *acpx.Client) (provider.Call, error) { return cl.Request(method, params, "") })
}

// Notify sends a notification.
func (c *Conn) Notify(method string, params any) error {
	return c.send(func(cl *acpx.Client) ([]byte, error) { return cl.Notify(method, params) })
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
	Servers []acpx.MCPServer
}

// Open runs the handshake of acp.md §4.1 under the agent's bound from the
// injected clock: initialize (v1 only), then session/new, or
// session/resume / session/load. On expiry it returns a
// session_handshake_timeout failure and marks the record
// resetOnNextEnsure; the caller stops the agent and emits no provider
// event.
func (c *Conn) Open(ctx context.Context, o OpenOptions) error {
	bound := acpx.OpenBound(o.Agent, o.Resume)
	t := c.clock.NewTimer(bound)
	defer t.Stop()
	c.mu.Lock()
	c.cl.SetLaunch(o.Agent, o.Command, o.Args, c.cl.Record().Cwd)
	c.mu.Unlock()
	err := c.open(ctx, t.C(), o)
	if errors.Is(err, errDeadline) {
		c.mu.Lock()
		c.cl.MarkReset()
		c.mu.Unlock()
		return provider.HandshakeTimeout(o.Command, bound.Milliseconds())
	}
	return err
}

func (c *Conn) open(ctx context.Context, deadline <-chan time.Time, o OpenOptions) error {
	if _, err := c.callWith(ctx, deadline, (*acpx.Client).Initialize); err != nil {
		return err
	}
	if !o.Resume {
		_, err := c.callWith(ctx, deadline, func(cl *acpx.Client) (provider.Call, error) { return cl.NewSession(o.Cwd, o.Servers) })
		return err
	}
	c.mu.Lock()
	caps := c.cl.Capabilities()
	c.mu.Unlock()
	switch {
	case caps.SessionCapabilities.Resume != nil:
		_, err := c.callWith(ctx, deadline, func(cl *acpx.Client) (provider.Call, error) { return cl.ResumeSession(o.Servers) })
		return err
	case caps.LoadSession:
		_, err := c.callWith(ctx, deadline, func(cl *acpx.Client) (provider.Call, error) { return cl.LoadSession(o.Servers) })
		return err
	}
	return provider.NewFailure(provider.ClassSessionResumeRequired, errors.New("agent supports neither session/resume nor session/load"))
}

// callWith sends the request mk encodes and waits for its answer, ctx, or
// deadline (nil: none).
func (c *Conn) callWith(ctx context.Context, deadline <-chan time.Time, mk func(*acpx.Client) (provider.Call, error)) (provider.Inbound, error) {
	ch := make(chan provider.Inbound, 1)
	err := c.send(func(cl *acpx.Client) ([]byte, error) {
		call, err := mk(cl)
		if err != nil {
			return nil, err
		}
		c.waiters[call.ID] = ch
		return call.Line, nil
	})
	if err != nil {
		return provider.Inbound{}, err
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return provider.Inbound{}, c.closedErr()
		}
		return m, m.Err
	case <-deadline:
		return provider.Inbound{}, errDeadline
	case <-ctx.Done():
		return provider.Inbound{}, fmt.Errorf("await acp response: %w", ctx.Err())
	}
}

// Prompt starts a turn. The returned channel yields the outcome once (it
// is closed without a value if the connection ends first); the settled
// turn is also delivered on Inbox in stream order.
func (c *Conn) Prompt(turnID, text string) (<-chan provider.TurnOutcome, error) {
	ch := make(chan provider.TurnOutcome, 1)
	err := c.send(func(cl *acpx.Client) ([]byte, error) {
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
// the turn is abandoned as cancelled and errCancelGraceExpired is returned:
// the caller stops the agent. Either way the record is marked
// resetOnNextEnsure.
func (c *Conn) Cancel(ctx context.Context) (provider.TurnOutcome, error) {
	c.mu.Lock()
	ch := c.turn
	lines, err := c.cl.Cancel()
	if err == nil {
		c.cl.MarkReset()
		err = c.persistLocked()
	}
	c.mu.Unlock()
	if err != nil {
		return provider.TurnOutcome{}, err
	}
	for _, l := range lines {
		if err := c.write(l); err != nil {
			return provider.TurnOutcome{}, err
		}
	}
	t := c.clock.NewTimer(acpx.CancelGrace)
	defer t.Stop()
	select {
	case out, ok := <-ch:
		if ok {
			return out, nil
		}
		return c.abandon(), nil
	case <-t.C():
		return c.abandon(), errCancelGraceExpired
	case <-ctx.Done():
		return c.abandon(), fmt.Errorf("cancel turn: %w", ctx.Err())
	}
}

func (c *Conn) abandon() provider.TurnOutcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.turn = nil
	if out := c.cl.AbandonTurn(); out != nil {
		return *out
	}
	return provider.TurnOutcome{StopReason: provider.StopCancelled, Cancelled: true}
}

// respond answers a held agent request.
func (c *Conn) respond(id json.RawMessage, result any) error {
	return c.send(func(cl *acpx.Client) ([]byte, error) { return cl.Respond(id, result) })
}

// respondError answers a held agent request with an error.
func (c *Conn) respondError(id json.RawMessage, code int, message string) error {
	return c.send(func(cl *acpx.Client) ([]byte, error) { return cl.RespondError(id, code, message) })
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
