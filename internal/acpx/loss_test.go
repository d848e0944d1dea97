package acpx

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestACP26to29_LossSequence: every loss reason maps to
// harness.diagnostic{lossReason} with reason-derived text, then
// turn.failed and one run.terminal (failed), with no run.result.proposed
// without an accepted result or a completion contract (tools.md §4)
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
			require.Equal(t, []string{"harness.diagnostic", "tool.execution.completed", "item.completed", "turn.failed", "run.terminal"}, got[3:])
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
	require.Equal(t, []string{"turn.started", "item.started", "item.delta", "item.delta", "item.completed", "turn.completed", "run.terminal"}, types(evs))
	require.Equal(t, evs[1].ItemID, evs[3].ItemID)
	require.Equal(t, "before after", evs[4].Payload["text"])
}
