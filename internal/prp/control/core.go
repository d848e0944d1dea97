package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/outputbody"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// Core-side bounds and defaults (prp.md §3, §7.1, §8.4, §12).
const (
	// DefaultTicketTTL is the bootstrap ticket TTL the core mints with (LT uses 60 s; CP allows 1–60 s).
	DefaultTicketTTL = 60 * time.Second
	// MaxCommands bounds the core journal (CP: 500 commands).
	MaxCommands = 500
	// coreHandshakeTimeout bounds the core half of one handshake: three
	// messages, each within AuthMessageTimeout (R-transport AUTH_TIMEOUT).
	coreHandshakeTimeout = 3 * prp.AuthMessageTimeout
	// isoMillisLayout is JavaScript's Date.prototype.toISOString.
	isoMillisLayout = "2006-01-02T15:04:05.000Z"
)

// Core-side protocol faults; each closes the runner's connection (prp.md §8.4, §7.3).
var (
	// errSourceSeq: an event whose sourceSeq is neither acked+1 nor a duplicate.
	errSourceSeq = errors.New("event sourceSeq is not contiguous")
	// errSourceEventReplayConflict is source_event_replay_conflict.
	errSourceEventReplayConflict = errors.New("source_event_replay_conflict")
	// errCommandResult: a result for an unknown command or a conflicting one for a settled command.
	errCommandResult = errors.New("command result does not match the journal")
	// errLeaseNotUsable: the connection's lease expired or was revoked (scenario 27).
	errLeaseNotUsable = errors.New("connection lease expired or revoked")
	// errJournalFull: more than MaxCommands commands queued.
	errJournalFull = errors.New("core command journal full")
)

// errSuperseded ends a connection replaced by a newer authenticated one
// (newest wins).
var errSuperseded = errors.New("superseded by a newer connection")

// Config configures the core (controller) half.
type Config struct {
	Identity                    prp.Identity
	RunnerVersion, RunnerDigest string
	Store                       *MemoryCredentialStore // nil: a new one
	LeaseTTL                    time.Duration          // 0: DefaultLeaseTTL
	TicketTTL                   time.Duration          // 0: DefaultTicketTTL
	MaxFrameBytes               int                    // announced in the welcome; 0: defaultMaxFrameBytes
	PingInterval                time.Duration          // WebSocket Ping when idle; 0: DefaultPingInterval
	SilenceTimeout              time.Duration          // 0: DefaultSilenceTimeout
	Logger                      *slog.Logger
	// Outbound, when set, sees every control envelope's payload before
	// the core sends it (the welcome included) and returns the payload to
	// send; an error drops the connection instead, as a lost reply would.
	// It runs on the sending goroutine and must not block or call the Core.
	// Fault injection and observation: the core does not depend on it.
	Outbound func(kind string, payload any) (any, error)

	// Indexed plays a core with an indexed authority store
	// (PAPERCLIP_NATIVE_INDEXED_STATE=1, durability.md §1.1, §1.2): a hello
	// without both capability claims is refused before any challenge, and
	// the challenge echoes them with a commandResume.
	Indexed bool
	// FrameLimit lowers the core's secure-channel frame bound in each
	// direction (CP secureChannelFrameLimit, MinFrameLimit..
	// prp.MaxSecureChannelFrames; 0 means the maximum). At it the core
	// closes instead of sending, and closes unread a frame that arrives,
	// the way RekeyClose says (durability.md §2.1).
	FrameLimit uint64
	// RekeyClose is how a connection ends at FrameLimit: prp.RekeyDrop (the
	// dial-mode raw wire, the default) or prp.RekeyCloseFrame (Close 1012,
	// the listen-mode ws wire).
	RekeyClose prp.RekeyClose
	// Challenge, when set, edits the auth_challenge payload before it is
	// signed, so the runner's field checks are tested behind a valid proof
	// (fault injection, like Outbound).
	Challenge func(payload map[string]any)
}

// MinFrameLimit is the lowest FrameLimit a core accepts (CP
// secureChannelFrameLimit: 4..1,048,576; durability.md §2.1).
const MinFrameLimit = 4

