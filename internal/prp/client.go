package prp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/pcrunner/pcrunner/internal/clock"
)

// Runner-side terminal conditions named by the protocol (prp.md §5, §6.1, §11).
var (
	// ErrRevoked: the core revoked the lease with a higher epoch; the runner
	// persists lifecycle "revoked" and exits 0.
	ErrRevoked = errors.New("connection lease revoked")
	// ErrReconnectGraceExceeded is transport_reconnect_grace_exceeded.
	ErrReconnectGraceExceeded = errors.New("transport_reconnect_grace_exceeded")
	// ErrReconnectDeadlineExceeded is transport_reconnect_deadline_exceeded.
	ErrReconnectDeadlineExceeded = errors.New("transport_reconnect_deadline_exceeded")
	// ErrNotConnected reports a send while no connection is authenticated.
	ErrNotConnected = errors.New("not connected")
	// ErrLeaseRenewed reports a lease_renewed that does not answer the outstanding renewal.
	ErrLeaseRenewed = errors.New("unexpected lease_renewed")
)

// RevokedError is the ErrRevoked that ends Run: Epoch is the revoke's
// revocation epoch and LeaseEpoch the one the lease held, so the runner can
// persist the epoch it honoured (prp.md §5: a later revoke must exceed it).
type RevokedError struct{ Epoch, LeaseEpoch int64 }

func (e *RevokedError) Error() string        { return ErrRevoked.Error() }
func (e *RevokedError) Is(target error) bool { return target == ErrRevoked }

// LeaseExpiredCode is the recoverable failure recorded on lease expiry (prp.md §5).
const LeaseExpiredCode = "lease_expired_requires_bootstrap"

// ClientConfig configures the runner half. Exactly one of Dialer and
// Listener selects the mode. The hooks run on Client goroutines and must
// not block for long; Pong and Resume read only in-memory state.
type ClientConfig struct {
	Identity                    Identity
	RunnerVersion, RunnerDigest string
	// Ticket is the one-use bootstrap ticket. It lives only in memory and is
	// dropped once the welcome delivers the lease.
	Ticket string
	// Lease, when set, is a lease to reconnect with instead of a ticket.
	Lease *Lease

	Dialer   *Dialer   // dial modes
	Listener *Listener // listen mode; the Client does not close it

	MaxFrameBytes  int           // default DefaultMaxFrameBytes
	PingInterval   time.Duration // default DefaultPingInterval
	SilenceTimeout time.Duration // default DefaultSilenceTimeout
	ReconnectDelay time.Duration // backoff base; default DefaultReconnectDelay
	ReconnectGrace time.Duration // 0: no grace
	Deadline       time.Time     // lifetime end; zero: unlimited

	// Resume reports the cursors for auth_hello. Nil: zero cursors.
	Resume func() Resume
	// Pong reports the pong payload. Nil: an empty "ready" pong.
	Pong func() PongPayload
	// OnAuthenticated runs for each new authenticated connection on its
	// command routine, before any of its commands: the place to apply
	// welcome.AckedSourceSeq, replay the unacknowledged outbox and admit
	// the welcome's pending command. The connection's acks may be applied
	// while it runs: they answer frames sent on this connection, which the
	// hook sends only after applying the welcome's cursor. It starts only
	// once every routine of the previous connection has returned.
	OnAuthenticated func(ctx context.Context, c *Conn, w *Welcome) error
	// OnControl receives every inbound command, ack, command_result_ack and
	// warm_transition_activated_ack; ping, lease_renewed and revoke are
	// handled by the Client. It is called on two routines per connection
	// (dispatch.go): commands on the command routine, one at a time in
	// arrival order; the acks on the ack routine, one at a time in arrival
	// order. The two overlap, so a command that blocks (session.open waits
	// up to 60 s) never delays an ack. What stays ordered (prp.md §8.5):
	// a command starts only after every ack that arrived before it was
	// applied, and a command_result_ack is applied only after the handler
	// of its command (or OnAuthenticated, for a welcome's pending command)
	// has returned. Acks must not block for long. An error is fatal: Run
	// returns it.
	OnControl func(ctx context.Context, c *Conn, env *Envelope) error
	// OnLost reports that the current connection ended (not when a newer
	// connection supersedes it). It runs on the supervisor goroutine, so it
	// may overlap an OnControl call, and must not block.
	OnLost func(err error)

	Logger *slog.Logger
	Rand   io.Reader
	// Clock drives every timer of the Client and its connections (lease
	// renewal and expiry, reconnect backoff, idle pings, the silence
	// watchdog). Nil: clock.System.
	Clock clock.Clock

	// pongSent observes ping-to-pong latency inside the runner (benchmarks).
	pongSent func(time.Duration)
}

