package prp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
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
	// errLeaseRenewed reports a lease_renewed that does not answer the outstanding renewal.
	errLeaseRenewed = errors.New("unexpected lease_renewed")
	// ErrRevokeEpoch: a revocation must advance the epoch. The runner ends
	// on a revoke that does not; the core refuses to issue one.
	ErrRevokeEpoch = errors.New("revocation epoch must advance")
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

	MaxFrameBytes  int           // default defaultMaxFrameBytes
	PingInterval   time.Duration // default defaultPingInterval
	SilenceTimeout time.Duration // default DefaultSilenceTimeout
	ReconnectDelay time.Duration // backoff base; default defaultReconnectDelay
	ReconnectGrace time.Duration // 0: no grace
	Deadline       time.Time     // lifetime end; zero: unlimited

	// IndexedState (--indexed-state) makes every handshake require the
	// challenge's capability echoes (durability.md §1.2).
	IndexedState bool
	// SendFrameLimit and ReceiveFrameLimit lower this side's secure-channel
	// frame bounds (tests only: durability.md §11 scenarios 8 and 26);
	// 0 means MaxSecureChannelFrames.
	SendFrameLimit, ReceiveFrameLimit uint64
	// SendQueue lowers the link's send queue (tests only: a core that
	// stops reading fills it after a few events); 0 means SendQueueLen.
	SendQueue int

	// Resume reports the cursors for auth_hello. Nil: zero cursors.
	Resume func() Resume
	// Pong reports the pong payload. Nil: an empty "ready" pong.
	Pong func() PongPayload
	// OnAuthenticated runs for each new authenticated connection on its
	// command routine, before any of its commands: the place to apply
	// welcome.AckedSourceSeq, replay the unacknowledged outbox and admit
	// the welcome's pending command. The connection's acks may be applied
	// while it runs: they answer frames sent on this connection, which the
	// hook sends only after applying the welcome's cursor. It may start
	// while the previous connection's command routine still runs a command
	// (whose wait may need this connection: provider output gated on ACKs,
	// prp.md §8.5); before it admits a command it calls Conn.AwaitPrevious.
	// This connection's queued commands start only after that routine
	// returned.
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
	// OnCommandArrived sees every command frame the reader accepts, as it
	// arrives, before it queues behind the command running on the command
	// routine: the place to notice a stop that must preempt a command
	// blocked on something other than ctx. It runs on the reader goroutine
	// and must not block; it may not keep env.
	OnCommandArrived func(env *Envelope)
	// OnEnding receives the error Run is about to return, once, before Run
	// waits for the routines of the current connection: a hook blocked on
	// something other than ctx (a state write waiting for disk space) is
	// released here, since its routine must end for Run to return. It runs
	// on Run's goroutine and must not block.
	OnEnding func(err error)
	// Deferral, when set, reports whether the owner defers inbound frames
	// (durability.md §6.2 item 2: a state write waits for disk space, so
	// OnControl's routines are blocked), with the bounds of a valid ACK.
	// While it does: an ACK is checked at arrival (ErrDeferredAck is
	// fatal); consecutive ACKs still waiting for the ack routine collapse
	// into the newest; and once MaxDeferredFrames frames or
	// MaxDeferredBytes bytes are unsettled (forwarded, and not yet applied
	// or, for a command, not yet returned from its handler) the reader
	// stops reading the socket until frames settle or the deferral ends.
	// No deferred frame is dropped: each reaches OnControl in arrival
	// order. It runs on the reader and must not block.
	Deferral func() Deferral
	// OnReadHeld, when set, observes the reader stopping at the deferral
	// bound, with the unsettled frames and bytes (logs, tests). It runs on
	// the reader and must not block.
	OnReadHeld func(frames int, bytes int64)
	// HoldReconnect, when set, is asked before each dial (dial mode) and
	// before each accepted peer's handshake (listen mode): while it reports
	// true, the client neither connects nor authenticates a peer (a held
	// peer waits, unanswered, or gives up), so it does not renew the lease,
	// and the lease's expiry and the lifetime deadline still end Run. It
	// must not block.
	HoldReconnect func() bool

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

	// mu guards identity through current below; leaseKick and fatal are
	// fixed by NewClient.
	mu sync.Mutex
	// identity is the identity authenticated as; a warm rotation replaces
	// it (BeginWarmActivation). dialer likewise (a new connectUrl).
	identity Identity
	dialer   *Dialer
	// warm is the receipt being activated: while set, every handshake
	// names its warmTransitionId and expects it back in the welcome.
	warm         *WarmTransition
	ticket       string
	lease        *Lease
	renewPending *LeaseRenewPayload // the outstanding lease_renew, resent as is
	current      *Conn
	leaseKick    chan struct{}
	fatal        chan error
	// rekeyNow says the last connection ended at this side's frame bound:
	// the next dial skips the base delay (durability.md §2.2 item 2).
	rekeyNow atomic.Bool
}

