package prp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcrunner/pcrunner/internal/clock"
)

// Liveness bounds (prp.md §4, §12).
const (
	// defaultPingInterval is --ping-interval-ms's default: a WebSocket Ping
	// when nothing was sent for this long (beyond).
	defaultPingInterval = 20 * time.Second
	// DefaultSilenceTimeout is --silence-timeout-ms's default: no inbound frame
	// for this long closes the connection as half-open (beyond).
	DefaultSilenceTimeout = 45 * time.Second
	// SendQueueLen bounds the normal send lane; Send blocks (with its ctx) when full.
	SendQueueLen = 256
	// maxInboundQueue bounds frames opened by the reader but not yet taken by
	// the owner; the core keeps one command in flight, so reaching it means a
	// stuck owner or a flooding peer, and the connection is dropped.
	maxInboundQueue = 16384
	// maxOwedPongs bounds PRP pings waiting for their pong; a peer pinging
	// faster than the socket drains is dropped rather than buffered forever.
	maxOwedPongs = 1024
	// rekeyCloseWait bounds the Close 1012 handshake at a frame bound
	// (beyond: the reference runner drops without a Close); a peer that
	// has not answered by then is dropped, so the reconnect is not held up
	// by coder/websocket's own 5 s close bounds.
	rekeyCloseWait = 500 * time.Millisecond
	// maxKeptReadBuffer bounds the reader buffers (fbuf, rbuf) a connection
	// keeps between frames: the default frame limit (defaultMaxFrameBytes).
	// A rarer larger frame, up to maxMaxFrameBytes, gets a buffer of its
	// own that is dropped after it, so it does not pin 16 MiB per link.
	maxKeptReadBuffer = defaultMaxFrameBytes
)

// ErrHalfOpen reports that no inbound frame arrived within the silence timeout.
var ErrHalfOpen = errors.New("connection half-open: inbound silence")

// ErrConnClosed reports use of a connection that has ended.
var ErrConnClosed = errors.New("connection closed")

// errInboundOverflow reports that the owner fell maxInboundQueue frames behind
// the reader, or that more than maxOwedPongs pings await their pong.
var errInboundOverflow = errors.New("inbound queue overflow")

// sealer and opener are the halves of an authenticated Session the link uses:
// the writer goroutine seals, the reader goroutine opens.
type sealer interface {
	Seal(plaintext []byte) ([]byte, error)
}
type opener interface {
	Open(frame []byte) ([]byte, error)
}

// appendSealer is a sealer that can seal into a reused buffer (Session).
type appendSealer interface {
	AppendSeal(dst, plaintext []byte) ([]byte, error)
}

// appendOpener is an opener that can open into a reused buffer (Session).
type appendOpener interface {
	AppendOpen(dst, frame []byte) ([]byte, error)
}

// FrameAction says what the reader does with an opened frame.
type FrameAction int

const (
	FrameForward FrameAction = iota // queue for the owner
	// framePing: answer with a pong on the priority lane. Only the runner
	// half answers PRP pings (linkConfig.Pong), so it is not exported.
	framePing
	FrameConsumed // handled by Inspect itself
)

