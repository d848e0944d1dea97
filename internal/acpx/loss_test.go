package acpx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestACP26to29_LossSequence: every loss reason maps to
// harness.diagnostic{lossReason} with reason-derived text, then
// turn.failed, one run.result.proposed and one run.terminal (failed)
// (scenarios 26 transport_closed, 27 transport_closed, 28 write_error,
// 29 provider_exit).
func TestACP26to29_LossSequence(t *testing.T) {
	for _, r := range []LossReason{LossProviderExit, LossStdinEOF, LossTransportClosed, LossWriteError, LossRPCFailure, LossHeartbeatTimeout, LossOther} {
		t.Run(string(r), func(t *testing.T) {
			mp, st := testMapper(), &MapState{}
			evs := mp.TurnStarted(st, "turn-1")
			evs = append(evs, mp.Update(st, "turn-1", upd(t, `{"sessionUpdate":"tool_call","toolCallId":"c","title":"t","status":"in_progress"}`))...)
			evs = append(evs, mp.ChannelLost(st, "turn-1", r)...)
			requireValidEvents(t, evs)
			got := types(evs)
			require.Equal(t, []string{"harness.diagnostic", "tool.execution.completed", "item.completed", "turn.failed", "run.result.proposed", "run.terminal"}, got[3:])
			d := evs[3].Payload
			require.Equal(t, string(r), d["lossReason"])
			require.Equal(t, r.Message(), d["message"])
			term := evs[len(evs)-1].Payload
			require.Equal(t, "failed", term["turnTerminalState"])
			require.Equal(t, "failed", evs[4].Payload["status"], "unfinished tool calls end with the turn")
		})
	}
	require.Equal(t, LossOther.Message(), LossReason("bogus").Message())
	require.Equal(t, LossOther, LossReasonOf(errors.New("x")))
	require.Equal(t, LossReason(""), LossReasonOf(nil))
}

// TestACP29_LossLatchedBetweenTurns: the agent exits while idle; the
// next turn fails at once with provider_exit and nothing is written.
func TestACP29_LossLatchedBetweenTurns(t *testing.T) {
	c := handshaken(t)
	require.NoError(t, c.EndOfStream(), "idle: nothing outstanding")
	require.Equal(t, LossProviderExit, c.Loss())
	require.False(t, c.LatchLoss(LossTransportClosed), "only the first loss counts")
	_, err := c.Prompt("turn-1", "echo x")
	var lost *LostError
	require.ErrorAs(t, err, &lost)
	require.Equal(t, LossProviderExit, lost.Reason)
	require.False(t, c.Record().Prompted)

	// A fatal stream error latches rpc_failure.
	c = handshaken(t)
	_, err = c.Feed([]byte(strings.Repeat("x\n", MaxConsecutiveBadLines)))
	require.Error(t, err)
	require.Equal(t, LossRPCFailure, c.Record().Process.Wire.Loss)
}

// TestFakeacpSwitchesMore covers the remaining switches: session/close,
// replayed history on load, load failing on an empty session, and queued
// busy prompts.
func TestFakeacpSwitchesMore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	t.Run("supports-close", func(t *testing.T) {
		p := startAgent(t, ConnOptions{}, "--supports-close")
		openCold(t, p, "claude")
		_, err := p.conn.callWith(ctx, nil, (*Client).CloseSession)
		require.NoError(t, err)
		_, err = p.conn.callWith(ctx, nil, (*Client).CloseSession)
		require.Equal(t, CodeResourceNotFound, rpcCode(err), "closing twice: -32002, which session.destroy ignores")
	})
	t.Run("replay-load-session-updates", func(t *testing.T) {
		// The same process keeps history: load replays what the turn said.
		p := startAgent(t, ConnOptions{}, "--supports-load-session", "--replay-load-session-updates")
		openCold(t, p, "claude")
		_, err := p.conn.Prompt("turn-1", "echo remembered")
		require.NoError(t, err)
		p.until(t, settled)
		_, err = p.conn.callWith(ctx, nil, func(c *Client) (Call, error) { return c.LoadSession(nil) })
		require.NoError(t, err)
		require.EqualValues(t, 1, p.conn.Record().Process.Wire.ReplayedUpdates)
	})
	t.Run("load-session-fails-on-empty", func(t *testing.T) {
		rec := Record{ACPSessionID: "sess-0042", Cwd: "/w", Prompted: true}
		p := startAgent(t, ConnOptions{Record: rec}, "--supports-load-session", "--load-session-fails-on-empty")
		err := p.conn.Open(ctx, OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/w", Resume: true})
		require.Equal(t, ClassSessionResumeRequired, ClassOf(err))
		require.Equal(t, CodeResourceNotFound, rpcCode(err))
	})
	t.Run("busy-prompt-queue", func(t *testing.T) {
		p := startAgent(t, ConnOptions{}, "--busy-prompt", "queue")
		openCold(t, p, "claude")
		sid := p.conn.Record().ACPSessionID
		_, err := p.conn.Prompt("turn-1", "sleep 200")
		require.NoError(t, err)
		// A raw second prompt (runnerd never sends one) waits its turn.
		in, err := p.conn.Call(ctx, MethodSessionPrompt, PromptParams{SessionID: sid, Prompt: []ContentBlock{{Type: "text", Text: "echo second"}}})
		require.NoError(t, err)
		require.JSONEq(t, `{"stopReason":"end_turn"}`, string(in.Result))
	})
	t.Run("kill-terminal-held", func(t *testing.T) {
		p := startAgent(t, ConnOptions{HoldUnsupported: true})
		openCold(t, p, "claude")
		_, err := p.conn.Prompt("turn-1", "kill-terminal sleep 5")
		require.NoError(t, err)
		for _, method := range []string{"terminal/create", "terminal/kill", "terminal/output", "terminal/release"} {
			got := p.until(t, func(m Inbound) bool { return m.Kind == KindRequest })
			m := got[len(got)-1]
			require.Equal(t, method, m.Method)
			var result any = map[string]any{}
			switch method {
			case "terminal/create":
				result = map[string]any{"terminalId": "term-1"}
			case "terminal/output":
				result = map[string]any{"output": "killed", "truncated": false}
			}
			require.NoError(t, p.conn.Respond(m.ID, result))
		}
		got := p.until(t, settled)
		require.Equal(t, StopEndTurn, got[len(got)-1].Outcome.StopReason)
	})
}

