package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestShutdownWithoutAcks: an orderly runnerd stop happens after the link
// is gone, so nothing sent is acknowledged any more and the flow-control
// gate (prp.md §8.5) stays shut. The stop still consumes the agent's exit
// frame (acp.md §3.6): harness.exited carries the agent's own exit, the
// turn in flight ends once, and the agent's group is gone. Were the reader
// held at the gate, the stop would run out its wait and cancel the reader,
// and no harness.exited would be committed.
func TestShutdownWithoutAcks(t *testing.T) {
	for _, tc := range []struct {
		name, prompt string
	}{
		{"idle", ""},
		{"midTurn", "sleep 20000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.prepare()
			r.open()
			if tc.prompt != "" {
				r.turn(tc.prompt)
				r.sink.waitEvent(t, "turn.started")
			}
			pgid := agentPgid(t, r.sessionDir())
			_, before := r.sink.snapshot()
			r.sink.mu.Lock()
			r.sink.gate = make(chan struct{}) // the link is gone: no ACK will open it
			r.sink.mu.Unlock()

			ctx, cancel := context.WithTimeout(context.Background(), testWait)
			defer cancel()
			r.m.Shutdown(ctx)

			_, evs := r.sink.snapshot()
			stop := since(evs, len(before))
			require.Equal(t, 1, count(stop, "harness.exited"), "the exit frame is consumed, not abandoned: %v", types(stop))
			ex := payloadOf(stop, "harness.exited")
			// The frame carries the agent's code, or the signal when pcwrap's
			// shutdown ended it before it left on stdin's end; without either
			// the event was made without the frame.
			require.True(t, ex["exitCode"] != nil || ex["signal"] != nil,
				"the agent's own exit, from its exit frame: %v", ex)
			if tc.prompt != "" {
				require.Equal(t, 1, count(evs, "run.terminal"), "the turn in flight ends once: %v", types(stop))
			}
			require.False(t, groupAlive(pgid), "no member of the agent's group outlives the stop")
			st, _ := r.sink.snapshot()
			require.True(t, st.Session == nil || st.Session.Process == nil, "the record no longer names a live process")
		})
	}
}
