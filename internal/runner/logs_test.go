package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/agent"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

// logBuffer collects JSON log lines; safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the decoded lines with msg == msg.
func (b *logBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	text := b.buf.String()
	b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// startLogged runs the runner like harness.start, logging JSON into logs.
func (h *harness) startLogged(cfg config.Config, opts options, logs *logBuffer) *running {
	h.t.Helper()
	tok, err := h.core.MintTicket()
	require.NoError(h.t, err)
	ticket, err := config.NewBootstrapTicket(tok)
	require.NoError(h.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	go func() { r.done <- runLoop(ctx, cfg, ticket, logger, opts) }()
	h.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(waitBound):
			h.t.Error("runner did not stop")
		}
	})
	return r
}

// TestCommandFailedLogNamesCodeAndMessage: the "command failed" warning
// carries the failure's code and the message the journal recorded (the
// command_result's), credential-shaped text redacted, for a plain handler
// error and for a protocol-coded one.
func TestCommandFailedLogNamesCodeAndMessage(t *testing.T) {
	const secret = "sk-ant-api03-SECRETSECRETSECRET0123456789"
	h := newHarness(t, nil)
	var logs logBuffer
	fail := func(emit) handler {
		return func(_ context.Context, cmd *prp.Command) (json.RawMessage, error) {
			if strings.Contains(string(cmd.Payload), "coded") {
				return nil, &agent.CommandError{Code: "session_handshake_timeout", Message: "session.open did not finish within 30s"}
			}
			return nil, errors.New("start turn: agent refused key " + secret)
		}
	}
	h.startLogged(h.config(false), options{Handlers: map[string]func(emit) handler{"turn.start": fail}}, &logs)

	plain := h.queue("turn.start", `{"text":"plain"}`)
	require.Equal(t, "failed", h.waitResult(plain.CommandID).Status)
	coded := h.queue("turn.start", `{"text":"coded"}`)
	require.Equal(t, "failed", h.waitResult(coded.CommandID).Status)

	recs := logs.records(t, "command failed")
	require.Len(t, recs, 2, "the warning is logged when the result is recorded")
	require.Equal(t, plain.CommandID, recs[0]["commandId"])
	require.Equal(t, state.CodeCommandExecutionFailed, recs[0]["code"])
	require.Equal(t, "start turn: agent refused key "+state.Redacted, recs[0]["message"])
	require.Equal(t, coded.CommandID, recs[1]["commandId"])
	require.Equal(t, "session_handshake_timeout", recs[1]["code"])
	require.Equal(t, "session.open did not finish within 30s", recs[1]["message"])
	logs.mu.Lock()
	require.NotContains(t, logs.buf.String(), secret)
	logs.mu.Unlock()
}