// Client is the runner half of PRP: one supervised connection with lease
// renewal, reconnects and, in listen mode, newest-wins replacement
// (prp.md §4–§6). Run it once.
type Client struct {
	cfg ClientConfig
	log *slog.Logger
	clk clock.Clock

	mu           sync.Mutex
	ticket       string
	lease        *Lease
	renewPending *LeaseRenewPayload // the outstanding lease_renew, resent as is
	current      *Conn
	leaseKick    chan struct{}
	fatal        chan error
}

// NewClient checks cfg.
func NewClient(cfg ClientConfig) (*Client, error) {
	if (cfg.Dialer == nil) == (cfg.Listener == nil) {
		return nil, errors.New("new client: exactly one of dialer and listener")
	}
	if cfg.Ticket == "" && cfg.Lease == nil {
		return nil, fmt.Errorf("new client: %w", ErrNoCredential)
	}
	if cfg.MaxFrameBytes == 0 {
		cfg.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if !validMaxFrameBytes(cfg.MaxFrameBytes) {
		return nil, errors.New("new client: max frame bytes outside 1 KiB-16 MiB")
	}
	if cfg.ReconnectDelay <= 0 {
		cfg.ReconnectDelay = DefaultReconnectDelay
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Client{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "prp.client"),
		clk:       clock.Or(cfg.Clock),
		ticket:    cfg.Ticket,
		leaseKick: make(chan struct{}, 1),
		fatal:     make(chan error, 1),
	}
	if cfg.Lease != nil {
		l := *cfg.Lease
		c.lease = &l
	}
	c.cfg.Ticket, c.cfg.Lease = "", nil
	return c, nil
}

// Lease returns a copy of the held lease, if any.
func (c *Client) Lease() (Lease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lease == nil {
		return Lease{}, false
	}
	return *c.lease, true
}

// Send queues plaintext on the current connection.
func (c *Client) Send(ctx context.Context, plaintext []byte) error {
	c.mu.Lock()
	cur := c.current
	c.mu.Unlock()
	if cur == nil {
		return ErrNotConnected
	}
	return cur.Send(ctx, plaintext)
}

func (c *Client) failFatal(err error) {
	select {
	case c.fatal <- err:
	default:
	}
}

// handshake runs one client handshake on ws with the current credential.
func (c *Client) handshake(ctx context.Context, ws *wsConn) (*Session, *Welcome, error) {
	h := c.clientHandshake()
	return h.Run(ctx, ws)
}

// clientHandshake snapshots the current credential and cursors for one attempt.
func (c *Client) clientHandshake() *ClientHandshake {
	c.mu.Lock()
	h := ClientHandshake{
		Identity: c.cfg.Identity, RunnerVersion: c.cfg.RunnerVersion, RunnerDigest: c.cfg.RunnerDigest,
		Ticket: c.ticket, RenewalOutstanding: c.renewPending != nil, Rand: c.cfg.Rand, Now: c.clk.Now,
	}
	if c.lease != nil {
		l := *c.lease
		h.Lease = &l
		h.Ticket = ""
	}
	c.mu.Unlock()
	if c.cfg.Resume != nil {
		h.Resume = c.cfg.Resume()
	}
	return &h
}

// adopt applies a welcome's lease and starts the connection machinery.
func (c *Client) adopt(ws *wsConn, act *activity, sess *Session, w *Welcome) *Conn {
	c.mu.Lock()
	l := w.Lease
	if c.lease != nil && c.lease.ID == l.ID && c.lease.ExpiresAtUnixMs > l.ExpiresAtUnixMs {
		l.ExpiresAtUnixMs = c.lease.ExpiresAtUnixMs // renewed meanwhile on the old connection
	}
	if c.lease != nil && c.lease.ID == l.ID && w.Lease.ExpiresAtUnixMs > c.lease.ExpiresAtUnixMs {
		c.renewPending = nil // the lost lease_renewed arrived as the welcome's later expiry
	}
	if w.Bootstrapped {
		c.ticket = "" // spent; the lease replaces it
	}
	c.lease = &l
	c.mu.Unlock()
	if w.MaxFrameBytes > 0 {
		ws.setMaxFrameBytes(min(max(w.MaxFrameBytes, MinMaxFrameBytes), MaxMaxFrameBytes))
	}
	conn := &Conn{sess: sess, welcome: w}
	win := newSendWindow()
	conn.l = startLink(ws, act, sess, linkConfig{
		PingInterval:   c.cfg.PingInterval,
		SilenceTimeout: c.cfg.SilenceTimeout,
		Inspect: func(pt []byte) (frameAction, any, error) {
			act, env, err := c.inspect(sess, pt)
			if err == nil && env != nil && env.Kind == KindAck {
				// The window only paces: a malformed ack is the ack
				// routine's to reject (prp.md §8.4), so it is ignored here.
				var p AckPayload
				if env.DecodePayload(&p) == nil {
					win.ack(p.AckedSourceSeq)
				}
			}
			return act, env, err
		},
		Window:   win,
		Pong:     func() ([]byte, error) { return c.pong(sess) },
		PongSent: c.cfg.pongSent,
		Logger:   c.log,
	})
	return conn
}

func (c *Client) pong(sess *Session) ([]byte, error) {
	p := PongPayload{Lifecycle: "ready"}
	if c.cfg.Pong != nil {
		p = c.cfg.Pong()
	}
	env, err := sess.NewControl(KindPong, p)
	if err != nil {
		return nil, err
	}
	return MarshalEnvelope(env)
}

// inspect runs in the reader goroutine: it decodes and validates every core frame,
// answers nothing itself but classifies ping, and applies lease_renewed and
// revoke at once so neither waits behind the user's handler.
func (c *Client) inspect(sess *Session, pt []byte) (frameAction, *Envelope, error) {
	env, err := DecodeEnvelope(pt)
	if err != nil {
		return 0, nil, err
	}
	if err := ValidateControlIdentity(env, sess); err != nil {
		return 0, nil, err
	}
	c.mu.Lock()
	expired := c.lease != nil && c.clk.Now().UnixMilli() >= c.lease.ExpiresAtUnixMs
	c.mu.Unlock()
	if expired {
		return 0, nil, fmt.Errorf("inspect frame: %w", ErrLeaseExpired)
	}
	switch env.Kind {
	case KindPing:
		return framePing, nil, nil
	case KindLeaseRenewed:
		return frameConsumed, nil, c.applyRenewed(env)
	case KindRevoke:
		var p RevokePayload
		if err := env.DecodePayload(&p); err != nil {
			return 0, nil, err
		}
		c.mu.Lock()
		epoch := c.lease.RevocationEpoch
		c.mu.Unlock()
		if p.RevocationEpoch <= epoch {
			c.failFatal(ErrRevokeEpoch)
			return 0, nil, ErrRevokeEpoch
		}
		rev := &RevokedError{Epoch: p.RevocationEpoch, LeaseEpoch: epoch}
		c.failFatal(rev)
		return 0, nil, rev
	}
	return frameForward, env, nil // json.Unmarshal copied every field: env owns its memory
}

func (c *Client) applyRenewed(env *Envelope) error {
	var p LeaseRenewedPayload
	if err := env.DecodePayload(&p); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.ConnectionLeaseRevocationEpoch != c.lease.RevocationEpoch {
		return fmt.Errorf("apply lease_renewed: %w", ErrLeaseRenewed)
	}
	if c.renewPending == nil || p.PreviousExpiresAtUnixMs != c.renewPending.ConnectionLeaseExpiresAtUnixMs {
		// A resent lease_renew gets a second reply; one that grants nothing
		// beyond the held expiry is a stale duplicate, not a fault.
		if p.ConnectionLeaseExpiresAtUnixMs <= c.lease.ExpiresAtUnixMs {
			return nil
		}
		return fmt.Errorf("apply lease_renewed: %w", ErrLeaseRenewed)
	}
	if p.ConnectionLeaseExpiresAtUnixMs > c.lease.ExpiresAtUnixMs {
		c.lease.ExpiresAtUnixMs = p.ConnectionLeaseExpiresAtUnixMs
	}
	c.renewPending = nil
	kick(c.leaseKick)
	return nil
}

// Run supervises the connection until a terminal condition: ErrRevoked
// (exit 0), ErrRevokeEpoch, ErrLeaseExpired (LeaseExpiredCode),
// ErrReconnectGraceExceeded, ErrReconnectDeadlineExceeded, ErrTicketConsumed
// (fail closed), an error from a hook, or ctx's end. State (the outbox, the
// journal) is the caller's and is never touched here.
func (c *Client) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	authed := make(chan *Conn)
	need := make(chan struct{}, 1)
	d := &dispatcher{kick: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	wg.Add(2)
	if c.cfg.Dialer != nil {
		go func() { defer wg.Done(); c.dialLoop(ctx, need, authed) }()
	} else {
		go func() { defer wg.Done(); c.acceptLoop(ctx, authed) }()
	}
	go func() { defer wg.Done(); c.dispatchLoop(ctx, d) }()

	var cur *Conn
	defer func() {
		cancel()
		if cur != nil {
			cur.l.close(nil)
		}
		wg.Wait()
		c.mu.Lock()
		c.current = nil
		c.mu.Unlock()
	}()

	everAuthed := false
	disconnectedAt := c.clk.Now()
	var sched leaseSchedule
	scheduleRenew := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		sched.plan(c.clk.Now(), c.lease)
	}
	kick(need)
	for {
		now := c.clk.Now()
		wake := time.Duration(-1)
		consider := func(d time.Duration) {
			if wake < 0 || d < wake {
				wake = d
			}
		}
		c.mu.Lock()
		left, leased := leaseLeft(now, c.lease)
		c.mu.Unlock()
		if leased {
			if left <= 0 {
				c.log.Error("connection lease expired", "code", LeaseExpiredCode)
				return fmt.Errorf("run client: %s: %w", LeaseExpiredCode, ErrLeaseExpired)
			}
			consider(left)
		}
		if cur == nil && everAuthed && c.cfg.ReconnectGrace > 0 {
			left := disconnectedAt.Add(c.cfg.ReconnectGrace).Sub(now)
			if left <= 0 {
				return fmt.Errorf("run client: %w", ErrReconnectGraceExceeded)
			}
			consider(left)
		}
		if cur == nil && !c.cfg.Deadline.IsZero() {
			left := c.cfg.Deadline.Sub(now)
			if left <= 0 {
				return fmt.Errorf("run client: %w", ErrReconnectDeadlineExceeded)
			}
			consider(left)
		}
		if due, planned := sched.renewDue(now); cur != nil && planned {
			if due {
				c.sendRenew(cur)
				scheduleRenew() // the resend, unless lease_renewed comes first
			}
			consider(sched.untilRenew(now))
		}
		var timer <-chan time.Time
		var t clock.Timer
		if wake >= 0 {
			t = c.clk.NewTimer(wake)
			timer = t.C()
		}
		var curDone <-chan struct{}
		if cur != nil {
			curDone = cur.Done()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-c.fatal:
			if errors.Is(err, ErrLeaseExpired) {
				return fmt.Errorf("run client: %s: %w", LeaseExpiredCode, err)
			}
			return fmt.Errorf("run client: %w", err)
		case conn := <-authed:
			if cur != nil {
				c.log.Info("newer authenticated connection supersedes the current one")
				cur.l.close(errSuperseded)
			}
			cur = conn
			everAuthed = true
			c.mu.Lock()
			c.current = conn
			c.mu.Unlock()
			d.set(conn)
			scheduleRenew()
			c.log.Info("connection authenticated", "connectionId", conn.sess.ConnectionID, "version", conn.sess.Version)
		case <-curDone:
			err := cur.l.Err()
			c.log.Warn("connection lost", "err", err)
			cur.l.close(nil)
			cur = nil
			c.mu.Lock()
			c.current = nil
			c.mu.Unlock()
			disconnectedAt = c.clk.Now()
			if c.cfg.OnLost != nil {
				c.cfg.OnLost(err)
			}
			kick(need)
		case <-c.leaseKick:
			scheduleRenew()
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// errSuperseded ends a connection replaced by a newer authenticated one.
var errSuperseded = errors.New("superseded by a newer connection")

// sendRenew sends lease_renew on the priority lane: the held expiry and
// epoch, or the outstanding request again, unchanged (prp.md §5).
func (c *Client) sendRenew(cur *Conn) {
	c.mu.Lock()
	if c.renewPending == nil {
		c.renewPending = &LeaseRenewPayload{
			ConnectionLeaseExpiresAtUnixMs: c.lease.ExpiresAtUnixMs,
			ConnectionLeaseRevocationEpoch: c.lease.RevocationEpoch,
		}
	}
	p := *c.renewPending
	c.mu.Unlock()
	env, err := cur.sess.NewControl(KindLeaseRenew, p)
	if err == nil {
		var b []byte
		if b, err = MarshalEnvelope(env); err == nil {
			err = cur.l.sendPriority(b)
		}
	}
	if err != nil {
		c.log.Warn("lease renewal not sent", "err", err)
	}
}

// attemptCtx bounds one connect and handshake by the lifetime deadline and the lease expiry.
func (c *Client) attemptCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	dl := c.cfg.Deadline
	c.mu.Lock()
	if c.lease != nil {
		if e := time.UnixMilli(c.lease.ExpiresAtUnixMs); dl.IsZero() || e.Before(dl) {
			dl = e
		}
	}
	c.mu.Unlock()
	if dl.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, dl)
}

// fatalHandshake reports a handshake failure that must end Run.
func fatalHandshake(err error) bool {
	return errors.Is(err, ErrTicketConsumed) || errors.Is(err, ErrLeaseExpired) || errors.Is(err, ErrNoCredential)
}

// handshakeFailed sorts a failed handshake: fatal ones end Run.
func (c *Client) handshakeFailed(err error) (fatal bool) {
	if fatalHandshake(err) {
		c.failFatal(err)
		return true
	}
	c.log.Warn("handshake failed; retrying", "err", err)
	return false
}

func (c *Client) dialLoop(ctx context.Context, need <-chan struct{}, authed chan<- *Conn) {
	bo := Backoff{Base: c.cfg.ReconnectDelay}
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-need:
		}
		if !first && !sleepCtx(ctx, c.clk, c.cfg.ReconnectDelay) { // after a drop: base once
			return
		}
		first = false
		for {
			conn, err := c.dialOnce(ctx)
			if err == nil {
				bo.Reset()
				select {
				case authed <- conn:
				case <-ctx.Done():
					conn.l.close(nil)
					return
				}
				break
			}
			if ctx.Err() != nil || c.handshakeFailed(err) {
				return
			}
			if !sleepCtx(ctx, c.clk, bo.Next()) {
				return
			}
		}
	}
}

func (c *Client) dialOnce(ctx context.Context) (*Conn, error) {
	actx, cancel := c.attemptCtx(ctx)
	defer cancel()
	act := newActivityOn(c.clk)
	ws, err := c.cfg.Dialer.dial(actx, act, c.cfg.MaxFrameBytes)
	if err != nil {
		return nil, err
	}
	sess, w, err := c.handshake(actx, ws)
	if err != nil {
		_ = ws.Close()
		return nil, err
	}
	return c.adopt(ws, act, sess, w), nil
}

// sleepCtx waits d on clk or until ctx ends; false means ctx ended.
func sleepCtx(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