func rpcCode(err error) int {
	var re *RPCError
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
	p := startAgent(t, ConnOptions{Persist: func(r Record) error {
		persisted = append(persisted, r.Process.Wire.NextRequestID)
		return nil
	}})
	openCold(t, p, "claude")
	require.Equal(t, []int64{2, 3}, persisted, "initialize (id 1) and session/new (id 2) were durable first")
	init := p.received(t, MethodInitialize)
	require.EqualValues(t, 1, init[0]["id"])

	boom := errors.New("disk full")
	p = startAgent(t, ConnOptions{Persist: func(Record) error { return boom }})
	err := p.conn.Open(context.Background(), OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/w"})
	require.ErrorIs(t, err, boom)
	require.Empty(t, p.received(t, MethodInitialize), "nothing written without a durable record")
}

// TestACP28_WriteError: a failed stdin write latches write_error and
// the call fails at once; nothing hangs.
func TestACP28_WriteError(t *testing.T) {
	r, w := io.Pipe()
	defer r.Close()
	c := NewConn(r, failingWriter{}, ConnOptions{})
	err := c.Open(context.Background(), OpenOptions{Agent: "claude", Command: "x", Cwd: "/w"})
	require.ErrorIs(t, err, ErrWrite)
	require.Equal(t, LossWriteError, LossReasonOf(err))
	require.Equal(t, LossWriteError, c.Record().Process.Wire.Loss)
	require.NoError(t, w.Close())
	// The unanswered initialize makes the end a disconnect; the latched
	// loss stays write_error.
	require.Equal(t, ClassAgentDisconnected, ClassOf(c.Wait(context.Background())))
	require.Equal(t, LossWriteError, c.Record().Process.Wire.Loss)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.EROFS }

// TestACP20_RestartMidTurn: a runnerd restart mid-turn (record
// through JSON between two stdout reads, even mid-line) continues the same
// turn and item: no second item.started, no duplicate delta.
func TestACP20_RestartMidTurn(t *testing.T) {
	c := handshaken(t)
	mp := testMapper()
	rec := c.Record()
	evs := mp.TurnStarted(&rec.Process.Map, "turn-1")
	c = NewClient(rec, ClientOptions{})
	call, err := c.Prompt("turn-1", "sleep 3000")
	require.NoError(t, err)
	chunk := func(text string) string {
		return `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"agent_message_chunk","messageId":"m1","content":{"type":"text","text":"` + text + `"}}}}` + "\n"
	}
	stream := chunk("before ") + chunk("after") + fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"stopReason":"end_turn"}}`, call.ID) + "\n"
	cut := len(chunk("before ")) + 20 // crash mid-line
	step := func(c *Client, st *MapState, p string) []Event {
		msgs, err := c.Feed([]byte(p))
		require.NoError(t, err)
		var out []Event
		for _, m := range msgs {
			switch m.Kind {
			case KindUpdate:
				out = append(out, mp.Update(st, m.TurnID, *m.Update)...)
			case KindTurnSettled:
				out = append(out, mp.Settle(st, SettlementOf(*m.Outcome, false))...)
			}
		}
		return out
	}
	evs = append(evs, step(c, c.Map(), stream[:cut])...)
	b, err := json.Marshal(c.Record()) // the durable write
	require.NoError(t, err)
	var back Record
	require.NoError(t, json.Unmarshal(b, &back))
	c = NewClient(back, ClientOptions{})
	evs = append(evs, step(c, c.Map(), stream[cut:])...)
	requireValidEvents(t, evs)
	require.Equal(t, []string{"turn.started", "item.started", "item.delta", "item.delta", "item.completed", "turn.completed", "run.result.proposed", "run.terminal"}, types(evs))
	require.Equal(t, evs[1].ItemID, evs[3].ItemID)
	require.Equal(t, "before after", evs[4].Payload["text"])
}