// NewClient checks cfg.
func NewClient(cfg ClientConfig) (*Client, error) {
	if (cfg.Dialer == nil) == (cfg.Listener == nil) {
		return nil, errors.New("new client: exactly one of dialer and listener")
	}
	if cfg.Ticket == "" && cfg.Lease == nil {
		return nil, fmt.Errorf("new client: %w", errNoCredential)
	}
	if cfg.MaxFrameBytes == 0 {
		cfg.MaxFrameBytes = defaultMaxFrameBytes
	}
	if !validMaxFrameBytes(cfg.MaxFrameBytes) {
		return nil, errors.New("new client: max frame bytes outside 1 KiB-16 MiB")
	}
	if cfg.ReconnectDelay <= 0 {
		cfg.ReconnectDelay = defaultReconnectDelay
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Client{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "prp.client"),
		clk:       clock.Or(cfg.Clock),
		ticket:    cfg.Ticket,
		identity:  cfg.Identity,
		dialer:    cfg.Dialer,
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

// Identity returns the identity the Client authenticates as.
func (c *Client) Identity() Identity {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.identity
}

// BeginWarmActivation switches the Client to a warm transition's new
// identity (prp.md §9.5 step 4): every later handshake authenticates as
// r.NewIdentity with the held lease, names r's warmTransitionId and
// accepts only a welcome with phase "activated" and exactly r. dialer,
// when set, replaces the dial target (the new run's connectUrl); in listen
// mode the caller rotates the Listener's path. The current connection, if
// any, is dropped so the next one activates.
func (c *Client) BeginWarmActivation(r WarmTransition, dialer *Dialer) error {
	c.mu.Lock()
	if c.lease == nil {
		c.mu.Unlock()
		return fmt.Errorf("begin warm activation: %w: no lease held", ErrWarmTransition)
	}
	if r.LeaseID != c.lease.ID {
		c.mu.Unlock()
		return fmt.Errorf("begin warm activation: %w: receipt names another lease", ErrWarmTransition)
	}
	if dialer != nil && c.cfg.Dialer == nil {
		c.mu.Unlock()
		return fmt.Errorf("begin warm activation: %w: a dialer in listen mode", ErrWarmTransition)
	}
	c.identity, c.warm = r.NewIdentity, &r
	if dialer != nil {
		c.dialer = dialer
	}
	c.renewPending = nil // the core renews nothing inside a transition (prp.md §5)
	cur := c.current
	c.mu.Unlock()
	if cur != nil {
		cur.l.fail(errWarmRotation)
	}
	return nil
}

// EndWarmActivation clears the transition once warm_transition_activated
// was acknowledged: later reconnects are plain lease reconnects.
func (c *Client) EndWarmActivation() {
	c.mu.Lock()
	c.warm = nil
	c.mu.Unlock()
}

// errWarmRotation ends the old authority's connection at a warm rotation.
var errWarmRotation = errors.New("connection closed for a warm rotation")

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
		Identity: c.identity, RunnerVersion: c.cfg.RunnerVersion, RunnerDigest: c.cfg.RunnerDigest,
		Ticket: c.ticket, RenewalOutstanding: c.renewPending != nil, Rand: c.cfg.Rand, Now: c.clk.Now,
		IndexedState: c.cfg.IndexedState, SendFrameLimit: c.cfg.SendFrameLimit, ReceiveFrameLimit: c.cfg.ReceiveFrameLimit,
	}
	if c.warm != nil {
		r := *c.warm
		h.WarmTransitionID, h.WarmReceipt = r.TransitionID, &r
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
		ws.setMaxFrameBytes(min(max(w.MaxFrameBytes, minMaxFrameBytes), maxMaxFrameBytes))
	}
	d := newDeferral(c.cfg.Deferral, c.clk, c.cfg.OnReadHeld)
	conn := &Conn{sess: sess, welcome: w, d: d}
	win := newSendWindow()
	conn.l = startLink(ws, act, sess, linkConfig{
		PingInterval:   c.cfg.PingInterval,
		SilenceTimeout: c.cfg.SilenceTimeout,
		Inspect: func(pt []byte) (FrameAction, any, error) {
			act, env, err := c.inspect(sess, pt)
			if err != nil || act != FrameForward {
				return act, nil, err
			}
			if env.Kind == KindAck {
				// The window only paces: a malformed ack is the ack
				// routine's to reject (prp.md §8.4), so it is ignored here.
				var p AckPayload
				if env.DecodePayload(&p) == nil {
					if err := d.checkAck(p.AckedSourceSeq); err != nil {
						c.failFatal(err)
						return 0, nil, err
					}
					win.ack(p.AckedSourceSeq)
				}
			}
			in := &inbound{env: env, size: int64(len(pt))}
			d.arrive(in)
			return act, in, nil
		},
		Gate:      d.gate,
		Merge:     d.merge,
		Window:    win,
		SendQueue: c.cfg.SendQueue,
		Pong:      func() ([]byte, error) { return c.pong(sess) },
		PongSent:  c.cfg.pongSent,
		Logger:    c.log,
		// A rekey is announced (beyond: the reference runner just drops):
		// the core then sees a plain Close 1012, as from its own bound.
		RekeyClose: RekeyCloseFrame,
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
func (c *Client) inspect(sess *Session, pt []byte) (FrameAction, *Envelope, error) {
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
	case KindCommandEpochRotate, KindEventEpochCommitted:
		// runnerd negotiates no epochs (level D1), so neither kind can be
		// meant for it: fatal, state intact (durability.md §1.4).
		err := fmt.Errorf("inspect frame: %w: %s", ErrUnnegotiatedEpoch, env.Kind)
		c.failFatal(err)
		return 0, nil, err
	case KindLeaseRenewed:
		return FrameConsumed, nil, c.applyRenewed(env)
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
	if env.Kind == KindCommand && c.cfg.OnCommandArrived != nil {
		c.cfg.OnCommandArrived(env)
	}
	return FrameForward, env, nil // json.Unmarshal copied every field: env owns its memory
}

func (c *Client) applyRenewed(env *Envelope) error {
	var p LeaseRenewedPayload
	if err := env.DecodePayload(&p); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.ConnectionLeaseRevocationEpoch != c.lease.RevocationEpoch {
		return fmt.Errorf("apply lease_renewed: %w", errLeaseRenewed)
	}
	if c.renewPending == nil || p.PreviousExpiresAtUnixMs != c.renewPending.ConnectionLeaseExpiresAtUnixMs {
		// A resent lease_renew gets a second reply; one that grants nothing
		// beyond the held expiry is a stale duplicate, not a fault.
		if p.ConnectionLeaseExpiresAtUnixMs <= c.lease.ExpiresAtUnixMs {
			return nil
		}
		return fmt.Errorf("apply lease_renewed: %w", errLeaseRenewed)
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
func (c *Client) Run(ctx context.Context) (runErr error) {
	ctx, cancel := context.WithCancel(ctx)
	authed := make(chan *Conn)
	s := &supervisor{c: c, need: make(chan struct{}, 1), d: &dispatcher{kick: make(chan struct{}, 1)}}
	var wg sync.WaitGroup
	wg.Add(2)
	if c.cfg.Dialer != nil {
		go func() { defer wg.Done(); c.dialLoop(ctx, s.need, authed) }()
	} else {
		go func() { defer wg.Done(); c.acceptLoop(ctx, authed) }()
	}
	go func() { defer wg.Done(); c.dispatchLoop(ctx, s.d) }()

	defer func() {
		cancel()
		if c.cfg.OnEnding != nil {
			c.cfg.OnEnding(runErr)
		}
		if s.cur != nil {
			s.cur.l.close(nil)
		}
		wg.Wait()
		c.setCurrent(nil)
	}()

	s.disconnectedAt = c.clk.Now()
	kick(s.need)
	for {
		wake, err := s.nextWake(c.clk.Now())
		if err != nil {
			return err
		}
		if err := s.await(ctx, authed, wake); err != nil {
			return err
		}
	}
}

// supervisor is Run's loop state. Only Run's goroutine touches it; what
// other goroutines read (the current connection, the lease) stays under
// Client.mu.
type supervisor struct {
	c    *Client
	need chan struct{} // asks dialLoop for a connection
	d    *dispatcher

	cur            *Conn // the authenticated connection, nil while between connections
	everAuthed     bool  // the reconnect grace applies only once a connection was had
	disconnectedAt time.Time
	sched          leaseSchedule
}

// nextWake checks the terminal deadlines at now, in their order (lease
// expiry, reconnect grace, lifetime deadline), sends a due lease renewal,
// and returns how long the loop may sleep: -1 for until something happens.
func (s *supervisor) nextWake(now time.Time) (time.Duration, error) {
	c := s.c
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
			return 0, fmt.Errorf("run client: %s: %w", LeaseExpiredCode, ErrLeaseExpired)
		}
		consider(left)
	}
	if left, ok := s.graceLeft(now); ok {
		if left <= 0 {
			return 0, fmt.Errorf("run client: %w", ErrReconnectGraceExceeded)
		}
		consider(left)
	}
	if left, ok := s.deadlineLeft(now); ok {
		if left <= 0 {
			return 0, fmt.Errorf("run client: %w", ErrReconnectDeadlineExceeded)
		}
		consider(left)
	}
	if due, planned := s.sched.renewDue(now); s.cur != nil && planned {
		if due {
			c.sendRenew(s.cur)
			s.scheduleRenew() // the resend, unless lease_renewed comes first
		}
		consider(s.sched.untilRenew(now))
	}
	return wake, nil
}

// graceLeft is what remains of the reconnect grace while disconnected after
// a first authentication; ok is false when no grace runs.
func (s *supervisor) graceLeft(now time.Time) (left time.Duration, ok bool) {
	if s.cur != nil || !s.everAuthed || s.c.cfg.ReconnectGrace <= 0 {
		return 0, false
	}
	return s.disconnectedAt.Add(s.c.cfg.ReconnectGrace).Sub(now), true
}

// deadlineLeft is what remains before the lifetime deadline while
// disconnected; ok is false when connected or without a deadline.
func (s *supervisor) deadlineLeft(now time.Time) (left time.Duration, ok bool) {
	if s.cur != nil || s.c.cfg.Deadline.IsZero() {
		return 0, false
	}
	return s.c.cfg.Deadline.Sub(now), true
}

// scheduleRenew plans the next lease renewal from the held lease.
func (s *supervisor) scheduleRenew() {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.sched.plan(s.c.clk.Now(), s.c.lease)
}

// await waits for one event (or wake, when not negative) and applies it. It
// returns an error only for a terminal one: ctx's end or a fatal report.
func (s *supervisor) await(ctx context.Context, authed <-chan *Conn, wake time.Duration) error {
	c := s.c
	var timer <-chan time.Time
	if wake >= 0 {
		t := c.clk.NewTimer(wake)
		defer t.Stop()
		timer = t.C()
	}
	var curDone <-chan struct{}
	if s.cur != nil {
		curDone = s.cur.Done()
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
		s.handOver(conn)
	case <-curDone:
		s.lose()
	case <-c.leaseKick:
		s.scheduleRenew()
	case <-timer:
	}
	return nil
}

// handOver makes conn the current connection, superseding any older one
// (newest wins, prp.md §6), and plans its lease renewal.
func (s *supervisor) handOver(conn *Conn) {
	c := s.c
	if s.cur != nil {
		c.log.Info("newer authenticated connection supersedes the current one")
		s.cur.l.close(errSuperseded)
	}
	s.cur = conn
	s.everAuthed = true
	c.setCurrent(conn)
	s.d.set(conn)
	s.scheduleRenew()
	c.log.Info("connection authenticated", "connectionId", conn.sess.ConnectionID, "version", conn.sess.Version)
}

// lose forgets the ended current connection, starts the reconnect grace,
// tells the owner, and asks for a new connection.
func (s *supervisor) lose() {
	c := s.c
	err := s.cur.l.Err()
	c.log.Warn("connection lost", "err", err)
	s.cur.l.close(nil)
	s.cur = nil
	c.setCurrent(nil)
	s.disconnectedAt = c.clk.Now()
	if errors.Is(err, ErrRekeyRequired) {
		// This side's own frame bound: nothing is wrong with the peer, so
		// the fresh keys are fetched at once (durability.md §2.2 item 2).
		c.rekeyNow.Store(true)
	}
	if c.cfg.OnLost != nil {
		c.cfg.OnLost(err)
	}
	kick(s.need)
}

// setCurrent publishes the connection Send writes to.
func (c *Client) setCurrent(conn *Conn) {
	c.mu.Lock()
	c.current = conn
	c.mu.Unlock()
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
	return errors.Is(err, ErrTicketConsumed) || errors.Is(err, ErrLeaseExpired) || errors.Is(err, errNoCredential)
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

// holdReconnectPoll is how often a held dial or handshake asks
// HoldReconnect again.
const holdReconnectPoll = 100 * time.Millisecond

// awaitReconnect waits while HoldReconnect reports true; false means ctx
// ended first (Run is ending: the lease's expiry, the lifetime deadline).
func (c *Client) awaitReconnect(ctx context.Context) bool {
	for c.cfg.HoldReconnect != nil && c.cfg.HoldReconnect() {
		if !sleepCtx(ctx, c.clk, holdReconnectPoll) {
			return false
		}
	}
	return true
}

func (c *Client) dialLoop(ctx context.Context, need <-chan struct{}, authed chan<- *Conn) {
	bo := backoff{Base: c.cfg.ReconnectDelay}
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-need:
		}
		// After a drop: the base delay once; none after this side's rekey.
		if !first && !c.rekeyNow.Swap(false) && !sleepCtx(ctx, c.clk, c.cfg.ReconnectDelay) {
			return
		}
		first = false
		for {
			if !c.awaitReconnect(ctx) {
				return
			}
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
			if !sleepCtx(ctx, c.clk, bo.next()) {
				return
			}
		}
	}
}

func (c *Client) dialOnce(ctx context.Context) (*Conn, error) {
	actx, cancel := c.attemptCtx(ctx)
	defer cancel()
	act := newActivityOn(c.clk)
	c.mu.Lock()
	dialer := c.dialer
	c.mu.Unlock()
	ws, err := dialer.dial(actx, act, c.cfg.MaxFrameBytes)
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
