package prp

import (
	"context"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

func errorAs(err error, target any) bool { return errors.As(err, target) }

// freePort returns a loopback port with nothing listening.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return p
}

// TestPRP02_PinnedConnect ports prp.md §15 scenario 2: pinned addresses
// are tried in sorted order, each bounded, and total failure reports
// "2/2 pinned address attempts" without passing the caller's deadline.
func TestPRP02_PinnedConnect(t *testing.T) {
	port := freePort(t)
	r := fakeResolver{"runner.test": {"127.0.0.3", "127.0.0.2"}}
	ctx := context.Background()
	d, err := NewDialer(ctx, DialerConfig{URL: "ws://runner.test:" + itoa(port) + "/api/runner/v1/connect/r", Resolver: r})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.2", d.Addrs()[0].Addr().String(), "sorted")
	_, err = d.dial(ctx, newActivity(), defaultMaxFrameBytes)
	require.ErrorIs(t, err, errConnectFailed)
	require.Contains(t, err.Error(), "2/2 pinned address attempts")

	// The first pinned address refuses; the second serves the upgrade.
	ln, err := net.Listen("tcp", "127.0.0.3:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err == nil {
			_ = c.Write(r.Context(), websocket.MessageText, []byte("hi"))
			_ = c.CloseNow()
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	port = ln.Addr().(*net.TCPAddr).Port
	d, err = NewDialer(ctx, DialerConfig{URL: "ws://runner.test:" + itoa(port) + "/x", Resolver: r})
	require.NoError(t, err)
	ws, err := d.dial(ctx, newActivity(), defaultMaxFrameBytes)
	require.NoError(t, err)
	b, err := ws.ReadMsg(ctx)
	require.NoError(t, err)
	require.Equal(t, "hi", string(b))
	_ = ws.Close()
	d.CloseIdle()

	// The lifecycle deadline bounds the whole connect.
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	<-dctx.Done()
	_, err = d.dial(dctx, newActivity(), defaultMaxFrameBytes)
	require.Error(t, err)
}

func TestDialerCABundleRules(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	_, err := NewDialer(ctx, DialerConfig{URL: "ws://127.0.0.1:1/x", CABundlePath: filepath.Join(dir, "ca.pem")})
	require.ErrorIs(t, err, errCABundle, "ca bundle only with wss://")
	r := fakeResolver{"public.test": {"192.0.2.1"}}
	for name, setup := range map[string]func(p string){
		"missing": func(string) {},
		"world-writable": func(p string) {
			require.NoError(t, os.WriteFile(p, []byte("x"), 0o666))
			require.NoError(t, os.Chmod(p, 0o666))
		},
		"symlink": func(p string) {
			require.NoError(t, os.WriteFile(p+".real", []byte("x"), 0o600))
			require.NoError(t, os.Symlink(p+".real", p))
		},
		"directory": func(p string) { require.NoError(t, os.Mkdir(p, 0o700)) },
		"too large": func(p string) { require.NoError(t, os.WriteFile(p, make([]byte, maxCABundleBytes+1), 0o600)) },
		"no certs":  func(p string) { require.NoError(t, os.WriteFile(p, []byte("not pem"), 0o600)) },
	} {
		p := filepath.Join(dir, name)
		setup(p)
		_, err := NewDialer(ctx, DialerConfig{URL: "wss://public.test/x", CABundlePath: p, Resolver: r})
		require.ErrorIs(t, err, errCABundle, name)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestDialerWSSWithPrivateCA: wss:// verifies the server against the
// platform roots plus the private CA bundle, hostname checks on.
func TestDialerWSSWithPrivateCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err == nil {
			_ = c.Write(r.Context(), websocket.MessageText, []byte("tls"))
			_ = c.CloseNow()
		}
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	url := "wss://" + strings.TrimPrefix(srv.URL, "https://") + "/x"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	d, err := NewDialer(ctx, DialerConfig{URL: url})
	require.NoError(t, err)
	_, err = d.dial(ctx, newActivity(), defaultMaxFrameBytes)
	require.Error(t, err, "unknown CA refused")

	d, err = NewDialer(ctx, DialerConfig{URL: url, CABundlePath: ca})
	require.NoError(t, err)
	ws, err := d.dial(ctx, newActivity(), defaultMaxFrameBytes)
	require.NoError(t, err)
	b, err := ws.ReadMsg(ctx)
	require.NoError(t, err)
	require.Equal(t, "tls", string(b))
	_ = ws.Close()
	d.CloseIdle()
}
