package acpx

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// TestACP29_LossLatchedBetweenTurns: the agent exits while idle; the
// next turn fails at once with provider_exit and nothing is written.
func TestACP29_LossLatchedBetweenTurns(t *testing.T) {
	c := handshaken(t)
	require.NoError(t, c.EndOfStream(), "idle: nothing outstanding")
	require.Equal(t, provider.LossProviderExit, c.Loss())
	require.False(t, c.LatchLoss(provider.LossTransportClosed), "only the first loss counts")
	_, err := c.Prompt("turn-1", "echo x")
	var lost *provider.LostError
	require.ErrorAs(t, err, &lost)
	require.Equal(t, provider.LossProviderExit, lost.Reason)
	require.False(t, c.Record().Prompted)

	// A fatal stream error latches rpc_failure.
	c = handshaken(t)
	_, err = c.Feed([]byte(strings.Repeat("x\n", provider.MaxConsecutiveBadLines)))
	require.Error(t, err)
	require.Equal(t, provider.LossRPCFailure, c.Record().Process.Wire.Loss)
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
	step := func(c *Client, st *provider.MapState, p string) []provider.Event {
		msgs, err := c.Feed([]byte(p))
		require.NoError(t, err)
		var out []provider.Event
		for _, m := range msgs {
			switch m.Kind {
			case provider.KindUpdate:
				out = append(out, mp.Update(st, m.TurnID, *m.Update)...)
			case provider.KindTurnSettled:
				out = append(out, mp.Settle(st, provider.SettlementOf(*m.Outcome, false))...)
			}
		}
		return out
	}
	evs = append(evs, step(c, c.Map(), stream[:cut])...)
	b, err := json.Marshal(c.Record()) // the durable write
	require.NoError(t, err)
	var back provider.Record
	require.NoError(t, json.Unmarshal(b, &back))
	c = NewClient(back, ClientOptions{})
	evs = append(evs, step(c, c.Map(), stream[cut:])...)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, []string{"turn.started", "item.started", "item.delta", "item.delta", "item.completed", "turn.completed", "run.terminal"}, types(evs))
	require.Equal(t, evs[1].ItemID, evs[3].ItemID)
	require.Equal(t, "before after", evs[4].Payload["text"])
}
