package prp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/pcrunner/pcrunner/internal/clock"
)

// Frame size bounds (prp.md §1.4).
const (
	// defaultMaxFrameBytes is --max-frame-bytes's default.
	defaultMaxFrameBytes = 1 << 20
	// minMaxFrameBytes and maxMaxFrameBytes bound --max-frame-bytes and the welcome's maxFrameBytes.
	minMaxFrameBytes = 1 << 10
	maxMaxFrameBytes = 16 << 20
)

// errNonTextFrame reports a binary WebSocket message; PRP is text frames only (prp.md §1.4).
var errNonTextFrame = errors.New("non-text websocket frame")

// errFrameTooLarge reports an outbound frame above the frame limit.
var errFrameTooLarge = errors.New("frame exceeds max frame bytes")

// activity records when the last inbound frame of any kind (data, Ping or
// Pong) arrived; the silence watchdog reads it (prp.md §4 item 3).
type activity struct {
	clk  clock.Clock
	last atomic.Int64
}

// newActivity records on the system clock (the listener's accepts, until
// the Listener takes a Clock).
func newActivity() *activity { return newActivityOn(clock.System) }

// newActivityOn records on clk, the connection's clock.
func newActivityOn(clk clock.Clock) *activity {
	a := &activity{clk: clock.Or(clk)}
	a.touch()
	return a
}

func (a *activity) touch()              { a.last.Store(a.clk.Now().UnixNano()) }
func (a *activity) idle() time.Duration { return a.clk.Now().Sub(time.Unix(0, a.last.Load())) }

// wsConn adapts a coder/websocket connection to MsgConn: text messages only,
// a read limit equal to the frame limit, activity recorded on every read.
// ReadMsg and WriteMsg may be called concurrently with each other.
type wsConn struct {
	c     *websocket.Conn
	act   *activity
	limit atomic.Int64
}

func newWSConn(c *websocket.Conn, act *activity, maxFrameBytes int) *wsConn {
	w := &wsConn{c: c, act: act}
	w.setMaxFrameBytes(maxFrameBytes)
	return w
}

// setMaxFrameBytes applies a frame limit in both directions.
func (w *wsConn) setMaxFrameBytes(n int) {
	w.limit.Store(int64(n))
	w.c.SetReadLimit(int64(n))
}

// ReadMsg reads one text message. A binary message is an error that ends the connection.
func (w *wsConn) ReadMsg(ctx context.Context) ([]byte, error) {
	typ, b, err := w.c.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read websocket: %w", err)
	}
	w.act.touch()
	if typ != websocket.MessageText {
		_ = w.c.CloseNow() // the runner drops the connection (prp.md §1.4)
		return nil, errNonTextFrame
	}
	return b, nil
}

// readMsgInto is ReadMsg reading the message into buf's capacity, growing
// it if short, so that the link's reader reuses one frame buffer: the
// result aliases buf and is only good until the next read into it. The
// read limit still applies (coder/websocket enforces it on the Reader).
func (w *wsConn) readMsgInto(ctx context.Context, buf []byte) ([]byte, error) {
	typ, r, err := w.c.Reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("read websocket: %w", err)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, readChunk)
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read websocket: %w", err)
		}
	}
	w.act.touch()
	if typ != websocket.MessageText {
		_ = w.c.CloseNow() // the runner drops the connection (prp.md §1.4)
		return nil, errNonTextFrame
	}
	return buf, nil
}

// readChunk is the first size of a read buffer and its growth step when a
// message is longer (io.ReadAll's first size, a few typical events).
const readChunk = 4 << 10

// WriteMsg writes one text message of at most the frame limit.
func (w *wsConn) WriteMsg(ctx context.Context, b []byte) error {
	if int64(len(b)) > w.limit.Load() {
		return errFrameTooLarge
	}
	if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("write websocket: %w", err)
	}
	return nil
}

// Close drops the connection without a close handshake, as the reference
// core does (prp.md §13.1).
func (w *wsConn) Close() error { return w.c.CloseNow() }

// closeServiceRestart sends Close 1012 with no reason, the core's close at
// its frame bound (durability.md §2.1), and waits for the close handshake
// within coder/websocket's bounds.
func (w *wsConn) closeServiceRestart() error {
	return w.c.Close(websocket.StatusServiceRestart, "")
}

// ping sends a WebSocket Ping and waits for its Pong.
func (w *wsConn) ping(ctx context.Context) error { return w.c.Ping(ctx) }

// dialOptions: no subprotocol, no compression, inbound Ping/Pong count as activity.
func dialOptions(act *activity) *websocket.DialOptions {
	return &websocket.DialOptions{
		CompressionMode: websocket.CompressionDisabled,
		OnPingReceived:  func(context.Context, []byte) bool { act.touch(); return true },
		OnPongReceived:  func(context.Context, []byte) { act.touch() },
	}
}

// acceptOptions: as dialOptions. Origin checks are off: the peer is a server
// (or the preview proxy), not a browser, and PRP authenticates it.
func acceptOptions(act *activity) *websocket.AcceptOptions {
	return &websocket.AcceptOptions{
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
		OnPingReceived:     func(context.Context, []byte) bool { act.touch(); return true },
		OnPongReceived:     func(context.Context, []byte) { act.touch() },
	}
}

// validMaxFrameBytes reports whether n is within 1 KiB–16 MiB.
func validMaxFrameBytes(n int) bool { return n >= minMaxFrameBytes && n <= maxMaxFrameBytes }
