package prptest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echoHandler upgrades /ws and echoes one message; anything else gets 400.
func echoHandler(t *testing.T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.RequestURI != "/ws" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if !assertNoError(t, err) {
			return
		}
		defer ws.CloseNow()
		typ, b, err := ws.Read(context.Background())
		if err != nil {
			return
		}
		_ = ws.Write(context.Background(), typ, b)
		_, _, _ = ws.Read(context.Background()) // until the client closes
	})
}

func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("accept: %v", err)
		return false
	}
	return true
}

// TestTransportUpgradeOverPipe: an upgrade reaches the handler over a pipe
// inside a synctest bubble, a plain answer is returned as is, and a closed
// Transport refuses further round trips.
func TestTransportUpgradeOverPipe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTransport(echoHandler(t))
		hc := &http.Client{Transport: tr}
		ctx := context.Background()
		c, resp, err := websocket.Dial(ctx, "ws://pipe.test/ws", &websocket.DialOptions{HTTPClient: hc})
		require.NoError(t, err)
		require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
		require.NoError(t, c.Write(ctx, websocket.MessageText, []byte("hello")))
		_, b, err := c.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, "hello", string(b))
		require.NoError(t, c.Close(websocket.StatusNormalClosure, ""))

		resp, err = hc.Get("http://pipe.test/other")
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.NoError(t, resp.Body.Close())

		tr.Close()
		_, err = hc.Get("http://pipe.test/ws")
		require.True(t, errors.Is(err, errClosed), "%v", err)
	})
}

// TestTransportCloseEndsHijackedHandlers: Close closes the pipes, so a
// handler still reading a hijacked connection returns, and Close waits for
// it (the goroutine would otherwise outlive the bubble).
func TestTransportCloseEndsHijackedHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		returned := make(chan struct{})
		tr := NewTransport(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer close(returned)
			ws, err := websocket.Accept(w, r, nil)
			if !assertNoError(t, err) {
				return
			}
			_, _, _ = ws.Read(context.Background()) // blocks until the pipe closes
		}))
		c, _, err := websocket.Dial(context.Background(), "ws://pipe.test/", &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
		require.NoError(t, err)
		synctest.Wait()
		select {
		case <-returned:
			t.Fatal("handler returned before Close")
		default:
		}
		tr.Close()
		<-returned // Close waited for it: already closed
		_ = c.CloseNow()
	})
}

func TestDecodeEvents(t *testing.T) {
	raw := []json.RawMessage{
		json.RawMessage(`{"kind":"event","payload":{"sourceSeq":1,"sourceEventId":"e1","eventType":"runner.connected","payload":{}}}`),
		json.RawMessage(`{"kind":"event","payload":{"sourceSeq":2,"sourceEventId":"e2","eventType":"item.delta","payload":{"text":"x"}}}`),
	}
	evs := DecodeEvents(t, raw)
	require.Len(t, evs, 2)
	require.EqualValues(t, 2, evs[1].SourceSeq)
	require.Equal(t, "e2", evs[1].SourceEventID)
	require.JSONEq(t, `{"text":"x"}`, string(evs[1].Payload))
	require.Equal(t, []Event{evs[1]}, OfType(evs, "item.delta"))
	require.Empty(t, OfType(evs, "run.terminal"))
}
