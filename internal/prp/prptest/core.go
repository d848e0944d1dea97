package prptest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// defaultWaitBound bounds each wait of a Core unless WaitBound is set. Inside
// a synctest bubble it is simulated time, so it only ends a test whose
// condition can no longer come true.
const defaultWaitBound = 10 * time.Second

// pipeHost is the authority of PipeURL: a loopback literal (the dialer
// resolves nothing and pins it) on port 1, which nothing dials because the
// Transport carries the upgrade.
const pipeHost = "127.0.0.1:1"

// Core is a real control.Core for one registration (the far side of the
// protocol), plus a test's ways to reach and observe it. The embedded
// control.Core keeps its whole API (QueueCommand, Ping, Revoke, DropCurrent,
// SendRaw, Snapshot, Wait, ...).
//
// Reach it over Transport with PipeURL from inside a synctest bubble, or
// over loopback with ServeLoopback from a runnerd in another process. The
// methods that take no testing.TB fail the test given to NewCore, so call
// them from that test's goroutine. Cleanup (registered by NewCore) closes
// the core, then the transport, then the loopback server, and waits for
// their goroutines.
type Core struct {
	*control.Core
	// WaitBound bounds WaitFor and WaitResult; 0 means defaultWaitBound.
	WaitBound time.Duration

	t    testing.TB
	cfg  control.Config
	tr   *Transport
	user func(kind string, payload any) (any, error) // cfg.Outbound as the test gave it

	// mu guards tamperAcks and tamperWelcomes: the receipts still to send
	// inexact in a command_result_ack and in an activated welcome
	// (TamperWarmReceipts). The core's Outbound hook reads them on its
	// sending goroutines.
	mu                         sync.Mutex
	tamperAcks, tamperWelcomes int

	srvOnce sync.Once
	srv     *httptest.Server
}

// NewCore returns a core for cfg, closed by t's cleanup.
func NewCore(t testing.TB, cfg control.Config) *Core {
	t.Helper()
	c := &Core{t: t, user: cfg.Outbound}
	cfg.Outbound = c.outbound
	c.cfg = cfg
	c.Core = control.NewCore(cfg)
	c.tr = NewTransport(c.Core)
	t.Cleanup(func() {
		c.Core.Close()
		c.tr.Close()
		if c.srv != nil {
			c.srv.Close()
		}
	})
	return c
}

// CloseAll does now what t's cleanup does at the end: closes the core,
// then the transport, then the loopback server. For a test that makes many
// cores in turn (the chaos wave); calling it again, or the cleanup after
// it, does nothing more.
func (c *Core) CloseAll() {
	c.Core.Close()
	c.tr.Close()
	if c.srv != nil {
		c.srv.Close()
	}
}

// Transport is the in-memory path to the core's dial route.
func (c *Core) Transport() *Transport { return c.tr }

// PipeURL is a connect URL for the dial route when the upgrade rides
// Transport: it passes the runner's URL checks and is never dialled.
func (c *Core) PipeURL() string { return "ws://" + pipeHost + prp.ConnectPath(c.cfg.Identity.RunID) }

// ServeLoopback serves the core on a loopback httptest server (started on
// the first call) and returns the ws:// connect URL of its dial route. Not
// for use inside a synctest bubble: a socket is not in the bubble.
func (c *Core) ServeLoopback() string {
	c.srvOnce.Do(func() { c.srv = httptest.NewServer(c.Core) })
	return "ws://" + strings.TrimPrefix(c.srv.URL, "http://") + prp.ConnectPath(c.cfg.Identity.RunID)
}

// Ticket mints a one-use bootstrap ticket.
func (c *Core) Ticket() string {
	c.t.Helper()
	tok, err := c.MintTicket()
	if err != nil {
		c.t.Fatalf("mint ticket: %v", err)
	}
	return tok
}

func (c *Core) bound() time.Duration {
	if c.WaitBound > 0 {
		return c.WaitBound
	}
	return defaultWaitBound
}

