package prptest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/outputbody"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

var bodyIdentity = prp.Identity{
	RunnerInstanceID: "runner_b", EnvironmentLeaseID: "env_lease_b", RunID: "run_b",
	NormalizedSessionID: "session_b", TurnID: "turn_b", ItemID: "item_b",
}

// rawRunner is a PRP runner connection to a core that sends hand-made
// event envelopes.
type rawRunner struct {
	t    *testing.T
	peer *prp.PeerConn
	sess *prp.Session
	seq  int64
}

func dialRaw(t *testing.T, c *Core) *rawRunner {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := prp.NewDialer(ctx, prp.DialerConfig{URL: c.PipeURL(), Transport: c.Transport()})
	require.NoError(t, err)
	peer, err := d.DialPeer(ctx)
	require.NoError(t, err)
	h := prp.ClientHandshake{Identity: bodyIdentity, RunnerVersion: "v", RunnerDigest: "sha256:" + strings.Repeat("0", 64), Ticket: c.Ticket()}
	sess, _, err := h.Run(ctx, peer)
	require.NoError(t, err)
	// The pipe is synchronous: drain what the core sends (ACKs).
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			if _, err := peer.ReadMsg(context.Background()); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { _ = peer.Close(); <-drained })
	return &rawRunner{t: t, peer: peer, sess: sess}
}

// send sends one event of type typ with payload p as the next sourceSeq.
func (r *rawRunner) send(typ string, p any) {
	r.t.Helper()
	r.seq++
	inner, err := jsonenc.Marshal(map[string]any{"schema": "paperclip.prp.event.v2", "sourceSeq": r.seq,
		"eventType": typ, "schemaVersion": 2, "priority": 1, "payload": p})
	require.NoError(r.t, err)
	env := prp.NewEventEnvelope(prp.KindEvent, r.sess.Version, bodyIdentity, inner)
	frame, err := r.sess.SealEnvelope(env)
	require.NoError(r.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.peer.WriteMsg(ctx, frame)
}

// TestWorkspace22_CoreAssembly: prpctl's core keeps admitted chunks and
// serves a body as the server does: all chunks → the exact text; before
// the last → "Output is not complete yet"; an unknown body → 404. A chunk
// the server's admission refuses (here a digest that is not its text's)
// ends the connection and is not committed.
func TestWorkspace22_CoreAssembly(t *testing.T) {
	c := NewCore(t, control.Config{Identity: bodyIdentity, RunnerVersion: "v", RunnerDigest: "sha256:" + strings.Repeat("0", 64)})
	text := strings.Repeat("abcdefghij", 7000)
	b, err := outputbody.Cut(text)
	require.NoError(t, err)
	require.Len(t, b.Chunks, 3)
	r := dialRaw(t, c)

	r.send(prp.EventOutputBodyChunk, b.Chunks[0])
	r.send(prp.EventOutputBodyChunk, b.Chunks[1])
	c.WaitFor(func(s control.Snapshot) bool { return s.AckedSourceSeq == 2 })
	_, err = c.OutputBody(b.Ref.BodyID)
	require.ErrorIs(t, err, outputbody.ErrNotComplete)
	r.send(prp.EventOutputBodyChunk, b.Chunks[2])
	r.send(prp.EventItemCompleted, map[string]any{"text": text[:4000], "outputBody": b.Ref})
	c.WaitFor(func(s control.Snapshot) bool { return s.AckedSourceSeq == 4 })
	got, err := c.OutputBody(b.Ref.BodyID)
	require.NoError(t, err)
	require.Equal(t, text, got)
	require.Equal(t, []string{b.Ref.BodyID}, c.OutputBodyIDs())
	_, err = c.OutputBody(strings.Repeat("0", 64))
	require.ErrorIs(t, err, outputbody.ErrNotFound)

	bad := b.Chunks[0]
	bad.SHA256 = strings.Repeat("0", 64)
	r.send(prp.EventOutputBodyChunk, bad)
	c.WaitFor(func(s control.Snapshot) bool { return s.Connections == 0 })
	require.EqualValues(t, 4, c.Snapshot().AckedSourceSeq, "the refused chunk is not committed")

	extra := map[string]any{"schema": outputbody.ChunkSchema, "body": b.Ref, "offset": "0",
		"sha256": b.Chunks[0].SHA256, "text": b.Chunks[0].Text, "more": 1}
	r2 := dialRaw(t, c)
	r2.seq = 4
	r2.send(prp.EventOutputBodyChunk, extra)
	c.WaitFor(func(s control.Snapshot) bool { return s.Connections == 0 })
	require.EqualValues(t, 4, c.Snapshot().AckedSourceSeq, "a sixth key is refused")
}

// TestAdmitChunkPayloadShape: the payload json of a chunk round-trips to
// exactly the five keys of workspace.md §7.4.
func TestAdmitChunkPayloadShape(t *testing.T) {
	b, err := outputbody.Cut(strings.Repeat("q", 4500))
	require.NoError(t, err)
	raw := jsonenc.MustMarshal(b.Chunks[0])
	var keys map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &keys))
	require.Len(t, keys, 5)
	var ref map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(keys["body"], &ref))
	require.Len(t, ref, 5)
}
