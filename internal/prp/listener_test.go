package prp

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

const testRunPath = "/api/runner/v1/connect/run_1"

// rawUpgrade sends a hand-written HTTP request to addr and returns the status code.
func rawUpgrade(t *testing.T, addr, target string, extra string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n%s\r\n", target, extra)
	_, err = c.Write([]byte(req))
	require.NoError(t, err)
	var code int
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	_, err = fmt.Sscanf(string(buf[:n]), "HTTP/1.1 %d", &code)
	require.NoError(t, err, "%q", buf[:n])
	return code
}

// TestPRP46_ListenerExactUpgrade ports prp.md §15 scenario 46 and the
// listener rules of §1.2: a non-default address is accepted (the warning
// is runnerd's configuration's, logged once, not the listener's);
// anything but the exact upgrade on the configured path gets HTTP 400; the
// listener keeps accepting while a connection is up; the path rotates in place.
func TestPRP46_ListenerExactUpgrade(t *testing.T) {
	var logs bytes.Buffer
	l, err := Listen(ListenConfig{Address: "127.0.0.1", Port: 0, Path: testRunPath,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	defer l.Close()
	require.NotContains(t, logs.String(), "non-default address")
	addr := l.Addr().String()

	for _, c := range []struct{ target, extra string }{
		{"/api/runner/v1/connect/run_2", ""},
		{testRunPath + "?x=1", ""},
		{testRunPath + "?", ""},
		{testRunPath + "/", ""},
		{"/api/runner/v1/connect/run%5F1", ""},
		{"/healthz", ""},
		{testRunPath, "Sec-WebSocket-Extensions: permessage-deflate\r\n"},
		{testRunPath, "Sec-WebSocket-Protocol: paperclip\r\n"},
	} {
		require.Equal(t, http.StatusBadRequest, rawUpgrade(t, addr, c.target, c.extra), "%s %q", c.target, c.extra)
	}
	resp, err := http.Get("http://" + addr + testRunPath) // not an upgrade
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dial := func() *websocket.Conn {
		c, resp, err := websocket.Dial(ctx, "ws://"+addr+l.Path(), nil)
		require.NoError(t, err)
		require.Empty(t, resp.Header.Get("Sec-WebSocket-Protocol"))
		require.Empty(t, resp.Header.Get("Sec-WebSocket-Extensions"))
		return c
	}
	c1 := dial()
	a1, err := l.accept(ctx)
	require.NoError(t, err)
	c2 := dial() // keeps accepting while the first is up
	a2, err := l.accept(ctx)
	require.NoError(t, err)
	require.NoError(t, c1.Write(ctx, websocket.MessageText, []byte("one")))
	b, err := a1.ws.ReadMsg(ctx)
	require.NoError(t, err)
	require.Equal(t, "one", string(b))

	// A binary message is a protocol error.
	require.NoError(t, c2.Write(ctx, websocket.MessageBinary, []byte{1}))
	_, err = a2.ws.ReadMsg(ctx)
	require.ErrorIs(t, err, errNonTextFrame)

	// Rotation: the old path is refused, the new one accepted, no rebind.
	require.NoError(t, l.SetPath("/api/runner/v1/connect/run_2"))
	require.Equal(t, http.StatusBadRequest, rawUpgrade(t, addr, testRunPath, ""))
	c3 := dial()
	a3, err := l.accept(ctx)
	require.NoError(t, err)
	require.Error(t, l.SetPath("/api/runner/v1/connect/a/b"))

	for _, c := range []*websocket.Conn{c1, c2, c3} {
		_ = c.CloseNow()
	}
	for _, a := range []accepted{a1, a2, a3} {
		_ = a.ws.Close()
	}
	require.NoError(t, l.Close())
	_, err = l.accept(ctx)
	require.ErrorIs(t, err, errListenerClosed)
}

func TestListenerBindConflict(t *testing.T) {
	l, err := Listen(ListenConfig{Address: "127.0.0.1", Port: 0, Path: testRunPath})
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = Listen(ListenConfig{Address: "127.0.0.1", Port: port, Path: testRunPath})
	require.ErrorIs(t, err, errBindConflict)
	require.True(t, strings.HasPrefix(err.Error(), bindConflictCode))
	_, err = Listen(ListenConfig{Address: "127.0.0.1", Port: 0, Path: "/api/runner/v1/connect/"})
	require.ErrorIs(t, err, errBindConflict)
}

// TestListenerUpgradeDeadline: a client that opens TCP and never finishes its
// request is cut off by the 2 s upgrade bound.
func TestListenerUpgradeDeadline(t *testing.T) {
	l, err := Listen(ListenConfig{Address: "127.0.0.1", Port: 0, Path: testRunPath})
	require.NoError(t, err)
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("GET " + testRunPath + " HTTP/1.1\r\n"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(4*UpgradeTimeout)))
	_, err = c.Read(make([]byte, 512))
	// The server closes (EOF) or answers an error; either way not our read deadline.
	var ne net.Error
	if err != nil && errorAs(err, &ne) {
		require.False(t, ne.Timeout(), "server did not enforce the upgrade deadline")
	}
}
