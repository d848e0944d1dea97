package provider

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// TestACP26to29_LossSequence: every loss reason maps to
// harness.diagnostic{lossReason} with reason-derived text, then
// turn.failed and one run.terminal (failed); the open tool call closes
// failed and then gets item.failed (workspace.md §8); no run.result.proposed
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
			prpschema.RequireValidEvents(t, evs)
			got := types(evs)
			require.Equal(t, []string{"harness.diagnostic", "tool.execution.completed", "item.completed", "item.failed", "turn.failed", "run.terminal"}, got[3:])
			require.Equal(t, map[string]any{"kind": "tool_call", "message": evs[7].Payload["message"]}, evs[6].Payload, "the message of the failure class alone")
			d := evs[3].Payload
			require.Equal(t, string(r), d["lossReason"])
			require.Equal(t, r.message(), d["message"])
			term := evs[len(evs)-1].Payload
			require.Equal(t, "failed", term["turnTerminalState"])
			require.Equal(t, "failed", evs[4].Payload["status"], "unfinished tool calls end with the turn")
		})
	}
	require.Equal(t, LossOther.message(), LossReason("bogus").message())
	require.Equal(t, LossOther, LossReasonOf(errors.New("x")))
	require.Equal(t, LossReason(""), LossReasonOf(nil))
}
