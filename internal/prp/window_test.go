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

// windowed returns how many of events fit the send window from empty.
func windowed(events [][]byte) int {
	n, bytes := 0, 0
	for _, e := range events {
		if bytes > 0 && bytes+frameCost(e) > maxUnackedEventBytes {
			break
		}
		bytes += frameCost(e)
		n++
	}
	return n
}

// TestLinkWindowPacesEventsByAck: a burst of events holds
// at most maxUnackedEventBytes of the wire ahead of a pong. The writer
// stops at the window, a ping arriving meanwhile is answered at once, each
// ACK lets the next events go, and a core that stops ACKing gets the rest
// after windowStall. Every event leaves exactly once, in send order.
func TestLinkWindowPacesEventsByAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const total = 400
		events := make([][]byte, total)
		for i := range events {
			events[i] = eventEnvelope(t, int64(i+1))
		}
		first := windowed(events)
		require.Greater(t, first, 10)
		require.Less(t, first, total/2)

		act := newActivity()
		ws, srv := wsPipe(t, act, nil)
		srvCtx, srvCancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var got []string // kind, or the sourceSeq of an event
		go func() {
			for {
				_, b, err := srv.Read(srvCtx)
				if err != nil {
					return
				}
				mu.Lock()
				if seq, ok := eventSeq(b); ok {
					got = append(got, fmt.Sprint(seq))
				} else {
					got = append(got, kindOf(b))
				}
				mu.Unlock()
			}
		}()
		seen := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
		win := newSendWindow()
		l := startLink(ws, act, &plainSession{}, linkConfig{
			PingInterval: time.Hour, SilenceTimeout: time.Hour, Inspect: inspectKinds,
			Pong:   func() ([]byte, error) { return []byte(`{"kind":"pong"}`), nil },
			Window: win,
		})
		ctx := context.Background()
		go func() {
			for _, e := range events {
				if l.send(ctx, e) != nil {
					return
				}
			}
		}()
		synctest.Wait()
		require.Len(t, seen(), first, "the writer stops at the window")

		require.NoError(t, srv.Write(ctx, websocket.MessageText, []byte(`{"kind":"ping"}`)))
		synctest.Wait()
		require.Equal(t, "pong", seen()[len(seen())-1], "a ping is answered while events wait")
		require.Len(t, seen(), first+1)

		win.ack(int64(first)) // all in flight committed: the next window goes
		synctest.Wait()
		second := first + windowed(events[first:])
		require.Len(t, seen(), second+1)

		time.Sleep(windowStall) // no ACK: pacing stops, the rest goes
		synctest.Wait()
		var want []string
		for i := range total {
			if i == first {
				want = append(want, "pong")
			}
			want = append(want, fmt.Sprint(i+1))
		}
		require.Equal(t, want, seen(), "every event once, in order")

		l.close(nil)
		srvCancel()
		_ = srv.CloseNow()
	})
}

// TestEventSeq: the window's sniffer finds an event envelope's own
// sourceSeq and nothing in other kinds.
func TestEventSeq(t *testing.T) {
	for _, seq := range []int64{1, 42, 1 << 40} {
		got, ok := eventSeq(eventEnvelope(t, seq))
		require.True(t, ok)
		require.Equal(t, seq, got)
	}
	nested := []byte(`{"protocol":"paperclip.runner","version":2,"kind":"event","payload":{"schema":"x","sourceSeq":7,"payload":{"sourceSeq":9}}}`)
	got, ok := eventSeq(nested)
	require.True(t, ok)
	require.Equal(t, int64(7), got)
	for _, b := range []string{
		`{"protocol":"paperclip.runner","version":2,"kind":"command_result","payload":{"result":{"sourceSeq":3}}}`,
		`{"protocol":"paperclip.runner","version":2,"kind":"pong","payload":{"ackedSourceSeq":3}}`,
		`{"kind":"event","payload":{"sourceSeq":"x"}}`,
		`{"kind":"event"}`,
		``,
	} {
		_, ok := eventSeq([]byte(b))
		require.False(t, ok, b)
	}
}

// FuzzEventSeq: the sniffer never panics, and on a runner event envelope it
// agrees with the sequence number the envelope was built with.
func FuzzEventSeq(f *testing.F) {
	f.Add([]byte(`{"kind":"event","payload":{"sourceSeq":12}}`), int64(5))
	f.Fuzz(func(t *testing.T, b []byte, seq int64) {
		_, _ = eventSeq(b)
		if seq < 1 || seq > maxFrameCounter {
			return
		}
		got, ok := eventSeq(eventEnvelope(t, seq))
		if !ok || got != seq {
			t.Fatalf("eventSeq = %d, %v; want %d", got, ok, seq)
		}
	})
}
