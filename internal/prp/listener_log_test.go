package prp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// logLines decodes JSON log output.
func logLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		lines = append(lines, m)
	}
	return lines
}

// TestListenerPeerLogRateLimited: refused requests are logged at the
// default level with the peer's address, at most one line per
// peerLogInterval; the next line says how many were suppressed.
func TestListenerPeerLogRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs syncBuffer
		l := prp.NewPipeListener(prp.TestRunPath)
		prp.SetListenerLogger(l, slog.New(slog.NewJSONHandler(&logs, nil)))
		refuse := func() {
			r := httptest.NewRequest(http.MethodGet, "/healthz?token=secret_in_query", nil)
			r.RemoteAddr = "192.0.2.7:4242"
			w := httptest.NewRecorder()
			l.ServeHTTP(w, r)
			require.Equal(t, http.StatusBadRequest, w.Code)
		}
		for range 5 {
			refuse()
		}
		lines := logLines(t, logs.String())
		require.Len(t, lines, 1)
		require.Equal(t, "INFO", lines[0]["level"])
		require.Equal(t, "192.0.2.7:4242", lines[0]["peer"])
		time.Sleep(prp.PeerLogInterval)
		refuse()
		lines = logLines(t, logs.String())
		require.Len(t, lines, 2)
		require.EqualValues(t, 4, lines[1]["suppressed"])
		require.NotContains(t, logs.String(), "secret_in_query", "the peer's request text is not logged")
		require.NotContains(t, logs.String(), "healthz")
		prp.ClosePipeListener(l)
	})
}

// TestListenerLogsStrayHandshakeWithoutSecrets: over loopback, a refused
// upgrade and a stray peer's bogus challenge are logged at the default
// level with the peer's address; the bootstrap that follows puts neither
// the ticket, its credential id nor the lease token in any line.
func TestListenerLogsStrayHandshakeWithoutSecrets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	ln, err := prp.Listen(prp.ListenConfig{Address: "127.0.0.1", Port: 0, Path: prp.ConnectPath(runnerIdentity.RunID), Logger: logger})
	require.NoError(t, err)
	defer ln.Close()
	url := "ws://" + ln.Addr().String() + ln.Path()
	core := newTestCore(nil)
	defer core.Close()
	ticket, err := core.MintTicket()
	require.NoError(t, err)
	u := newRunnerUser()
	cfg := prp.ClientConfig{Listener: ln, Ticket: ticket, Logger: logger}
	u.hooks(&cfg)
	_, done := startClient(t, ctx, cfg)

	require.Equal(t, http.StatusBadRequest, prp.RawUpgrade(t, ln.Addr().String(), "/elsewhere", ""))
	strayPeer(t, ctx, url)
	require.NoError(t, core.Connect(ctx, url))
	u.waitFor(ctx, t, "bootstrap", func(u *runnerUser) bool { return len(u.welcomes) == 1 })

	// The stray peer's connection fails on its own goroutine and may log
	// after the core's bootstrap: wait for both lines, bounded.
	want := []string{"listener refused a request that is not the exact upgrade", "listener peer failed the handshake"}
	byMsg := map[string]map[string]any{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		byMsg = map[string]map[string]any{}
		for _, l := range logLines(t, logs.String()) {
			byMsg[l["msg"].(string)] = l
		}
		if (byMsg[want[0]] != nil && byMsg[want[1]] != nil) || time.Now().After(deadline) {
			break
		}
	}
	for msg, level := range map[string]string{
		"listener refused a request that is not the exact upgrade": "INFO",
		"listener peer failed the handshake":                       "WARN",
	} {
		l, ok := byMsg[msg]
		require.True(t, ok, "no line %q in:\n%s", msg, logs.String())
		require.Equal(t, level, l["level"])
		require.True(t, strings.HasPrefix(l["peer"].(string), "127.0.0.1:"), "%v", l)
	}
	require.Contains(t, byMsg["listener peer failed the handshake"]["err"], prp.ErrServerProof.Error())
	requireNoSecrets(t, logs.String(), ticket, u.welcomes[0].Lease.Token)
	cancel()
	<-done
}

// syncBuffer is a log sink safe for concurrent handlers.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// requireNoSecrets checks log output for a ticket, a lease token and the
// ticket's credential id.
func requireNoSecrets(t *testing.T, out string, secrets ...string) {
	t.Helper()
	for _, sec := range secrets {
		require.NotEmpty(t, sec)
		require.NotContains(t, out, sec)
		require.NotContains(t, out, prp.CredentialID(sec))
	}
}
