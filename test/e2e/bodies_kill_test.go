package e2e

import (
	"bytes"
	"encoding/json"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/outputbody"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
)

// TestWorkspace21_BodyAfterKill: runnerd (server outbox flags) is SIGKILLed
// right after the durable write that commits a 40,000-byte message's
// chunks and carrier, before it sends them. After the restart every chunk
// and the carrier reach the core exactly once, in order, byte-identical
// to what the outbox held, and the core's assembly of the body gives the
// message (workspace.md §12 scenario 21).
func TestWorkspace21_BodyAfterKill(t *testing.T) {
	r := hookRig(t, "--max-outbox-bytes", "16777216", "--p0-reserve-bytes", "1048576")
	r.env = killAfterEnv(prp.EventOutputBodyChunk)
	proc := r.start(t)
	r.prepare(t)
	r.open(t)
	r.queue(t, prp.CommandTurnStart, map[string]any{"text": "long 40000"})
	waitExit(t, proc)
	require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "runnerd killed itself")

	st, err := state.Read(r.dir)
	require.NoError(t, err)
	held := map[uint64][]byte{}
	var group []uint64 // the chunks' sequence numbers, then the carrier's
	for i, e := range st.Outbox {
		held[e.SourceSeq] = e.Envelope
		if e.EventType == prp.EventOutputBodyChunk {
			group = append(group, e.SourceSeq)
			if next := st.Outbox[i+1:]; len(next) > 0 && next[0].EventType == prp.EventItemCompleted {
				group = append(group, next[0].SourceSeq)
			}
		}
	}
	require.Len(t, group, 3, "two chunks and the carrier are durable")

	r.env = nil
	r.start(t)
	evs := r.waitEvents(t, "run.terminal", 1)
	raw := r.c.core.Snapshot().Events
	var chunks []outputbody.Chunk
	var ref outputbody.Ref
	for i, e := range evs {
		if want, ok := held[e.SourceSeq]; ok {
			require.True(t, bytes.Equal(want, raw[i]), "event %d replays byte-identical", e.SourceSeq)
		}
		switch {
		case e.EventType == prp.EventOutputBodyChunk:
			var c outputbody.Chunk
			require.NoError(t, json.Unmarshal(e.Payload, &c))
			chunks = append(chunks, c)
		case e.SourceSeq == group[2]:
			var p struct {
				OutputBody outputbody.Ref `json:"outputBody"`
			}
			require.NoError(t, json.Unmarshal(e.Payload, &p))
			ref = p.OutputBody
		}
	}
	require.Len(t, chunks, 2, "each chunk once")
	require.Equal(t, group[0]+1, group[1])
	require.Equal(t, group[1]+1, group[2], "contiguous, the carrier right after its chunks")
	body, err := outputbody.Assemble(ref, chunks)
	require.NoError(t, err)
	require.Len(t, body, 40_000)
}