// Core is the controller half of PRP used by tests and prpctl: it mints
// tickets, holds leases, queues commands (only the lowest pending one is
// delivered; the welcome re-delivers it), admits events with cumulative
// ACKs and keeps the newest authenticated connection (prp.md §3–§8).
// Safe for concurrent use.
type Core struct {
	cfg   Config
	store *MemoryCredentialStore
	log   *slog.Logger

	// mu guards every field below but wg, and the fields of the coreConns
	// and coreCommands the core holds that say so. Helpers that need it
	// held end in Locked. It is never held across a send: a send only
	// queues on a link, and links never call back into the core.
	mu sync.Mutex
	// identity is the registration the runner authenticates as; a warm
	// rotation replaces it (cfg.Identity is only the first one).
	identity prp.Identity
	// warm is the pending warm transition (prp.md §9.5): set when the
	// run.attach result is admitted, cleared by warm_transition_activated.
	warm *coreWarm
	// activated is the last transition warm_transition_activated applied:
	// its ack may have died with the connection, so the runner, still
	// activating, reconnects naming it and gets the activated welcome and
	// the ack again, nothing applied twice. A new transition clears it.
	activated *prp.WarmTransition
	// next journals the commands queued while a transition is pending:
	// they belong to the new identity's journal and wait for activation.
	next []*coreCommand
	// acking is the connection whose warm_transition_activated_ack is
	// being sent: no command goes out before it, since the runner takes
	// the new identity's commands only after that ack (prp.md §9.5).
	acking   *coreConn
	epochs   []Epoch
	conns    map[*coreConn]struct{}
	current  *coreConn
	connSeq  int
	envSeq   int
	commands []*coreCommand
	acked    int64
	events   []json.RawMessage // committed event envelopes, as received
	canon    [][]byte          // their canonical forms
	// bodies holds the committed output.body.chunk payloads by bodyId,
	// in commit order; bodyOrder the bodyIds in order of first chunk.
	bodies    map[string][]outputbody.Chunk
	bodyOrder []string
	results   map[string]json.RawMessage // settled results by commandId; replaced, never mutated
	issued    int                        // commands queued over all epochs (the commandId counter)
	pongs     int
	lastPong  prp.PongPayload
	auths     int
	renewals  int
	frames    []ConnFrames  // per ended connection, in the order they ended
	changed   chan struct{} // closed and replaced by notifyLocked
	closed    bool
	// readHold, while non-nil, stops every connection's reader before its
	// next frame (HoldReads); closing it resumes them.
	readHold chan struct{}
	// wg counts the dispatch goroutines: Add under mu once closed is
	// known false, so Close (which sets closed first) waits for them all.
	wg sync.WaitGroup
}

// coreCommand is one journaled command. Its fields are guarded by
// Core.mu; cmd and raw change only when prepareWarm moves a command that
// was never delivered into the new identity's journal.
type coreCommand struct {
	cmd    prp.Command
	raw    json.RawMessage
	result json.RawMessage // canonical command_result payload once settled
}

// coreWarm is the core half of a pending warm transition.
type coreWarm struct {
	receipt prp.WarmTransition
	// activating: a connection authenticated with the receipt's
	// warmTransitionId and got the "activated" welcome.
	activating bool
}

// Epoch is an archived authority epoch: the journal and events of one
// identity before a warm rotation replaced it (server: authority-epochs/).
type Epoch struct {
	Identity       prp.Identity
	AckedSourceSeq int64
	Events         []json.RawMessage
	Results        map[string]json.RawMessage
	Receipt        prp.WarmTransition // the transition that ended the epoch
}

// coreConn is one authenticated connection. l, sess and lease are fixed
// at authentication; fenced, replayOnly and activation are guarded by
// Core.mu.
type coreConn struct {
	l     *prp.Link
	sess  *prp.Session
	lease prp.Lease
	// fenced: runner.suspend or runner.shutdown was sent on this connection;
	// it gets no lease_renewed and no further command (prp.md §13.1).
	fenced bool
	// ackOwed: events were admitted since the last ack (dispatch goroutine only).
	ackOwed bool
	// replayOnly: the run.attach result was acknowledged on this
	// connection; the old authority sends it nothing more (CP replayOnly).
	replayOnly bool
	// activation is the receipt this connection authenticated to activate.
	activation *prp.WarmTransition
	// revoking: Revoke has revoked this connection's lease and its revoke
	// frame may not be on the wire yet. A frame the runner sent meanwhile
	// is ignored, not answered by closing: a close then could overtake the
	// revoke, and the runner would see a plain disconnect.
	revoking atomic.Bool
}