// linkConfig configures one authenticated connection.
type linkConfig struct {
	PingInterval   time.Duration
	SilenceTimeout time.Duration
	// Inspect runs in the reader goroutine on each opened plaintext and says
	// what to do with it; an error ends the connection. It must not block.
	// The plaintext is valid only during the call: the reader opens every
	// frame into one reused buffer (link.rbuf), so the next frame overwrites
	// it. For FrameForward Inspect returns the decoded value the owner
	// receives from recv, which must own its memory: a copy or a decode,
	// never a slice of the plaintext.
	Inspect func(plaintext []byte) (FrameAction, any, error)
	// Pong builds a pong plaintext on the writer goroutine; it must read only
	// in-memory state. Nil: pings are not answered (the core half).
	Pong func() ([]byte, error)
	// PongSent, if set, observes the time from a ping's arrival to its pong
	// leaving the writer (benchmarks).
	PongSent func(time.Duration)
	Logger   *slog.Logger
	// Clock drives the idle-ping timer, the silence watchdog and the send
	// window's stall timer; nil: clock.System.
	Clock clock.Clock
	// Window, if set, paces events on the normal lane by the peer's ACKs
	// (sendWindow); whoever reads the ACKs (Inspect) feeds it. Nil: unpaced
	// (the core half).
	Window *sendWindow
	// RekeyClose is how the link ends when the session reaches a frame
	// bound (ErrRekeyRequired): RekeyCloseFrame sends a WebSocket Close 1012
	// first (the runner, and a listen-mode core's ws wire); RekeyDrop drops
	// the TCP connection without a Close frame (a dial-mode core's raw
	// wire). Durability.md §2.1, §2.2 item 2.
	RekeyClose RekeyClose
	// SendQueue is the normal lane's length; 0 means SendQueueLen.
	SendQueue int
	// Gate, if set, runs in the reader goroutine before each read: no
	// frame is read until it returns, so while it waits the peer's frames
	// stay in the socket. It returns only the error of the ctx it is
	// given, once the link ends. The silence watchdog does not count the
	// time it waits: that silence is this side's.
	Gate func(ctx context.Context) error
	// Merge, if set, runs in the reader goroutine, under the inbox's lock,
	// for each forwarded value while the inbox is not empty: true replaces
	// the newest waiting value (last) with next instead of queuing next
	// behind it. It must not block.
	Merge func(last, next any) bool
}

// RekeyClose says how a link ends at a frame bound (linkConfig.RekeyClose).
type RekeyClose int

const (
	// RekeyDrop destroys the TCP connection without a Close frame.
	RekeyDrop RekeyClose = iota
	// RekeyCloseFrame sends Close 1012 (service restart), no reason, then closes.
	RekeyCloseFrame
)

// link is the machinery of one authenticated connection (prp.md §4): a reader
// goroutine that only reads, opens and classifies frames; a single writer
// goroutine that seals every frame in send order and serves a priority lane
// for pongs ahead of queued frames; a WebSocket Ping when nothing was sent for
// PingInterval; and a watchdog that closes the connection after
// SilenceTimeout without any inbound frame.
//
// Buffer contract: the reader opens every frame into one reused plaintext
// buffer (rbuf), valid until its next read, so an open costs no allocation.
// Inspect sees the plaintext only during its call; the values recv returns
// are Inspect's own (a decode or a copy) and the owner may keep them.
type link struct {
	ws   *wsConn
	act  *activity
	seal sealer
	open opener
	cfg  linkConfig

	// wbuf is the writer's frame buffer, reused for every frame: WriteMsg
	// (coder/websocket's Conn.Write) has copied or sent all of it and keeps
	// no reference once it returns. It grows to the largest frame sent,
	// which the frame limit bounds.
	wbuf []byte
	// rbuf is the reader's plaintext buffer, reused for every frame (see
	// Inspect): only the reader goroutine touches it, and Inspect hands the
	// owner values that never alias it. It grows to the largest frame
	// received, which the frame limit bounds.
	rbuf []byte
	// fbuf is the reader's frame buffer, reused likewise: Open reads the
	// frame and keeps nothing of it.
	fbuf []byte

	sendq chan []byte
	// pingMu guards pingAt.
	pingMu sync.Mutex
	pingAt []time.Time // arrival of each PRP ping still owed a pong
	// prioMu guards prioQ.
	prioMu   sync.Mutex
	prioQ    [][]byte // control frames that must not wait behind queued events (lease_renew)
	pongKick chan struct{}
	pinging  atomic.Bool
	// gated is set while the reader waits in cfg.Gate.
	gated atomic.Bool

	// inMu guards inbox.
	inMu      sync.Mutex
	inbox     []any // decoded frames, owned by whoever takes them
	inKick    chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	err       error
	wg        sync.WaitGroup
}

