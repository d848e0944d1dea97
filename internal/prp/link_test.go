package prp

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestPRP43_IdlePing ports prp.md §15 scenario 43: no frame sent for the
// ping interval → a WebSocket Ping; any outbound frame resets the timer.
func TestPRP43_IdlePing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var pings []time.Duration
		act := newActivity()
		ws, srv := wsPipe(t, act, &websocket.AcceptOptions{OnPingReceived: func(context.Context, []byte) bool {
			mu.Lock()
			pings = append(pings, time.Since(start))
			mu.Unlock()
			return true
		}})
		srvCtx, srvCancel := context.WithCancel(context.Background())
		got := make(chan []byte, 16)
		go func() {
			for {
				_, b, err := srv.Read(srvCtx)
				if err != nil {
					return
				}
				got <- b
			}
		}()
		l := startLink(ws, act, &plainSession{}, linkConfig{
			PingInterval: 20 * time.Second, SilenceTimeout: time.Hour, Inspect: inspectKinds,
		})
		time.Sleep(10 * time.Second)
		require.NoError(t, l.send(context.Background(), []byte(`{"kind":"event"}`)))
		<-got
		time.Sleep(25 * time.Second) // sent at 10 s → ping due at 30 s, not 20 s
		synctest.Wait()
		mu.Lock()
		require.Equal(t, []time.Duration{30 * time.Second}, pings)
		mu.Unlock()
		time.Sleep(20 * time.Second) // idle again → next ping at 50 s
		synctest.Wait()
		mu.Lock()
		require.Equal(t, []time.Duration{30 * time.Second, 50 * time.Second}, pings)
		mu.Unlock()
		l.close(nil)
		srvCancel()
		_ = srv.CloseNow()
	})
}

// TestPRP44_HalfOpenSilence ports the connection part of prp.md §15
// scenario 44: no inbound frame of any kind for the silence timeout closes the
// connection as half-open; a peer that only answers Pings keeps it up.
func TestPRP44_HalfOpenSilence(t *testing.T) {
	t.Run("silent peer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			act := newActivity()
			// The peer swallows everything and answers nothing: what a runner sees
			// when a proxy path stops forwarding while TCP stays open.
			ws, srv := wsPipe(t, act, &websocket.AcceptOptions{
				OnPingReceived: func(context.Context, []byte) bool { return false },
			})
			srvCtx, srvCancel := context.WithCancel(context.Background())
			defer srvCancel()
			go func() {
				for {
					if _, _, err := srv.Read(srvCtx); err != nil {
						return
					}
				}
			}()
			start := time.Now()
			l := startLink(ws, act, &plainSession{}, linkConfig{
				PingInterval: 20 * time.Second, SilenceTimeout: 45 * time.Second, Inspect: inspectKinds,
			})
			<-l.Done()
			require.ErrorIs(t, l.Err(), ErrHalfOpen)
			require.Equal(t, 45*time.Second, time.Since(start))
			l.close(nil)
			_ = srv.CloseNow()
		})
	})
	t.Run("quiet but live peer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			act := newActivity()
			ws, srv := wsPipe(t, act, nil)
			srvCtx, srvCancel := context.WithCancel(context.Background())
			go func() { _, _, _ = srv.Read(srvCtx) }() // reads (and so answers Pings), sends nothing
			l := startLink(ws, act, &plainSession{}, linkConfig{
				PingInterval: 20 * time.Second, SilenceTimeout: 45 * time.Second, Inspect: inspectKinds,
			})
			time.Sleep(20 * time.Minute)
			// Every goroutine woken at that instant has run (a silence
			// timer due then has fired): the link is still up, not just
			// not yet closed.
			synctest.Wait()
			require.NoError(t, l.Err())
			l.close(nil)
			srvCancel()
			_ = srv.CloseNow()
		})
	})
}