// NewCore returns a core for one runner registration.
func NewCore(cfg Config) *Core {
	if cfg.Store == nil {
		cfg.Store = NewMemoryCredentialStore()
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.TicketTTL == 0 {
		cfg.TicketTTL = DefaultTicketTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.FrameLimit != 0 {
		cfg.FrameLimit = min(max(cfg.FrameLimit, MinFrameLimit), prp.MaxSecureChannelFrames)
	}
	return &Core{
		cfg: cfg, store: cfg.Store, log: cfg.Logger.With("component", "prp.core"), identity: cfg.Identity,
		conns: map[*coreConn]struct{}{}, changed: make(chan struct{}), results: map[string]json.RawMessage{},
	}
}

// Store returns the credential store.
func (c *Core) Store() *MemoryCredentialStore { return c.store }

// MintTicket issues a one-use bootstrap ticket.
func (c *Core) MintTicket() (string, error) { return c.store.IssueTicket(c.cfg.TicketTTL, time.Now()) }

// notifyLocked wakes every Wait; c.mu held.
func (c *Core) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Wait blocks until cond (evaluated under the core's lock) holds or ctx ends.
func (c *Core) Wait(ctx context.Context, cond func(s Snapshot) bool) error {
	for {
		c.mu.Lock()
		ok := cond(c.snapshotLocked())
		ch := c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait core: %w", ctx.Err())
		}
	}
}

// Snapshot is what a test observes of the core.
type Snapshot struct {
	AckedSourceSeq  int64
	Events          []json.RawMessage
	Results         map[string]json.RawMessage // by commandId; shared, read-only
	Pongs           int
	LastPong        prp.PongPayload // the payload of the latest pong
	Renewals        int             // lease_renew requests applied
	Authentications int
	Connected       bool
	// Connections counts the authenticated connections the core holds: a
	// superseded one until its link has ended (newest wins).
	Connections  int
	ConnectionID string
	Lease        prp.Lease // the current connection's lease (no token)
	// Identity is the registration the runner authenticates as now.
	Identity prp.Identity
	// Warm is the pending warm transition's receipt; WarmActivating says a
	// connection authenticated to activate it.
	Warm           *prp.WarmTransition
	WarmActivating bool
	// Epochs are the identities a warm rotation replaced, oldest first.
	Epochs []Epoch
	// Frames are the secure frames of each ended connection (the rekey's
	// cost, durability.md §2), in the order the connections ended.
	Frames []ConnFrames
}

// ConnFrames counts one connection's secure frames: Sent by the core (the
// welcome is frame 0) and Received from the runner.
type ConnFrames struct {
	ConnectionID   string
	Sent, Received uint64
}

// Snapshot returns the observable state.
func (c *Core) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshotLocked()
}

func (c *Core) snapshotLocked() Snapshot {
	s := Snapshot{
		AckedSourceSeq: c.acked, Events: c.events[:len(c.events):len(c.events)], // append-only: safe to share
		Results: c.results, Pongs: c.pongs, LastPong: c.lastPong, Renewals: c.renewals, Authentications: c.auths,
		Identity: c.identity, Epochs: c.epochs[:len(c.epochs):len(c.epochs)], Connections: len(c.conns),
		Frames: c.frames[:len(c.frames):len(c.frames)], // append-only: safe to share
	}
	if c.warm != nil {
		r := c.warm.receipt
		s.Warm, s.WarmActivating = &r, c.warm.activating
	}
	if c.current != nil {
		s.Connected, s.ConnectionID = true, c.current.sess.ConnectionID
		s.Lease, _ = c.store.LeaseState(c.current.lease.ID, time.Now())
	}
	return s
}

// ServeHTTP is the dial-target route: the runner dials
// ConnectPath(runId); anything else gets 400 (prp.md §1.1).
func (c *Core) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	paths := []string{prp.ConnectPath(c.identity.RunID)}
	if c.warm != nil { // the new run dials its own route (prp.md §1.1)
		paths = append(paths, prp.ConnectPath(c.warm.receipt.NewIdentity.RunID))
	}
	c.mu.Unlock()
	if r.Method != http.MethodGet || !slices.Contains(paths, r.RequestURI) {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	p, err := prp.AcceptPeer(w, r)
	if err != nil {
		return
	}
	_ = c.serve(context.Background(), p) // a refused runner is logged by serve and retries
}

// Connect is the listen-target mode: the core dials the runner's listener
// (ws:// to loopback in tests) and returns once the handshake has ended.
func (c *Core) Connect(ctx context.Context, url string) error {
	d, err := prp.NewDialer(ctx, prp.DialerConfig{URL: url})
	if err != nil {
		return err
	}
	defer d.CloseIdle()
	return c.ConnectWith(ctx, d)
}

// ConnectWith is Connect through a Dialer the caller built (its transport,
// CA bundle and timeouts).
func (c *Core) ConnectWith(ctx context.Context, d *prp.Dialer) error {
	p, err := d.DialPeer(ctx)
	if err != nil {
		return err
	}
	return c.serve(ctx, p)
}

// serve authenticates one connection and, on success, makes it current
// (closing every other: newest wins) and starts its dispatch goroutine.
func (c *Core) serve(ctx context.Context, ws *prp.PeerConn) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = ws.Close()
		return prp.ErrConnClosed
	}
	c.connSeq++
	connID := "connection_" + strconv.Itoa(c.connSeq)
	c.mu.Unlock()
	c.mu.Lock()
	ident := c.identity
	c.mu.Unlock()
	h := Handshake{
		Identity: ident, RunnerVersion: c.cfg.RunnerVersion, RunnerDigest: c.cfg.RunnerDigest,
		Store: c.store, LeaseTTL: c.cfg.LeaseTTL, MaxFrameBytes: c.cfg.MaxFrameBytes, ConnectionID: connID,
		Outbound: c.cfg.Outbound, Indexed: c.cfg.Indexed, FrameLimit: c.cfg.FrameLimit, Challenge: c.cfg.Challenge,
		AckedSourceSeq: func() int64 { c.mu.Lock(); defer c.mu.Unlock(); return c.acked },
	}
	h.Warm = func(id string) (prp.WarmTransition, bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.warm == nil && c.activated != nil && c.activated.TransitionID == id {
			return *c.activated, true
		}
		if c.warm == nil || c.warm.receipt.TransitionID != id {
			return prp.WarmTransition{}, false
		}
		return c.warm.receipt, true
	}
	var inWelcome *coreCommand // the pending command the welcome carries
	h.PendingCommands = func() []json.RawMessage {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.warm != nil {
			return []json.RawMessage{} // nothing is delivered inside a transition (CP #nextPendingCommand)
		}
		inWelcome = c.lowestPendingLocked()
		if inWelcome == nil {
			return []json.RawMessage{}
		}
		return []json.RawMessage{inWelcome.raw}
	}
	hctx, cancel := context.WithTimeout(ctx, coreHandshakeTimeout)
	sess, hello, err := h.Run(hctx, ws)
	cancel()
	if err != nil {
		_ = ws.Close()
		c.log.Info("runner handshake failed", "err", err)
		return err
	}
	cc := &coreConn{sess: sess, lease: hello.Lease, activation: hello.Warm}
	cc.l = ws.StartLink(sess, prp.LinkConfig{
		PingInterval: c.cfg.PingInterval, SilenceTimeout: c.cfg.SilenceTimeout,
		Inspect: func(pt []byte) (prp.FrameAction, any, error) {
			a, err := c.inspect(cc, pt)
			// handle needs the raw plaintext (events are compared byte for
			// byte after canonicalisation): hand off a copy the reader never touches.
			return a, bytes.Clone(pt), err
		},
		Logger:     c.log,
		RekeyClose: c.cfg.RekeyClose,
	})
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cc.l.Close()
		return prp.ErrConnClosed
	}
	var old []*coreConn
	for o := range c.conns {
		old = append(old, o)
	}
	reactivation := cc.activation != nil && c.warm == nil && c.activated != nil && c.activated.TransitionID == cc.activation.TransitionID
	if cc.activation != nil && !reactivation && (c.warm == nil || c.warm.receipt.TransitionID != cc.activation.TransitionID) {
		c.mu.Unlock()
		cc.l.Close()
		return fmt.Errorf("serve runner: %w: transition settled during the handshake", prp.ErrWarmTransition)
	}
	if cc.activation != nil && !reactivation {
		c.warm.activating = true
	}
	c.conns[cc] = struct{}{}
	c.current = cc
	c.auths++
	c.notifyLocked()
	c.wg.Add(1)
	// A command queued while the handshake ran went to the old connection
	// or nowhere; deliver it here unless the welcome already did.
	missed := c.lowestPendingLocked()
	if missed == inWelcome || c.warm != nil || cc.activation != nil {
		missed = nil // an activating connection takes commands after the activated ack
	}
	c.mu.Unlock()
	for _, o := range old {
		o.l.Fail(errSuperseded) // newest wins (CP, prp.md §6.1)
	}
	if missed != nil {
		_ = c.sendCommand(cc, missed) // a failure ends cc; its dispatch cleans up
	}
	go func() {
		defer c.wg.Done()
		c.dispatch(cc)
	}()
	return nil
}