// WaitFor waits, bounded, until cond holds of the core's state and returns
// the snapshot that satisfied it.
func (c *Core) WaitFor(cond func(s control.Snapshot) bool) control.Snapshot {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.bound())
	defer cancel()
	var got control.Snapshot
	if err := c.Wait(ctx, func(s control.Snapshot) bool {
		if cond(s) {
			got = s
			return true
		}
		return false
	}); err != nil {
		c.t.Fatalf("core: condition not reached within %v: %v", c.bound(), err)
	}
	return got
}

// Queue queues a command of type typ with a JSON object payload. Only a
// command the journal refused fails the test: when the immediate delivery
// fails because the current connection is going away (a runner that just
// exited), the command stays journaled as pending and the next connection's
// welcome carries it (control.Core.QueueCommand).
func (c *Core) Queue(typ, payload string) prp.Command {
	c.t.Helper()
	cmd, err := c.QueueCommand(prp.Command{Type: typ, Payload: json.RawMessage(payload)})
	if err != nil && cmd.CommandID == "" {
		c.t.Fatalf("queue %s: %v", typ, err)
	}
	return cmd
}

// WaitResult waits, bounded, for the result of command id and decodes it.
func (c *Core) WaitResult(id string) prp.CommandResultPayload {
	c.t.Helper()
	s := c.WaitFor(func(s control.Snapshot) bool { return s.Results[id] != nil })
	var p prp.CommandResultPayload
	if err := json.Unmarshal(s.Results[id], &p); err != nil {
		c.t.Fatalf("decode result of %s: %v", id, err)
	}
	return p
}

// Events decodes every event the core has committed so far.
func (c *Core) Events() []Event {
	c.t.Helper()
	return DecodeEvents(c.t, c.Snapshot().Events)
}

// TamperWarmReceipts makes the next acks receipts the core sends in a
// command_result_ack, and the next welcomes in an activated welcome,
// differ from the real one in one bound field under the same
// transitionId, as a faulty or hostile core's would: the runner must
// refuse an inexact receipt.
func (c *Core) TamperWarmReceipts(acks, welcomes int) {
	c.mu.Lock()
	c.tamperAcks, c.tamperWelcomes = acks, welcomes
	c.mu.Unlock()
}

// outbound is the core's control.Config.Outbound: it makes a receipt
// inexact while TamperWarmReceipts asks for it, then hands the payload to
// the test's own hook, if any.
func (c *Core) outbound(kind string, payload any) (any, error) {
	switch p := payload.(type) {
	case prp.CommandResultAckPayload:
		if len(p.WarmTransition) > 0 && c.take(&c.tamperAcks) {
			p.WarmTransition = c.tamper(p.WarmTransition)
			payload = p
		}
	case prp.WelcomePayload:
		if len(p.WarmTransition) > 0 && c.take(&c.tamperWelcomes) {
			p.WarmTransition = c.tamper(p.WarmTransition)
			payload = p
		}
	}
	if c.user != nil {
		return c.user(kind, payload)
	}
	return payload, nil
}

// take spends one of *left, guarded by c.mu; it reports whether one was left.
func (c *Core) take(left *int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if *left <= 0 {
		return false
	}
	*left--
	return true
}

// tamper is the receipt raw with its lease expiry one millisecond off.
func (c *Core) tamper(raw json.RawMessage) json.RawMessage {
	r, err := prp.DecodeWarmTransition(raw)
	if err != nil {
		c.t.Errorf("tamper warm receipt: %v", err)
		return raw
	}
	r.LeaseExpiresAtUnixMs++
	return r.Marshal()
}