// TestPRP42_PingsWhileOwnerBlocked ports prp.md §15 scenario 42 at the
// connection level: WebSocket Pings and PRP pings are answered while the
// owner takes nothing from the connection, and the pong overtakes queued frames.
func TestPRP42_PingsWhileOwnerBlocked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		act := newActivity()
		ws, srv := wsPipe(t, act, nil)
		l := startLink(ws, act, &plainSession{}, linkConfig{
			PingInterval: time.Hour, SilenceTimeout: time.Hour, Inspect: inspectKinds,
			Pong: func() ([]byte, error) { return []byte(`{"kind":"pong"}`), nil },
		})
		// Queue events while the peer is not reading: the writer blocks on the first.
		for i := range 50 {
			require.NoError(t, l.send(context.Background(), fmt.Appendf(nil, `{"kind":"event","n":%d}`, i)))
		}
		// Inbound traffic the owner never takes: a command, then a PRP ping.
		require.NoError(t, srv.Write(context.Background(), websocket.MessageText, []byte(`{"kind":"command"}`)))
		require.NoError(t, srv.Write(context.Background(), websocket.MessageText, []byte(`{"kind":"ping"}`)))
		synctest.Wait()
		var kinds []string
		for range 51 {
			_, b, err := srv.Read(context.Background())
			require.NoError(t, err)
			kinds = append(kinds, kindOf(b))
		}
		// At most the one frame the writer had already taken precedes the pong.
		require.Contains(t, kinds[:2], "pong", "the pong overtakes every queued frame: %v", kinds[:4])
		// A WebSocket Ping from the peer is answered while the owner is blocked.
		srvCtx, srvCancel := context.WithCancel(context.Background())
		readDone := make(chan struct{})
		go func() { defer close(readDone); _, _, _ = srv.Read(srvCtx) }()
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		require.NoError(t, srv.Ping(pctx))
		pcancel()
		// The owner finally looks: the command waited for it.
		v, err := l.recv(context.Background())
		require.NoError(t, err)
		require.Equal(t, "command", kindOf(v.([]byte)))
		l.close(nil)
		srvCancel()
		<-readDone
		_ = srv.CloseNow()
	})
}

// TestOversizeSendRejectedUpFront: a plaintext whose sealed frame would pass
// the frame limit is refused at Send and the connection stays up.
func TestOversizeSendRejectedUpFront(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		act := newActivity()
		ws, srv := wsPipe(t, act, nil)
		ws.setMaxFrameBytes(minMaxFrameBytes)
		l := startLink(ws, act, &plainSession{}, linkConfig{Inspect: inspectKinds})
		big := make([]byte, minMaxFrameBytes/2)
		require.ErrorIs(t, l.send(context.Background(), big), errFrameTooLarge)
		require.ErrorIs(t, l.sendPriority(big), errFrameTooLarge)
		require.NoError(t, l.Err())
		l.close(nil)
		_ = srv.CloseNow()
	})
}

// TestTrySendNeverWaits: while the peer reads nothing, trySend queues
// until the normal lane is full, then reports it without waiting and
// without queuing; an oversize plaintext and a closed link are errors.
func TestTrySendNeverWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		act := newActivity()
		ws, srv := wsPipe(t, act, nil)
		l := startLink(ws, act, &plainSession{}, linkConfig{
			PingInterval: time.Hour, SilenceTimeout: time.Hour, Inspect: inspectKinds, SendQueue: 4,
		})
		queued := 0
		for range 64 {
			ok, err := l.trySend([]byte(`{"kind":"event"}`))
			require.NoError(t, err)
			if !ok {
				break
			}
			queued++
			synctest.Wait() // the writer takes what it can
		}
		require.Less(t, queued, 64, "the lane never filled")
		require.Len(t, l.sendq, 4, "a refused trySend queued nothing")
		ws.setMaxFrameBytes(minMaxFrameBytes)
		ok, err := l.trySend(make([]byte, minMaxFrameBytes/2))
		require.ErrorIs(t, err, errFrameTooLarge)
		require.False(t, ok)
		srvCtx, srvCancel := context.WithCancel(context.Background())
		readDone := make(chan struct{})
		go func() { // the peer reads again, so the writer can finish
			defer close(readDone)
			for {
				if _, _, err := srv.Read(srvCtx); err != nil {
					return
				}
			}
		}()
		l.close(nil)
		srvCancel()
		<-readDone
		_ = srv.CloseNow()
		ok, err = l.trySend([]byte(`{"kind":"event"}`))
		require.Error(t, err)
		require.False(t, ok)
	})
}