func (c *Core) lowestPendingLocked() *coreCommand {
	for _, cmd := range c.commands {
		if cmd.result == nil {
			return cmd
		}
	}
	return nil
}

// inspect runs in the core's reader goroutine: pongs are counted as they
// arrive, not after the backlog of events ahead of them is committed, so
// ping latency measures the runner and the wire, not this core's queue.
func (c *Core) inspect(cc *coreConn, pt []byte) (prp.FrameAction, error) {
	c.mu.Lock()
	hold := c.readHold
	c.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if !bytes.Contains(pt, []byte(`"kind":"pong"`)) { // cheap sniff; confirmed below
		return prp.FrameForward, nil
	}
	env, err := prp.DecodeEnvelope(pt)
	if err != nil || env.Kind != prp.KindPong {
		return prp.FrameForward, nil // dispatch rejects or handles it
	}
	if err := prp.ValidateRunnerEnvelope(env, cc.sess); err != nil {
		return 0, err
	}
	if _, ok := c.store.LeaseState(cc.lease.ID, time.Now()); !ok {
		if cc.revoking.Load() {
			return prp.FrameConsumed, nil
		}
		return 0, errLeaseNotUsable
	}
	var p prp.PongPayload
	_ = env.DecodePayload(&p) // a pong is accepted whatever it says (durability.md §6.1)
	c.mu.Lock()
	c.pongs++
	c.lastPong = p
	c.notifyLocked()
	c.mu.Unlock()
	return prp.FrameConsumed, nil
}