// SettleWarmForward is the server's recovery when the runner died inside
// a transition whose receipt the core acknowledged (the crash table of
// the warm rotation): the acknowledgement committed the core to the new
// identity, and no activation can come from the dead runner. The new
// identity takes the registration over as warm_transition_activated makes
// it: the old epoch is archived, the commands queued inside the transition
// start the new journal, and the next ticket authenticates as the new
// identity (the runner, relaunched under it, rolls its state forward). It
// reports whether a transition was pending; without one the identity stays.
//
// It settles through the protocol, standing in for the dead runner: it
// re-keys the receipt's lease to a token of its own
// (MemoryCredentialStore.AddLease), authenticates as the new identity with
// the receipt's transitionId over the Transport, sends
// warm_transition_activated, waits for the core to activate, and hangs up.
// The core counts that connection among its Authentications; it is gone
// when SettleWarmForward returns.
func (c *Core) SettleWarmForward() bool {
	c.t.Helper()
	settled, err := c.TrySettleWarmForward()
	if err != nil {
		c.t.Fatalf("%v", err)
	}
	return settled
}

// TrySettleWarmForward is SettleWarmForward reporting a failure instead of
// failing the test, for callers off the test's goroutine (the chaos wave's
// runnerd supervisor).
func (c *Core) TrySettleWarmForward() (bool, error) {
	s := c.Snapshot()
	if s.Warm == nil {
		return false, nil
	}
	r := *s.Warm
	now := time.Now()
	lease, ok := c.Store().LeaseState(r.LeaseID, now)
	switch {
	case lease.ID == "" || c.Store().Revoked(r.LeaseID):
		return false, fmt.Errorf("settle warm transition: the receipt's lease %s is unknown or revoked", r.LeaseID)
	case !ok:
		// Expired while the runner was gone (its outage outlived the
		// lease). The server settles from its own records, lease or not;
		// this stand-in speaks the protocol, so it extends the lease for
		// its one connection.
		lease.ExpiresAtUnixMs = now.Add(c.bound()).UnixMilli()
	}
	lease.Token = "lease_prptest_settle_" + strings.TrimPrefix(r.TransitionID, "sha256:")
	c.Store().AddLease(lease)

	ctx, cancel := context.WithTimeout(context.Background(), c.bound())
	defer cancel()
	fail := func(what string, err error) (bool, error) {
		return false, fmt.Errorf("settle warm transition: %s: %w", what, err)
	}
	d, err := prp.NewDialer(ctx, prp.DialerConfig{URL: "ws://" + pipeHost + prp.ConnectPath(r.NewIdentity.RunID), Transport: c.tr})
	if err != nil {
		return fail("dialer", err)
	}
	peer, err := d.DialPeer(ctx)
	if err != nil {
		return fail("dial", err)
	}
	h := prp.ClientHandshake{
		Identity: r.NewIdentity, RunnerVersion: c.cfg.RunnerVersion, RunnerDigest: c.cfg.RunnerDigest,
		Lease: &lease, WarmTransitionID: r.TransitionID, WarmReceipt: &r,
	}
	sess, _, err := h.Run(ctx, peer)
	if err != nil {
		_ = peer.Close()
		return fail("handshake", err)
	}
	// net.Pipe is synchronous: read (and drop) what the core sends, so that
	// its writer never blocks on this connection.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			if _, err := peer.ReadMsg(ctx); err != nil {
				return
			}
		}
	}()
	defer func() { _ = peer.Close(); <-drained }()
	env, err := sess.NewControl(prp.KindWarmTransitionActivated, prp.WarmTransitionActivatedPayload{TransitionID: r.TransitionID})
	if err != nil {
		return fail("activation envelope", err)
	}
	frame, err := sess.SealEnvelope(env)
	if err != nil {
		return fail("seal activation", err)
	}
	if err := peer.WriteMsg(ctx, frame); err != nil {
		return fail("send activation", err)
	}
	if err := c.Wait(ctx, func(s control.Snapshot) bool { return s.Warm == nil && s.Identity == r.NewIdentity }); err != nil {
		return fail("activation", err)
	}
	_ = peer.Close()
	<-drained
	if err := c.Wait(ctx, func(s control.Snapshot) bool { return s.Connections == 0 }); err != nil {
		return fail("hang up", err)
	}
	return true, nil
}