// startLink starts the goroutines of an authenticated connection. The caller
// owns the link and must call close (which waits for every goroutine).
func startLink(ws *wsConn, act *activity, s interface {
	sealer
	opener
}, cfg linkConfig) *link {
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = defaultPingInterval
	}
	if cfg.SilenceTimeout <= 0 {
		cfg.SilenceTimeout = DefaultSilenceTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.SendQueue <= 0 {
		cfg.SendQueue = SendQueueLen
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &link{
		ws: ws, act: act, seal: s, open: s, cfg: cfg,
		sendq:    make(chan []byte, cfg.SendQueue),
		pongKick: make(chan struct{}, 1),
		inKick:   make(chan struct{}, 1),
		ctx:      ctx, cancel: cancel,
		done: make(chan struct{}),
	}
	l.wg.Add(3)
	go l.readLoop()
	go l.writeLoop()
	go l.watchdog()
	return l
}

// fail ends the link with err (the first error wins) and drops the socket;
// at a frame bound it ends the way cfg.RekeyClose says.
func (l *link) fail(err error) {
	if errors.Is(err, ErrRekeyRequired) && l.cfg.RekeyClose == RekeyCloseFrame {
		l.failWithClose(err)
		return
	}
	l.closeOnce.Do(func() {
		l.err = err
		l.cancel()
		_ = l.ws.Close()
		close(l.done)
	})
}

// failWithClose ends the link with err after a Close 1012. The link counts
// as ended at once (Done); the close handshake runs on a goroutine close
// waits for, bounded by rekeyCloseWait, and the link's context is
// cancelled only after it, since a cancelled read drops the socket before
// the Close frame could leave.
func (l *link) failWithClose(err error) {
	l.closeOnce.Do(func() {
		l.err = err
		close(l.done)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			drop := func() {
				l.cancel()
				_ = l.ws.Close()
			}
			t := l.cfg.Clock.AfterFunc(rekeyCloseWait, drop)
			_ = l.ws.closeServiceRestart()
			t.Stop()
			drop()
		}()
	})
}

// close ends the link and waits for its goroutines.
func (l *link) close(err error) {
	if err == nil {
		err = ErrConnClosed
	}
	l.fail(err)
	l.wg.Wait()
}

// Done is closed when the link has ended; Err then says why.
func (l *link) Done() <-chan struct{} { return l.done }

// Err returns why the link ended, or nil while it is up.
func (l *link) Err() error {
	select {
	case <-l.done:
		return l.err
	default:
		return nil
	}
}

// send queues a plaintext on the normal lane; the writer seals it in order.
// It returns once queued, not once written.
func (l *link) send(ctx context.Context, plaintext []byte) error {
	if err := l.fits(plaintext); err != nil {
		return err
	}
	select {
	case <-l.done:
		return fmt.Errorf("send frame: %w", l.err)
	default:
	}
	select {
	case l.sendq <- plaintext:
		return nil
	case <-l.done:
		return fmt.Errorf("send frame: %w", l.err)
	case <-ctx.Done():
		return fmt.Errorf("send frame: %w", ctx.Err())
	}
}

// trySend is send that never waits: queued is false when the normal lane
// is full, and nothing was queued.
func (l *link) trySend(plaintext []byte) (queued bool, err error) {
	if err := l.fits(plaintext); err != nil {
		return false, err
	}
	select {
	case <-l.done:
		return false, fmt.Errorf("send frame: %w", l.err)
	default:
	}
	select {
	case l.sendq <- plaintext:
		return true, nil
	default:
		return false, nil
	}
}

// secureFrameOverhead bounds the secure-frame JSON around the hex
// ciphertext: schema, counter (≤ 20 digits) and punctuation (prp.md §2.2).
const secureFrameOverhead = 128

// fits rejects a plaintext whose sealed frame would exceed the frame limit,
// before it is queued: the connection stays up and nothing is half-sent.
func (l *link) fits(plaintext []byte) error {
	if int64(2*(len(plaintext)+16)+secureFrameOverhead) > l.ws.limit.Load() {
		return fmt.Errorf("send frame: %w", errFrameTooLarge)
	}
	return nil
}

// sendPriority queues a small control frame on the priority lane, ahead of
// queued events; it never blocks.
func (l *link) sendPriority(plaintext []byte) error {
	if err := l.fits(plaintext); err != nil {
		return err
	}
	select {
	case <-l.done:
		return fmt.Errorf("send frame: %w", l.err)
	default:
	}
	l.prioMu.Lock()
	l.prioQ = append(l.prioQ, plaintext)
	l.prioMu.Unlock()
	kick(l.pongKick)
	return nil
}

