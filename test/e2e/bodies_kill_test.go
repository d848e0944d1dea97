package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/outputbody"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
)

// TestWorkspace21_BodyAfterKill: runnerd is SIGKILLed right after the
// durable write that commits a message's chunks and carrier, before it
// sends them. After the restart every chunk and the carrier reach the core
// exactly once, in order, byte-identical to what the outbox held, and the
// core's assembly of the body gives the message (workspace.md §12 scenario
// 21). Under runnerd's default outbox a body of one chunk (10,000 bytes)
// fits; under the server's flags one of two (40,000 bytes).
func TestWorkspace21_BodyAfterKill(t *testing.T) {
	for _, tc := range []struct {
		name   string
		flags  []string
		length int
	}{
		{"runnerd-defaults", nil, 10_000},
		{"server-flags", []string{"--max-outbox-bytes", "16777216", "--p0-reserve-bytes", "1048576"}, 40_000},
	} {
		t.Run(tc.name, func(t *testing.T) { bodyAfterKill(t, tc.flags, tc.length) })
	}
}

func bodyAfterKill(t *testing.T, flags []string, length int) {
	r := hookRig(t, flags...)
	r.env = killAfterEnv(prp.EventOutputBodyChunk)
	proc := r.start(t)
	r.prepare(t)
	r.open(t)
	r.queue(t, prp.CommandTurnStart, map[string]any{"text": fmt.Sprintf("long %d", length)})
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
	chunkCount := (length + outputbody.MaxChunkBytes - 1) / outputbody.MaxChunkBytes
	require.Len(t, group, chunkCount+1, "the chunks and the carrier are durable")

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
		case e.SourceSeq == group[chunkCount]:
			var p struct {
				OutputBody outputbody.Ref `json:"outputBody"`
			}
			require.NoError(t, json.Unmarshal(e.Payload, &p))
			ref = p.OutputBody
		}
	}
	require.Len(t, chunks, chunkCount, "each chunk once")
	for i := 1; i < len(group); i++ {
		require.Equal(t, group[i-1]+1, group[i], "contiguous, the carrier right after its chunks")
	}
	body, err := outputbody.Assemble(ref.BodyID, chunks)
	require.NoError(t, err)
	require.Len(t, body, length)
}
