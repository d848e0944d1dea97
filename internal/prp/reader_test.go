package prp

import (
	"context"
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
			Inspect: func(pt []byte) (frameAction, any, error) {
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