func (l *link) popPing() (time.Time, bool) {
	l.pingMu.Lock()
	defer l.pingMu.Unlock()
	if len(l.pingAt) == 0 {
		return time.Time{}, false
	}
	at := l.pingAt[0]
	l.pingAt = l.pingAt[1:]
	return at, true
}

func (l *link) popPriority() []byte {
	l.prioMu.Lock()
	defer l.prioMu.Unlock()
	if len(l.prioQ) == 0 {
		return nil
	}
	pt := l.prioQ[0]
	l.prioQ = l.prioQ[1:]
	return pt
}

// recv returns the next forwarded frame as Inspect decoded it.
func (l *link) recv(ctx context.Context) (any, error) {
	for {
		l.inMu.Lock()
		if len(l.inbox) > 0 {
			b := l.inbox[0]
			l.inbox[0] = nil
			l.inbox = l.inbox[1:]
			l.inMu.Unlock()
			return b, nil
		}
		l.inMu.Unlock()
		select {
		case <-l.inKick:
		case <-l.done:
			// Drain what the reader accepted before the end.
			l.inMu.Lock()
			n := len(l.inbox)
			l.inMu.Unlock()
			if n > 0 {
				continue
			}
			return nil, l.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// pending reports how many opened frames wait for the owner.
func (l *link) pending() int {
	l.inMu.Lock()
	defer l.inMu.Unlock()
	return len(l.inbox)
}

func (l *link) readLoop() {
	defer l.wg.Done()
	for {
		if l.cfg.Gate != nil {
			l.gated.Store(true)
			err := l.cfg.Gate(l.ctx)
			l.act.touch() // the watchdog measures the peer's silence from here
			l.gated.Store(false)
			if err != nil {
				l.fail(err)
				return
			}
		}
		frame, err := l.ws.readMsgInto(l.ctx, l.fbuf)
		if err != nil {
			l.fail(err)
			return
		}
		l.fbuf = keepBuffer(frame)
		pt, err := l.openFrame(frame)
		if err != nil {
			l.fail(fmt.Errorf("open frame: %w", err))
			return
		}
		act, v, err := l.cfg.Inspect(pt)
		if err != nil {
			l.fail(err)
			return
		}
		switch act {
		case FrameConsumed:
			continue
		case framePing:
			if l.cfg.Pong != nil {
				l.pingMu.Lock()
				owed := len(l.pingAt)
				if owed < maxOwedPongs {
					l.pingAt = append(l.pingAt, l.cfg.Clock.Now())
				}
				l.pingMu.Unlock()
				if owed >= maxOwedPongs {
					l.fail(errInboundOverflow)
					return
				}
				kick(l.pongKick)
			}
			continue
		}
		l.inMu.Lock()
		if n := len(l.inbox); n > 0 && l.cfg.Merge != nil && l.cfg.Merge(l.inbox[n-1], v) {
			l.inbox[n-1] = v
			l.inMu.Unlock()
			continue
		}
		if len(l.inbox) >= maxInboundQueue {
			l.inMu.Unlock()
			l.fail(errInboundOverflow)
			return
		}
		l.inbox = append(l.inbox, v)
		l.inMu.Unlock()
		kick(l.inKick)
	}
}

// openFrame opens one inbound frame, into rbuf when the opener can.
func (l *link) openFrame(frame []byte) ([]byte, error) {
	ao, ok := l.open.(appendOpener)
	if !ok {
		return l.open.Open(frame)
	}
	pt, err := ao.AppendOpen(l.rbuf[:0], frame)
	if err != nil {
		return nil, err
	}
	l.rbuf = keepBuffer(pt)
	return pt, nil
}

// keepBuffer returns b to reuse for the next frame, or nil when it is larger
// than maxKeptReadBuffer.
func keepBuffer(b []byte) []byte {
	if cap(b) > maxKeptReadBuffer {
		return nil
	}
	return b
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (l *link) writeLoop() {
	defer l.wg.Done()
	idle := l.cfg.Clock.NewTimer(l.cfg.PingInterval)
	defer idle.Stop()
	win := l.cfg.Window
	// held is the next normal-lane event, waiting for room in the send
	// window; nothing else leaves the normal lane before it (send order),
	// while pongs and priority frames still go. stall runs while it waits.
	var held []byte
	var heldSeq int64
	stall := l.cfg.Clock.NewTimer(windowStall)
	stall.Stop()
	defer stall.Stop()
	for {
		// The priority lane: every owed pong leaves before the next queued frame.
		if at, ok := l.popPing(); ok {
			pt, err := l.cfg.Pong()
			if err != nil {
				l.fail(fmt.Errorf("build pong: %w", err))
				return
			}
			if !l.write(pt, idle) {
				return
			}
			if l.cfg.PongSent != nil {
				l.cfg.PongSent(l.cfg.Clock.Now().Sub(at))
			}
			continue
		}
		if pt := l.popPriority(); pt != nil {
			if !l.write(pt, idle) {
				return
			}
			continue
		}
		if held != nil && win.admit(frameCost(held)) {
			stall.Stop()
			pt := held
			held = nil
			if !l.writeEvent(pt, heldSeq, idle) {
				return
			}
			continue
		}
		sendq := l.sendq
		var acked <-chan struct{}
		var stalled <-chan time.Time
		if held != nil {
			sendq, acked, stalled = nil, win.kick, stall.C()
		}
		select {
		case <-l.ctx.Done():
			return
		case <-l.pongKick:
		case <-acked:
			stall.Reset(windowStall) // ACKs are flowing: keep pacing
		case <-stalled:
			win.stall()
		case pt := <-sendq:
			if win != nil {
				if seq, ok := eventSeq(pt); ok {
					if !win.admit(frameCost(pt)) {
						held, heldSeq = pt, seq
						stall.Reset(windowStall)
						continue
					}
					if !l.writeEvent(pt, seq, idle) {
						return
					}
					continue
				}
			}
			if !l.write(pt, idle) {
				return
			}
		case <-idle.C():
			l.wsPing()
			idle.Reset(l.cfg.PingInterval)
		}
	}
}

// writeEvent writes an event frame and counts it in the send window.
func (l *link) writeEvent(pt []byte, seq int64, idle clock.Timer) bool {
	if !l.write(pt, idle) {
		return false
	}
	l.cfg.Window.sent(seq, frameCost(pt))
	return true
}

// write seals and sends one frame, bounded by the silence timeout; any
// outbound frame resets the idle-ping timer (prp.md §15 scenario 43).
func (l *link) write(pt []byte, idle clock.Timer) bool {
	var frame []byte
	var err error
	if as, ok := l.seal.(appendSealer); ok {
		frame, err = as.AppendSeal(l.wbuf[:0], pt)
		l.wbuf = frame
	} else {
		frame, err = l.seal.Seal(pt)
	}
	if err != nil {
		l.fail(fmt.Errorf("seal frame: %w", err))
		return false
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.SilenceTimeout)
	err = l.ws.WriteMsg(ctx, frame)
	cancel()
	if err != nil {
		l.fail(err)
		return false
	}
	idle.Reset(l.cfg.PingInterval)
	return true
}

// wsPing sends a WebSocket Ping without blocking the writer; at most one is
// outstanding. A missing Pong is the watchdog's business, not the pinger's.
func (l *link) wsPing() {
	if !l.pinging.CompareAndSwap(false, true) {
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer l.pinging.Store(false)
		ctx, cancel := context.WithTimeout(l.ctx, l.cfg.SilenceTimeout)
		defer cancel()
		_ = l.ws.ping(ctx)
	}()
}

// watchdog closes the link as half-open after SilenceTimeout without any
// inbound frame (prp.md §4 item 3).
func (l *link) watchdog() {
	defer l.wg.Done()
	t := l.cfg.Clock.NewTimer(l.cfg.SilenceTimeout)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C():
			if l.gated.Load() {
				// The reader holds off on purpose: the peer is not silent.
				t.Reset(l.cfg.SilenceTimeout)
				continue
			}
			idle := l.act.idle()
			if idle >= l.cfg.SilenceTimeout {
				l.cfg.Logger.Warn("closing half-open connection", "silence", idle.String())
				l.fail(ErrHalfOpen)
				return
			}
			t.Reset(l.cfg.SilenceTimeout - idle)
		}
	}
}
