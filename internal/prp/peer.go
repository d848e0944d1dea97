package prp

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/coder/websocket"
)

// PeerConn is one WebSocket to a peer before the handshake: a MsgConn of
// text messages with the largest frame limit (maxMaxFrameBytes) and its
// inbound activity recorded for the silence watchdog. The controller half
// (package control) gets one from AcceptPeer or Dialer.DialPeer, runs its
// handshake on it and then starts a Link on it. ReadMsg and WriteMsg may be
// called concurrently with each other until StartLink; after it the Link
// owns the socket.
type PeerConn struct {
	ws  *wsConn
	act *activity
}

// AcceptPeer upgrades r to a PRP WebSocket on the system clock, with the
// options the listener uses (no compression; Ping and Pong count as
// activity; no origin check: the peer is a runner, not a browser).
func AcceptPeer(w http.ResponseWriter, r *http.Request) (*PeerConn, error) {
	act := newActivity()
	ws, err := websocket.Accept(w, r, acceptOptions(act))
	if err != nil {
		return nil, err
	}
	return &PeerConn{ws: newWSConn(ws, act, maxMaxFrameBytes), act: act}, nil
}

// DialPeer connects to the Dialer's target (the listen-mode runner, for the
// controller half) on the system clock.
func (d *Dialer) DialPeer(ctx context.Context) (*PeerConn, error) {
	act := newActivity()
	ws, err := d.dial(ctx, act, maxMaxFrameBytes)
	if err != nil {
		return nil, err
	}
	return &PeerConn{ws: ws, act: act}, nil
}

// ReadMsg reads one text message (MsgConn).
func (p *PeerConn) ReadMsg(ctx context.Context) ([]byte, error) { return p.ws.ReadMsg(ctx) }

// WriteMsg writes one text message (MsgConn).
func (p *PeerConn) WriteMsg(ctx context.Context, b []byte) error { return p.ws.WriteMsg(ctx, b) }

// Close drops the connection without a close handshake.
func (p *PeerConn) Close() error { return p.ws.Close() }

// LinkConfig configures a Link: the liveness bounds (zero means
// defaultPingInterval and DefaultSilenceTimeout) and the reader's Inspect,
// with the contract of the runner half's link: it runs in the reader
// goroutine, must not block, sees the plaintext only during the call, and
// returns for FrameForward a value that owns its memory.
type LinkConfig struct {
	PingInterval   time.Duration
	SilenceTimeout time.Duration
	Inspect        func(plaintext []byte) (FrameAction, any, error)
	Logger         *slog.Logger
	// RekeyClose is how the link ends at the session's frame bound: a
	// Close 1012 (the listen-mode ws wire) or a TCP drop (the dial-mode
	// raw wire), durability.md §2.1.
	RekeyClose RekeyClose
}

// Link is an authenticated connection of the controller half: the same
// machinery as the runner half's (one reader that only reads, one writer
// that seals in send order with a priority lane, idle WebSocket Pings, the
// silence watchdog), without pong answering or a send window. Every method
// may be called from any goroutine; Recv has one caller, the link's owner.
type Link struct{ l *link }

// StartLink starts the link's goroutines on p with the session the
// handshake produced. The caller owns the Link and must Close it.
func (p *PeerConn) StartLink(s *Session, cfg LinkConfig) *Link {
	return &Link{l: startLink(p.ws, p.act, s, linkConfig{
		PingInterval: cfg.PingInterval, SilenceTimeout: cfg.SilenceTimeout,
		Inspect: cfg.Inspect, Logger: cfg.Logger, RekeyClose: cfg.RekeyClose,
	})}
}

// Recv returns the next forwarded frame as Inspect decoded it; once the
// link has ended and its backlog is drained, the link's error.
func (k *Link) Recv(ctx context.Context) (any, error) { return k.l.recv(ctx) }

// Send queues a plaintext on the normal lane; it returns once queued.
func (k *Link) Send(ctx context.Context, plaintext []byte) error { return k.l.send(ctx, plaintext) }

// SendPriority queues a small control frame ahead of the normal lane; it
// never blocks.
func (k *Link) SendPriority(plaintext []byte) error { return k.l.sendPriority(plaintext) }

// PingWebSocket sends a WebSocket Ping and waits for its Pong, beside the
// idle pinger (the peer's WebSocket layer answers it whatever its PRP side
// is doing).
func (k *Link) PingWebSocket(ctx context.Context) error { return k.l.ws.ping(ctx) }

// Pending reports how many forwarded frames wait for Recv.
func (k *Link) Pending() int { return k.l.pending() }

// Fail ends the link with err (the first error wins) and drops the socket;
// it does not wait for the link's goroutines.
func (k *Link) Fail(err error) { k.l.fail(err) }

// Close ends the link with ErrConnClosed unless it already ended, and
// waits for its goroutines.
func (k *Link) Close() { k.l.close(nil) }