// dispatch handles one connection's inbound envelopes until it ends.
func (c *Core) dispatch(cc *coreConn) {
	defer func() {
		cc.l.Close()
		sent, received := cc.sess.FrameCounts() // the link has ended: no goroutine moves the counters
		c.mu.Lock()
		c.frames = append(c.frames, ConnFrames{ConnectionID: cc.sess.ConnectionID, Sent: sent, Received: received})
		delete(c.conns, cc)
		if c.current == cc {
			c.current = nil
		}
		c.notifyLocked()
		c.mu.Unlock()
	}()
	for {
		v, err := cc.l.Recv(context.Background())
		if err != nil {
			return
		}
		if err := c.handle(cc, v.([]byte)); err != nil {
			c.log.Warn("closing runner connection", "err", err)
			cc.l.Fail(err)
			return
		}
		// ACKs are cumulative: one after a burst of events acknowledges it all.
		if cc.ackOwed && cc.l.Pending() == 0 {
			cc.ackOwed = false
			c.mu.Lock()
			acked := c.acked
			c.mu.Unlock()
			if err := c.sendOn(cc, prp.KindAck, "", prp.AckPayload{AckedSourceSeq: acked}); err != nil {
				return
			}
		}
	}
}

func (c *Core) handle(cc *coreConn, pt []byte) error {
	env, err := prp.DecodeEnvelope(pt)
	if err != nil {
		return err
	}
	if err := prp.ValidateRunnerEnvelope(env, cc.sess); err != nil {
		return err
	}
	if _, ok := c.store.LeaseState(cc.lease.ID, time.Now()); !ok {
		if cc.revoking.Load() {
			return nil
		}
		return errLeaseNotUsable // every later frame, lease_renew included (scenario 27)
	}
	switch env.Kind {
	case prp.KindEvent:
		return c.admitEvent(cc, pt, env)
	case prp.KindCommandResult:
		return c.admitResult(cc, env)
	case prp.KindLeaseRenew:
		var p prp.LeaseRenewPayload
		if err := env.DecodePayload(&p); err != nil {
			return err
		}
		c.mu.Lock()
		fenced := cc.fenced || c.warm != nil
		c.mu.Unlock()
		if fenced {
			return nil // no renewal behind a terminal lifecycle command or inside a warm transition (prp.md §5, §13.1)
		}
		r, err := c.store.renewLease(cc.lease.ID, p, c.cfg.LeaseTTL, time.Now())
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.renewals++
		c.notifyLocked()
		c.mu.Unlock()
		return c.sendOn(cc, prp.KindLeaseRenewed, "lease_renewed_"+strconv.FormatInt(p.ConnectionLeaseExpiresAtUnixMs, 10), r)
	case prp.KindWarmTransitionActivated:
		return c.activate(cc, env)
	}
	return nil
}

// activate applies warm_transition_activated (CP): only on the connection
// that authenticated with the receipt, naming its transitionId. The old
// identity's journal and events are archived, the new identity starts a
// fresh one (the commands queued meanwhile), and the next command follows
// the ack.
func (c *Core) activate(cc *coreConn, env *prp.Envelope) error {
	var p prp.WarmTransitionActivatedPayload
	if err := env.DecodePayload(&p); err != nil {
		return err
	}
	c.mu.Lock()
	if cc.activation == nil || cc.activation.TransitionID != p.TransitionID {
		c.mu.Unlock()
		return fmt.Errorf("activate warm transition: %w: not this connection's transition", prp.ErrWarmTransition)
	}
	var r prp.WarmTransition
	switch {
	case c.warm != nil && p.TransitionID == c.warm.receipt.TransitionID:
		r = c.warm.receipt
		c.epochs = append(c.epochs, Epoch{Identity: c.identity, AckedSourceSeq: c.acked, Events: c.events, Results: c.results, Receipt: r})
		c.identity = r.NewIdentity
		c.acked, c.events, c.canon, c.results = 0, nil, nil, map[string]json.RawMessage{}
		c.commands, c.next, c.warm = c.next, nil, nil
		c.activated = &r
	case c.warm == nil && c.activated != nil && p.TransitionID == c.activated.TransitionID:
		r = *c.activated // applied already; its ack was lost: only the ack again
	default:
		c.mu.Unlock()
		return fmt.Errorf("activate warm transition: %w: not this connection's transition", prp.ErrWarmTransition)
	}
	cc.activation = nil
	c.acking = cc
	c.notifyLocked()
	c.mu.Unlock()
	err := c.sendOn(cc, prp.KindWarmTransitionActivatedAck, "activation_ack_"+r.TransitionID,
		prp.WarmTransitionActivatedPayload{TransitionID: r.TransitionID})
	// A command queued meanwhile (QueueCommand held it back) goes now,
	// behind the ack.
	c.mu.Lock()
	c.acking = nil
	next := c.lowestPendingLocked()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if next != nil {
		return c.sendCommand(cc, next)
	}
	return nil
}

