package prp

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// reusingSession opens every frame into one reused plaintext buffer, as a
// reusable plaintext buffer will: anything the owner keeps that aliased it
// would change under the next read.
type reusingSession struct{ buf []byte }

func (r *reusingSession) Seal(b []byte) ([]byte, error) { return b, nil }
func (r *reusingSession) Open(b []byte) ([]byte, error) {
	r.buf = append(r.buf[:0], b...)
	return r.buf, nil
}

// TestReaderHandsOffOwnedValues: a command payload the owner holds (and
// reads concurrently) stays intact while the reader opens the next frame
// into the same buffer. Run with -race: an alias would be a data race.
func TestReaderHandsOffOwnedValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := NewClient(ClientConfig{Dialer: &Dialer{}, Lease: &Lease{ID: "lease_1", Token: "t", ExpiresAtUnixMs: 1 << 50}})
		require.NoError(t, err)
		sess := &Session{Version: ProtocolVersion, Identity: runnerIdentity, ConnectionID: "connection_1", ConnectionLeaseID: "lease_1"}
		frame := func(id string) []byte {
			env, err := sess.NewControl(KindCommand, map[string]any{"commandId": id, "type": "session.open"})
			require.NoError(t, err)
			b, err := MarshalEnvelope(env)
			require.NoError(t, err)
			return b
		}
		a, b := frame("cmd_aaaa"), frame("cmd_bbbb") // same length: b overwrites a in place
		require.Len(t, b, len(a))

		act := newActivity()
		ws, srv := wsPipe(t, act, nil)
		l := startLink(ws, act, &reusingSession{}, linkConfig{
			PingInterval: time.Hour, SilenceTimeout: time.Hour,
			Inspect: func(pt []byte) (FrameAction, any, error) {
				act, env, err := c.inspect(sess, pt)
				return act, env, err
			},
		})
		ctx := context.Background()
		require.NoError(t, srv.Write(ctx, websocket.MessageText, a))
		v, err := l.recv(ctx)
		require.NoError(t, err)
		held := v.(*Envelope)
		want := string(held.Payload)

		// Read the held payload while the reader opens the next frame.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = string(held.Payload)
				time.Sleep(time.Millisecond)
			}
		})
		require.NoError(t, srv.Write(ctx, websocket.MessageText, b))
		v, err = l.recv(ctx)
		require.NoError(t, err)
		close(stop)
		wg.Wait()
		require.Equal(t, "cmd_bbbb", commandIDOf(v.(*Envelope).Payload))
		require.Equal(t, want, string(held.Payload), "the held payload is the first frame's")
		require.Equal(t, "cmd_aaaa", commandIDOf(held.Payload))
		l.close(nil)
		_ = srv.CloseNow()
	})
}

// TestReaderReusesPlaintextBuffer: the buffer contract of link.Inspect with
// a real Session. The reader opens every frame into one buffer, so the
// plaintext Inspect saw for frame 1 is overwritten by frame 2, while the
// copy Inspect handed off (as Core's does) stays frame 1's even as the
// owner reads it during the next open. Run with -race.
func TestReaderReusesPlaintextBuffer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		runner, core := benchSessions(t)
		a := bytes.Repeat([]byte{'a'}, 4096)
		b := bytes.Repeat([]byte{'b'}, 4096) // same length: opened into the same bytes
		fa, err := runner.Seal(a)
		require.NoError(t, err)
		fb, err := runner.Seal(b)
		require.NoError(t, err)

		var seen [][]byte // each plaintext Inspect was given, as given
		act := newActivity()
		ws, srv := wsPipe(t, act, nil)
		l := startLink(ws, act, core, linkConfig{
			PingInterval: time.Hour, SilenceTimeout: time.Hour,
			Inspect: func(pt []byte) (FrameAction, any, error) {
				seen = append(seen, pt)
				return FrameForward, bytes.Clone(pt), nil
			},
		})
		ctx := context.Background()
		require.NoError(t, srv.Write(ctx, websocket.MessageText, fa))
		v, err := l.recv(ctx)
		require.NoError(t, err)
		held := v.([]byte)

		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = bytes.Count(held, []byte{'a'})
				time.Sleep(time.Millisecond)
			}
		})
		require.NoError(t, srv.Write(ctx, websocket.MessageText, fb))
		v, err = l.recv(ctx)
		require.NoError(t, err)
		close(stop)
		wg.Wait()
		l.close(nil)
		_ = srv.CloseNow()

		require.Equal(t, string(b), string(v.([]byte)))
		require.Equal(t, string(a), string(held), "the handed-off copy is still frame 1")
		require.Len(t, seen, 2)
		require.Same(t, &seen[0][0], &seen[1][0], "frame 2 was opened into frame 1's buffer")
		require.Equal(t, string(b), string(seen[0]), "frame 1's plaintext was overwritten in place")
	})
}

// TestReaderFrameBuffer: the reader's reused frame buffer reads messages of
// any size up to the limit, across growth and shrinking (a frame above
// maxKeptReadBuffer), and still ends the link on a binary message or on a
// message above the frame limit.
func TestReaderFrameBuffer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		act := newActivity()
		ws, srv := wsPipe(t, act, nil)
		ws.setMaxFrameBytes(maxMaxFrameBytes)
		l := startLink(ws, act, &plainSession{}, linkConfig{
			PingInterval: time.Hour, SilenceTimeout: time.Hour, Inspect: inspectKinds,
		})
		ctx := context.Background()
		for _, n := range []int{10, readChunk - 1, readChunk, readChunk + 1, 100000, maxKeptReadBuffer + 1, 3, 100000} {
			msg := []byte(`{"kind":"event","pad":"` + strings.Repeat("x", n) + `"}`)
			require.NoError(t, srv.Write(ctx, websocket.MessageText, msg))
			v, err := l.recv(ctx)
			require.NoError(t, err)
			require.Equal(t, string(msg), string(v.([]byte)), "n=%d", n)
		}
		require.NoError(t, srv.Write(ctx, websocket.MessageBinary, []byte(`{}`)))
		<-l.Done()
		require.ErrorIs(t, l.Err(), errNonTextFrame)
		l.close(nil)
		_ = srv.CloseNow()

		act = newActivity()
		ws, srv = wsPipe(t, act, nil)
		ws.setMaxFrameBytes(minMaxFrameBytes)
		l = startLink(ws, act, &plainSession{}, linkConfig{
			PingInterval: time.Hour, SilenceTimeout: time.Hour, Inspect: inspectKinds,
		})
		go func() { _ = srv.Write(ctx, websocket.MessageText, make([]byte, minMaxFrameBytes+1)) }()
		<-l.Done()
		require.Error(t, l.Err(), "a message above the frame limit ends the link")
		_, err := l.recv(ctx)
		require.Error(t, err)
		l.close(nil)
		_ = srv.CloseNow()
	})
}
