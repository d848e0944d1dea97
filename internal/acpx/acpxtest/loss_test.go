package acpxtest

import (
	"context"
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/provider"
)

// TestFakeacpSwitchesMore covers the remaining switches: session/close,
// replayed history on load, load failing on an empty session, and queued
// busy prompts.
func TestFakeacpSwitchesMore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	t.Run("supports-close", func(t *testing.T) {
		p := startAgent(t, ConnOptions{}, "--supports-close")
		openCold(t, p, "claude")
		_, err := p.conn.callWith(ctx, nil, (*acpx.Client).CloseSession)
		require.NoError(t, err)
		_, err = p.conn.callWith(ctx, nil, (*acpx.Client).CloseSession)
		require.Equal(t, provider.CodeResourceNotFound, rpcCode(err), "closing twice: -32002, which session.destroy ignores")
	})
	t.Run("replay-load-session-updates", func(t *testing.T) {
		// The same process keeps history: load replays what the turn said.
		p := startAgent(t, ConnOptions{}, "--supports-load-session", "--replay-load-session-updates")
		openCold(t, p, "claude")
		_, err := p.conn.Prompt("turn-1", "echo remembered")
		require.NoError(t, err)
		p.until(t, settled)
		_, err = p.conn.callWith(ctx, nil, func(c *acpx.Client) (provider.Call, error) { return c.LoadSession(nil) })
		require.NoError(t, err)
		require.EqualValues(t, 1, p.conn.Record().Process.Wire.ReplayedUpdates)
	})
	t.Run("load-session-fails-on-empty", func(t *testing.T) {
		rec := provider.Record{ACPSessionID: "sess-0042", Cwd: "/w", Prompted: true}
		p := startAgent(t, ConnOptions{Record: rec}, "--supports-load-session", "--load-session-fails-on-empty")
		err := p.conn.Open(ctx, OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/w", Resume: true})
		require.Equal(t, provider.ClassSessionResumeRequired, provider.ClassOf(err))
		require.Equal(t, provider.CodeResourceNotFound, rpcCode(err))
	})
	t.Run("busy-prompt-queue", func(t *testing.T) {
		p := startAgent(t, ConnOptions{}, "--busy-prompt", "queue")
		openCold(t, p, "claude")
		sid := p.conn.Record().ACPSessionID
		_, err := p.conn.Prompt("turn-1", "sleep 200")
		require.NoError(t, err)
		// A raw second prompt (runnerd never sends one) waits its turn.
		in, err := p.conn.Call(ctx, provider.MethodSessionPrompt, acpx.PromptParams{SessionID: sid, Prompt: []provider.ContentBlock{{Type: "text", Text: "echo second"}}})
		require.NoError(t, err)
		require.JSONEq(t, `{"stopReason":"end_turn"}`, string(in.Result))
	})
	t.Run("kill-terminal-held", func(t *testing.T) {
		p := startAgent(t, ConnOptions{HoldUnsupported: true})
		openCold(t, p, "claude")
		_, err := p.conn.Prompt("turn-1", "kill-terminal sleep 5")
		require.NoError(t, err)
		for _, method := range []string{"terminal/create", "terminal/kill", "terminal/output", "terminal/release"} {
			got := p.until(t, func(m provider.Inbound) bool { return m.Kind == provider.KindRequest })
			m := got[len(got)-1]
			require.Equal(t, method, m.Method)
			var result any = map[string]any{}
			switch method {
			case "terminal/create":
				result = map[string]any{"terminalId": "term-1"}
			case "terminal/output":
				result = map[string]any{"output": "killed", "truncated": false}
			}
			require.NoError(t, p.conn.respond(m.ID, result))
		}
		got := p.until(t, settled)
		require.Equal(t, provider.StopEndTurn, got[len(got)-1].Outcome.StopReason)
	})
}

func rpcCode(err error) int {
	var re *provider.RPCError
	if errors.As(err, &re) {
		return re.Code
	}
	return 0
}

// TestPersistBeforeWrite: the record handed to Persist already counts the
// id of the request about to be written (acp.md §3.2), and a persist
// failure aborts the write.
func TestPersistBeforeWrite(t *testing.T) {
	var persisted []int64
	p := startAgent(t, ConnOptions{Persist: func(r provider.Record) error {
		persisted = append(persisted, r.Process.Wire.NextRequestID)
		return nil
	}})
	openCold(t, p, "claude")
	require.Equal(t, []int64{2, 3}, persisted, "initialize (id 1) and session/new (id 2) were durable first")
	init := p.received(t, provider.MethodInitialize)
	require.EqualValues(t, 1, init[0]["id"])

	boom := errors.New("disk full")
	p = startAgent(t, ConnOptions{Persist: func(provider.Record) error { return boom }})
	err := p.conn.Open(context.Background(), OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/w"})
	require.ErrorIs(t, err, boom)
	require.Empty(t, p.received(t, provider.MethodInitialize), "nothing written without a durable record")
}

// TestACP28_WriteError: a failed stdin write latches write_error and
// the call fails at once; nothing hangs.
func TestACP28_WriteError(t *testing.T) {
	r, w := io.Pipe()
	defer r.Close()
	c := NewConn(r, failingWriter{}, ConnOptions{})
	err := c.Open(context.Background(), OpenOptions{Agent: "claude", Command: "x", Cwd: "/w"})
	require.ErrorIs(t, err, provider.ErrWrite)
	require.Equal(t, provider.LossWriteError, provider.LossReasonOf(err))
	require.Equal(t, provider.LossWriteError, c.Record().Process.Wire.Loss)
	require.NoError(t, w.Close())
	// The unanswered initialize makes the end a disconnect; the latched
	// loss stays write_error.
	require.Equal(t, provider.ClassAgentDisconnected, provider.ClassOf(c.Wait(context.Background())))
	require.Equal(t, provider.LossWriteError, c.Record().Process.Wire.Loss)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.EROFS }