// admitEvent applies CP #event: sourceSeq = acked+1 commits and ACKs; a
// duplicate must byte-match after canonicalisation and is re-ACKed. The
// ACK itself is sent by dispatch once the burst is drained; CP sends one per
// event, which the runner's cumulative cursor makes equivalent.
func (c *Core) admitEvent(cc *coreConn, pt []byte, env *prp.Envelope) error {
	var p struct {
		SourceSeq int64           `json:"sourceSeq"`
		EventType string          `json:"eventType"`
		Payload   json.RawMessage `json:"payload"`
	}
	if err := env.DecodePayload(&p); err != nil {
		return err
	}
	var chunk *outputbody.Chunk
	if p.EventType == prp.EventOutputBodyChunk {
		ch, err := admitChunk(p.Payload)
		if err != nil {
			return err
		}
		chunk = &ch
	}
	c.mu.Lock()
	activating := cc.activation != nil
	c.mu.Unlock()
	if activating {
		return fmt.Errorf("admit event: %w: event before warm_transition_activated", prp.ErrWarmTransition)
	}
	canon, err := prp.Canonical(json.RawMessage(pt))
	if err != nil {
		return err
	}
	c.mu.Lock()
	switch {
	case p.SourceSeq == c.acked+1:
		c.events = append(c.events, append(json.RawMessage(nil), pt...))
		c.canon = append(c.canon, canon)
		c.acked = p.SourceSeq
		if chunk != nil {
			c.keepChunkLocked(*chunk)
		}
		c.notifyLocked()
	case p.SourceSeq >= 1 && p.SourceSeq <= c.acked && int(p.SourceSeq) <= len(c.canon):
		if string(c.canon[p.SourceSeq-1]) != string(canon) {
			c.mu.Unlock()
			return errSourceEventReplayConflict
		}
	default:
		c.mu.Unlock()
		return errSourceSeq
	}
	c.mu.Unlock()
	cc.ackOwed = true
	return nil
}

// admitChunk is the server's admission of an output.body.chunk payload
// (workspace.md §7.7): the event-v2 schema's five keys and no other, then
// outputbody.Admit. A refused chunk ends the connection, as the real
// server's commit does.
func admitChunk(raw json.RawMessage) (outputbody.Chunk, error) {
	var c outputbody.Chunk
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("admit event: %w: chunk payload", outputbody.ErrInvalidChunk)
	}
	if err := outputbody.Admit(c); err != nil {
		return c, fmt.Errorf("admit event: %w", err)
	}
	return c, nil
}

func (c *Core) keepChunkLocked(ch outputbody.Chunk) {
	id := ch.Body.BodyID
	if c.bodies == nil {
		c.bodies = map[string][]outputbody.Chunk{}
	}
	if _, ok := c.bodies[id]; !ok {
		c.bodyOrder = append(c.bodyOrder, id)
	}
	c.bodies[id] = append(c.bodies[id], ch)
}

// OutputBody is the server's download of body bodyID from the chunks
// committed so far (workspace.md §7.7, outputbody.Assemble): the whole
// text, or outputbody.ErrNotFound (404), ErrNotComplete, ErrVerification
// or ErrExceedsLength (409).
func (c *Core) OutputBody(bodyID string) (string, error) {
	c.mu.Lock()
	chunks := slices.Clone(c.bodies[bodyID])
	c.mu.Unlock()
	return outputbody.Assemble(bodyID, chunks)
}

// OutputBodyIDs lists the bodies of the committed chunks in order.
func (c *Core) OutputBodyIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.bodyOrder)
}

func (c *Core) admitResult(cc *coreConn, env *prp.Envelope) error {
	var p prp.CommandResultPayload
	if err := env.DecodePayload(&p); err != nil {
		return err
	}
	canon, err := prp.Canonical(env.Payload)
	if err != nil {
		return err
	}
	c.mu.Lock()
	var cmd *coreCommand
	for _, x := range c.commands {
		if x.cmd.CommandID == p.CommandID {
			cmd = x
		}
	}
	switch {
	case cmd == nil || cmd.cmd.ControllerSeq != p.ControllerSeq:
		c.mu.Unlock()
		return errCommandResult
	case cmd.result != nil:
		same := string(cmd.result) == string(canon)
		warm := c.warm
		c.mu.Unlock()
		if !same {
			return errCommandResult
		}
		if warm != nil && warm.receipt.CommandID == p.CommandID && !warm.activating {
			return c.ackWarm(cc, p, warm.receipt) // a replayed attach result gets its receipt again
		}
		return nil // an identical duplicate is counted, nothing more
	case cmd.cmd.Type == prp.CommandRunAttach && p.Status == "completed":
		c.mu.Unlock()
		return c.prepareWarm(cc, cmd, env.Payload, canon, p)
	}
	cmd.result = canon
	results := maps.Clone(c.results) // copy on write: snapshots share the map
	results[p.CommandID] = canon
	c.results = results
	c.notifyLocked()
	next := c.lowestPendingLocked()
	c.mu.Unlock()
	if prp.IsTerminalCommand(p.CommandType) {
		return c.sendOn(cc, prp.KindCommandResultAck, "", prp.CommandResultAckPayload{
			CommandID: p.CommandID, CommandType: p.CommandType, ControllerSeq: int64(p.ControllerSeq), Status: p.Status,
		})
	}
	c.mu.Lock()
	fenced := cc.fenced
	c.mu.Unlock()
	if next != nil && !fenced {
		return c.sendCommand(cc, next)
	}
	return nil
}

// prepareWarm admits a completed run.attach result: it builds the receipt
// from the command, the result, the committed cursor and the lease this
// connection holds, records the transition, and acknowledges the result
// with the receipt. From then on this connection is replay-only.
func (c *Core) prepareWarm(cc *coreConn, cmd *coreCommand, payload json.RawMessage, canon []byte, p prp.CommandResultPayload) error {
	lease, ok := c.store.LeaseState(cc.lease.ID, time.Now())
	if !ok {
		return errLeaseNotUsable
	}
	wire := prp.Command{Raw: cmd.raw, Type: cmd.cmd.Type, CommandID: cmd.cmd.CommandID, ControllerSeq: cmd.cmd.ControllerSeq, Payload: cmd.cmd.Payload}
	c.mu.Lock()
	if cc.sess.Version < 2 {
		c.mu.Unlock()
		return fmt.Errorf("prepare warm transition: %w: PRP v1 connection", prp.ErrWarmTransition)
	}
	in := prp.WarmTransitionInput{
		Old: c.identity, Command: &wire, Result: payload, OldAckedSourceSeq: c.acked,
		RunnerVersion: c.cfg.RunnerVersion, RunnerDigest: c.cfg.RunnerDigest, Lease: lease,
	}
	c.mu.Unlock()
	r, err := prp.NewWarmTransition(in)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if cmd.result != nil || c.warm != nil {
		c.mu.Unlock()
		return errCommandResult
	}
	cmd.result = canon
	results := maps.Clone(c.results)
	results[p.CommandID] = canon
	c.results = results
	c.warm, c.activated = &coreWarm{receipt: r}, nil
	// Commands queued behind the run.attach were never delivered (only the
	// lowest pending one is): they move to the new identity's journal,
	// renumbered from 1, keeping their commandId.
	kept := c.commands[:0:0]
	for _, x := range c.commands {
		if x.result != nil || x == cmd {
			kept = append(kept, x)
			continue
		}
		x.cmd.ControllerSeq = uint64(len(c.next) + 1)
		if raw, err := jsonenc.Marshal(x.cmd); err == nil {
			x.raw = raw
		}
		c.next = append(c.next, x)
	}
	c.commands = kept
	cc.replayOnly = true
	c.notifyLocked()
	c.mu.Unlock()
	return c.ackWarm(cc, p, r)
}

func (c *Core) ackWarm(cc *coreConn, p prp.CommandResultPayload, r prp.WarmTransition) error {
	return c.sendOn(cc, prp.KindCommandResultAck, "", prp.CommandResultAckPayload{
		CommandID: p.CommandID, CommandType: p.CommandType, ControllerSeq: int64(p.ControllerSeq), Status: p.Status,
		WarmTransition: r.Marshal(),
	})
}

// sendCommand delivers a command on cc and raises the terminal fence for
// runner.suspend and runner.shutdown.
func (c *Core) sendCommand(cc *coreConn, cmd *coreCommand) error {
	c.mu.Lock()
	if cc.fenced || cc.replayOnly || cc.activation != nil || c.warm != nil {
		c.mu.Unlock()
		return nil
	}
	if prp.IsTerminalCommand(cmd.cmd.Type) {
		cc.fenced = true
	}
	c.mu.Unlock()
	return c.sendOn(cc, prp.KindCommand, "", json.RawMessage(cmd.raw))
}

// sendOn builds a core control envelope (envelopeId, sentAt) and queues it on cc.
func (c *Core) sendOn(cc *coreConn, kind, envelopeID string, payload any) error {
	b, err := c.buildOn(cc, kind, envelopeID, payload)
	if err != nil {
		return err
	}
	return cc.l.Send(context.Background(), b)
}

// buildOn builds a core control envelope for cc.
func (c *Core) buildOn(cc *coreConn, kind, envelopeID string, payload any) ([]byte, error) {
	if c.cfg.Outbound != nil {
		p, err := c.cfg.Outbound(kind, payload)
		if err != nil {
			return nil, fmt.Errorf("send %s: %w", kind, err)
		}
		payload = p
	}
	env, err := cc.sess.NewControl(kind, payload)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.envSeq++
	if envelopeID == "" {
		envelopeID = kind + "_" + strconv.Itoa(c.envSeq)
	}
	c.mu.Unlock()
	env.EnvelopeID = envelopeID
	env.SentAt = time.Now().UTC().Format(isoMillisLayout)
	return prp.MarshalEnvelope(env)
}

// QueueCommand journals a command: controllerSeq is assigned, and
// commandId, schema and issuedAt default as CP queueCommand does. It is
// delivered at once when it is the lowest pending command and a runner is
// connected.
func (c *Core) QueueCommand(cmd prp.Command) (prp.Command, error) {
	c.mu.Lock()
	journal := &c.commands
	if c.warm != nil {
		journal = &c.next // the new identity's journal, delivered after activation
	}
	if len(*journal) >= MaxCommands {
		c.mu.Unlock()
		return prp.Command{}, errJournalFull
	}
	cmd.ControllerSeq = uint64(len(*journal) + 1)
	c.issued++
	if cmd.CommandID == "" {
		// Numbered across epochs, not by controllerSeq: each identity's
		// journal restarts at 1 after a warm rotation, and a commandId must
		// still name one command (equal to the seq before any rotation).
		cmd.CommandID = fmt.Sprintf("command_prp_%08d", c.issued)
	}
	if cmd.Schema == "" {
		cmd.Schema = "paperclip.prp.command.v1"
	}
	if cmd.IssuedAt == "" {
		cmd.IssuedAt = time.Now().UTC().Format(isoMillisLayout)
	}
	if cmd.Payload == nil {
		cmd.Payload = json.RawMessage(`{}`)
	}
	raw, err := jsonenc.Marshal(cmd)
	if err != nil {
		c.mu.Unlock()
		return prp.Command{}, fmt.Errorf("queue command: %w", err)
	}
	cc := &coreCommand{cmd: cmd, raw: raw}
	*journal = append(*journal, cc)
	deliver := c.warm == nil && c.acking == nil && c.lowestPendingLocked() == cc
	cur := c.current
	c.mu.Unlock()
	if deliver && cur != nil {
		// A send that fails because the connection is going away loses
		// nothing: the command stays pending and the next welcome carries
		// it, as the server's journal does.
		_ = c.sendCommand(cur, cc)
	}
	return cmd, nil
}

// Ping sends a PRP ping to the current connection on the priority lane,
// ahead of queued ACKs and commands.
func (c *Core) Ping(ctx context.Context) error {
	cur := c.cur()
	if cur == nil {
		return prp.ErrNotConnected
	}
	b, err := c.buildOn(cur, prp.KindPing, "", struct{}{})
	if err != nil {
		return err
	}
	return cur.l.SendPriority(b)
}

// PingWebSocket sends a WebSocket Ping on the current connection and waits
// for its Pong: a liveness probe below PRP, which the runner's WebSocket
// layer answers whatever its PRP side is doing (prp.md §4).
func (c *Core) PingWebSocket(ctx context.Context) error {
	cur := c.cur()
	if cur == nil {
		return prp.ErrNotConnected
	}
	return cur.l.PingWebSocket(ctx)
}

// Revoke revokes the current lease at epoch and tells the runner.
func (c *Core) Revoke(epoch int64) error {
	cur := c.cur()
	if cur == nil {
		return prp.ErrNotConnected
	}
	cur.revoking.Store(true)
	p, err := c.store.Revoke(cur.lease.ID, epoch)
	if err != nil {
		cur.revoking.Store(false)
		return err
	}
	return c.sendOn(cur, prp.KindRevoke, "", p)
}

// SendRaw queues a core envelope built by the caller on the current
// connection (tests of malformed or mismatched frames).
func (c *Core) SendRaw(ctx context.Context, build func(s *prp.Session) ([]byte, error)) error {
	cur := c.cur()
	if cur == nil {
		return prp.ErrNotConnected
	}
	b, err := build(cur.sess)
	if err != nil {
		return err
	}
	return cur.l.Send(ctx, b)
}

// DropCurrent drops the current connection as a network failure would.
func (c *Core) DropCurrent() {
	if cur := c.cur(); cur != nil {
		cur.l.Fail(prp.ErrConnClosed)
	}
}

func (c *Core) cur() *coreConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

// HoldReads makes the core stop reading its connections, as a core behind
// a stalled or half-open network would look to the runner: each link's
// reader waits before its next frame, so the runner's writes back up,
// while the core's own sends (commands, pings) go on. release resumes
// reading; Close releases too.
func (c *Core) HoldReads() (release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readHold == nil {
		c.readHold = make(chan struct{})
	}
	return c.releaseReads
}

func (c *Core) releaseReads() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readHold != nil {
		close(c.readHold)
		c.readHold = nil
	}
}

// Close drops every connection and waits for their goroutines.
func (c *Core) Close() {
	c.releaseReads()
	c.mu.Lock()
	c.closed = true
	var all []*coreConn
	for cc := range c.conns {
		all = append(all, cc)
	}
	c.mu.Unlock()
	for _, cc := range all {
		cc.l.Fail(prp.ErrConnClosed)
	}
	c.wg.Wait()
}
