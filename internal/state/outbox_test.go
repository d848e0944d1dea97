package state

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

func TestEnvelopeShapeAndSourceEventIDs(t *testing.T) {
	s, _ := newStore(t)
	seq := enqueue(t, s, Event{Type: "runner.connected", Priority: P0, Payload: json.RawMessage(`{}`)})
	require.Equal(t, uint64(1), seq)
	var xseq uint64
	require.NoError(t, s.Update(func(tx *Tx) error {
		var err error
		xseq, _, err = tx.enqueueExecutor("provider-event-1", Event{Type: "item.started", Priority: P1, Payload: json.RawMessage(`{}`)})
		return err
	}))
	out := s.Unacked()
	require.Len(t, out, 2)

	var env map[string]any
	require.NoError(t, json.Unmarshal(out[0].Envelope, &env))
	require.Equal(t, "paperclip.runner", env["protocol"])
	require.Equal(t, "event", env["kind"])
	require.Equal(t, "run_1", env["runId"])
	require.NotContains(t, env, "connectionId", "stored events carry only the identity fields")
	p := env["payload"].(map[string]any)
	require.Equal(t, "event_runner_1_0000000000000001", p["sourceEventId"])
	require.Equal(t, "paperclip.prp.event.v1", p["schema"])
	require.Equal(t, "runner", p["sourceKind"])
	require.Equal(t, "runner_1", p["sourceInstanceId"])
	require.EqualValues(t, 0, p["priority"])
	require.EqualValues(t, 1, p["sourceSeq"])
	require.Equal(t, "2026-11-30T12:00:00.001Z", p["emittedAt"])
	require.Equal(t, len(out[0].Envelope), out[0].ByteSize)

	require.Equal(t, uint64(2), xseq)
	// sha256("paperclip.executor-event.v1\0runner_1\0provider-event-1")
	require.Equal(t, ExecutorSourceEventID("runner_1", "provider-event-1"), out[1].sourceEventID())
	require.Regexp(t, `^event_executor_[0-9a-f]{64}$`, out[1].sourceEventID())
}

// Scenario 11 (state part): the unacknowledged suffix is returned
// byte-for-byte with the same sequence and id, across a reconnect and a
// process restart.
func TestPRP11_UnackedSuffixReplaysByteIdentical(t *testing.T) {
	s, cfg := newStore(t)
	for i := range 3 {
		enqueue(t, s, Event{Type: "item.delta", Priority: P1, Payload: json.RawMessage(fmt.Sprintf(`{"delta":"%d","html":"<b>&</b>"}`, i))})
	}
	_, err := s.ApplyAck(1, 2)
	require.NoError(t, err)
	first := s.Unsent(1)
	require.Len(t, first, 2)
	again := s.Unsent(s.Summary().AckedSourceSeq) // reconnect: replay from the cursor
	require.Equal(t, first, again)
	require.NoError(t, s.Close())

	s2 := openStore(t, cfg)
	after := s2.Unacked()
	// The restart re-sends the same suffix and adds runner.reconciled.
	require.Len(t, after, 3)
	require.Equal(t, first, after[:2])
	require.Equal(t, prp.EventRunnerReconciled, after[2].EventType)
	require.Contains(t, string(after[1].Envelope), `"html":"<b>&</b>"`, "no HTML escaping")
}

// Scenario 15: an ACK below the cursor or beyond the produced sequence is a
// fatal protocol error and leaves the state intact; a valid ACK trims.
func TestPRP15_AckBoundsAndTrim(t *testing.T) {
	s, cfg := newStore(t)
	for range 4 {
		enqueue(t, s, p1("item.delta"))
	}
	persisted, err := s.ApplyAck(2, 2)
	require.NoError(t, err)
	require.False(t, persisted, "cursor persistence is batched")
	require.Len(t, s.Unacked(), 2)
	require.Equal(t, uint64(3), s.Unacked()[0].SourceSeq)

	fileBefore := readFile(t, cfg)
	stateBefore := s.Snapshot()
	_, err = s.ApplyAck(1, 2)
	require.ErrorIs(t, err, ErrAckBehindCursor)
	_, err = s.ApplyAck(5, 2)
	require.ErrorIs(t, err, ErrAckBeyondProduced)
	require.Equal(t, stateBefore, s.Snapshot())
	require.Equal(t, fileBefore, readFile(t, cfg))

	// Same cursor again: a no-op.
	persisted, err = s.ApplyAck(2, 2)
	require.NoError(t, err)
	require.False(t, persisted)

	// Emptying the outbox trims it in memory but writes nothing of its own
	// (prp.md §8.4): the file keeps the older cursor and its suffix until
	// the next write (here Flush).
	persisted, err = s.ApplyAck(4, 2)
	require.NoError(t, err)
	require.False(t, persisted, "an ACK that empties the outbox does not force a write")
	require.Empty(t, s.Unacked())
	require.Zero(t, s.Summary().OutboxBytes)
	require.Equal(t, fileBefore, readFile(t, cfg))
	require.NoError(t, s.flush())
	var onDisk State
	require.NoError(t, json.Unmarshal(readFile(t, cfg), &onDisk))
	require.Equal(t, uint64(4), onDisk.AckedSourceSeq)
	require.Empty(t, onDisk.Outbox)
}

func TestAckCursorIsPersistedEverySixteenAdvances(t *testing.T) {
	s, cfg := newStore(t)
	require.NoError(t, s.Update(func(tx *Tx) error {
		for range 40 {
			if _, err := tx.Enqueue(p1("item.delta")); err != nil {
				return err
			}
		}
		return nil
	}))
	writes := 0
	for seq := uint64(1); seq <= 32; seq++ {
		persisted, err := s.ApplyAck(seq, 2)
		require.NoError(t, err)
		if persisted {
			writes++
			require.Zero(t, seq%ackPersistInterval)
		}
	}
	require.Equal(t, 2, writes)
	_, err := s.ApplyAck(33, 2)
	require.NoError(t, err)
	var onDisk State
	require.NoError(t, json.Unmarshal(readFile(t, cfg), &onDisk))
	require.Equal(t, uint64(32), onDisk.AckedSourceSeq)
	require.NoError(t, s.flush())
	require.NoError(t, json.Unmarshal(readFile(t, cfg), &onDisk))
	require.Equal(t, uint64(33), onDisk.AckedSourceSeq)
}

// Scenario 16: non-P0 into the reserve → rejected, backpressure, P0 still
// accepted; P0 beyond the hard limit → unrecoverable; 250 P2 updates →
// one event.
func TestPRP16_OutboxBoundsAndCoalescing(t *testing.T) {
	cfg := testConfig(t.TempDir() + "/state")
	cfg.MaxOutboxBytes = 8 * 1024
	cfg.P0ReserveBytes = 3 * 1024
	s := openStore(t, cfg)
	pad := strings.Repeat("p", 900)
	ev := func(p Priority) Event {
		return Event{Type: "item.delta", Priority: p, Payload: obj(t, map[string]string{"pad": pad})}
	}

	accepted := 0
	var err error
	for err == nil {
		err = s.Update(func(tx *Tx) error { _, e := tx.Enqueue(ev(P1)); return e })
		if err == nil {
			accepted++
		}
	}
	require.ErrorIs(t, err, ErrBackpressure)
	snap := s.Snapshot()
	require.Len(t, snap.Outbox, accepted, "the rejected event is not stored")
	require.Equal(t, Backpressure, snap.Lifecycle)
	require.True(t, snap.Backpressure)
	require.Contains(t, snap.Diagnostics[len(snap.Diagnostics)-1], "soft limit")
	require.True(t, s.Summary().StoragePressure)
	require.LessOrEqual(t, snap.outboxBytes(), cfg.MaxOutboxBytes-cfg.P0ReserveBytes)

	// The bound fact is durable even though the Update failed.
	require.NoError(t, s.Close())
	s = openStore(t, cfg)
	require.Equal(t, Backpressure, s.Snapshot().Lifecycle)

	// P0 may use the reserve. (The restart already put runner.reconciled there.)
	p0 := 0
	for err = nil; err == nil; {
		err = s.Update(func(tx *Tx) error { _, e := tx.Enqueue(ev(P0)); return e })
		if err == nil {
			p0++
		}
	}
	require.Positive(t, p0)
	require.ErrorIs(t, err, ErrP0StorageExhausted)
	snap = s.Snapshot()
	require.Equal(t, Unrecoverable, snap.Lifecycle)
	require.Contains(t, snap.Diagnostics[len(snap.Diagnostics)-1], CodeP0StorageExhausted)
	require.LessOrEqual(t, snap.outboxBytes(), cfg.MaxOutboxBytes)

	// Coalescing, on a fresh store.
	s3, _ := newStore(t)
	require.NoError(t, s3.Update(func(tx *Tx) error {
		for i := range 250 {
			if _, err := tx.Enqueue(Event{Type: "item.delta", Priority: P2, CoalesceKey: "item_1",
				Payload: obj(t, map[string]any{"itemId": "item_1", "delta": fmt.Sprint(i % 10), "n": i})}); err != nil {
				return err
			}
		}
		return nil
	}))
	out := s3.Unacked()
	require.Len(t, out, 1, "250 P2 updates become one event")
	var env envelope
	require.NoError(t, json.Unmarshal(out[0].Envelope, &env))
	var p struct {
		Delta string
		N     int
	}
	require.NoError(t, json.Unmarshal(env.Payload.Payload, &p))
	require.Len(t, p.Delta, 250)
	require.Equal(t, 249, p.N)
}

// Coalescing never changes an event a sender has seen, and stops at a key
// or type change.
func TestCoalescingRespectsSentEventsAndKeys(t *testing.T) {
	s, _ := newStore(t)
	delta := func(key, d string) Event {
		return Event{Type: "item.delta", Priority: P2, CoalesceKey: key, Payload: obj(t, map[string]string{"delta": d})}
	}
	require.Equal(t, uint64(1), enqueue(t, s, delta("a", "1")))
	require.Equal(t, uint64(1), enqueue(t, s, delta("a", "2")), "merged across Updates")
	sent := s.Unsent(0)
	require.Len(t, sent, 1)
	require.Equal(t, uint64(2), enqueue(t, s, delta("a", "3")), "a sent event is frozen")
	require.Equal(t, sent[0].Envelope, s.Unacked()[0].Envelope)
	require.Equal(t, uint64(3), enqueue(t, s, delta("b", "4")), "another key starts a new event")
	require.Equal(t, uint64(4), enqueue(t, s, p1("item.completed")))
	require.Equal(t, uint64(5), enqueue(t, s, delta("b", "5")), "an event in between ends the run")
}

// A sender racing a coalescing Update never sees bytes that later change.
func TestCoalescingRaceWithSender(t *testing.T) {
	cfg := testConfig(t.TempDir() + "/state")
	cfg.MaxOutboxBytes = 1 << 20
	s := openStore(t, cfg)
	seen := map[uint64][]byte{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var mu sync.Mutex
	wg.Go(func() {
		var after uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			runtime.Gosched()
			for _, e := range s.Unsent(after) {
				mu.Lock()
				seen[e.SourceSeq] = e.Envelope
				mu.Unlock()
				after = e.SourceSeq
			}
		}
	})
	for i := range 60 {
		enqueue(t, s, Event{Type: "item.delta", Priority: P2, CoalesceKey: "k", Payload: obj(t, map[string]string{"delta": fmt.Sprint(i % 10)})})
	}
	close(stop)
	wg.Wait()
	final := map[uint64][]byte{}
	for _, e := range s.Unacked() {
		final[e.SourceSeq] = e.Envelope
	}
	mu.Lock()
	defer mu.Unlock()
	for seq, b := range seen {
		require.Equal(t, string(final[seq]), string(b), "seq %d changed after it was handed out", seq)
	}
}

func TestBackpressureClearsWhenAcked(t *testing.T) {
	cfg := testConfig(t.TempDir() + "/state")
	cfg.MaxOutboxBytes = 4 * 1024
	cfg.P0ReserveBytes = 1024
	s := openStore(t, cfg)
	big := Event{Type: "item.delta", Priority: P1, Payload: obj(t, map[string]string{"pad": strings.Repeat("z", 1000)})}
	var err error
	for err == nil {
		err = s.Update(func(tx *Tx) error { _, e := tx.Enqueue(big); return e })
	}
	require.ErrorIs(t, err, ErrBackpressure)
	require.NoError(t, s.Update(func(tx *Tx) error { return tx.SetLifecycle(Backpressure) }))
	_, err = s.ApplyAck(s.Summary().HighestSourceSeq, 2)
	require.NoError(t, err)
	require.Equal(t, Ready, s.Summary().Lifecycle)
	require.False(t, s.Summary().StoragePressure)
}

func TestEventTooLargeForFrame(t *testing.T) {
	cfg := testConfig(t.TempDir() + "/state")
	cfg.MaxFrameBytes = 512
	s := openStore(t, cfg)
	err := s.Update(func(tx *Tx) error {
		_, err := tx.Enqueue(Event{Type: "item.delta", Priority: P0, Payload: obj(t, map[string]string{"x": strings.Repeat("a", 600)})})
		return err
	})
	require.ErrorIs(t, err, ErrEventTooLarge)
}

func TestInvalidEventsAreRefused(t *testing.T) {
	s, _ := newStore(t)
	for name, ev := range map[string]Event{
		"empty type":    {Type: "", Payload: json.RawMessage(`{}`)},
		"control type":  {Type: "a\nb", Payload: json.RawMessage(`{}`)},
		"array payload": {Type: "item.delta", Payload: json.RawMessage(`[]`)},
		"bad json":      {Type: "item.delta", Payload: json.RawMessage(`{`)},
		"priority":      {Type: "item.delta", Priority: 3, Payload: json.RawMessage(`{}`)},
	} {
		err := s.Update(func(tx *Tx) error { _, e := tx.Enqueue(ev); return e })
		require.ErrorIs(t, err, errInvalidEvent, name)
	}
	require.Empty(t, s.Unacked())
}

func TestPayloadSecretsAreRedactedAndIdentitiesProtected(t *testing.T) {
	s, cfg := newStore(t)
	enqueue(t, s, Event{Type: "harness.diagnostic", Priority: P1, Payload: obj(t, map[string]any{
		"message": "auth header Bearer sk-ant-abcdefghijklmnopqrstuvwxyz",
		"env":     map[string]string{"GITHUB_TOKEN": "ghp_0123456789abcdefghijABCDEFGHIJ"},
		"tokens":  42,
		"lease":   map[string]string{"connectionLeaseToken": "lease_6f1c1d2e-aaaa-bbbb-cccc-123456789abc", "ticket": "ticket-abc-123"},
	})})
	file := string(readFile(t, cfg))
	require.NotContains(t, file, "sk-ant-abcdef")
	require.NotContains(t, file, "ghp_0123")
	require.Contains(t, file, `"tokens":42`)
	require.NotContains(t, file, "lease_6f1c1d2e", "lease tokens never reach disk")
	require.NotContains(t, file, "ticket-abc-123", "bootstrap tickets never reach disk")

	err := s.Update(func(tx *Tx) error {
		_, e := tx.Enqueue(Event{Type: "semantic_tool.input", Priority: P1, Payload: obj(t, map[string]any{
			"input": map[string]string{"q": "Bearer abcdefghijklmnopqrstu"},
		})})
		return e
	})
	require.ErrorIs(t, err, errSensitiveIdentity)
	require.NotContains(t, err.Error(), "abcdefghijklmnopqrstu")
}

// Executor receipts: a replayed provider event is never appended twice.
func TestExecutorEventReceipts(t *testing.T) {
	cfg := testConfig(t.TempDir() + "/state")
	cfg.MaxOutboxBytes = 1 << 20
	s := openStore(t, cfg)
	ev := Event{Type: "item.completed", Priority: P1, Payload: json.RawMessage(`{"text":"done"}`)}
	var seq1 uint64
	require.NoError(t, s.Update(func(tx *Tx) error {
		var err error
		seq1, _, err = tx.enqueueExecutor("codex:item:7", ev)
		return err
	}))
	require.NoError(t, s.Close())
	s = openStore(t, cfg)
	require.NoError(t, s.Update(func(tx *Tx) error {
		seq, dup, err := tx.enqueueExecutor("codex:item:7", ev)
		require.NoError(t, err)
		require.True(t, dup)
		require.Equal(t, seq1, seq)
		_, _, err = tx.enqueueExecutor("codex:item:7", Event{Type: "item.completed", Priority: P1, Payload: json.RawMessage(`{"text":"other"}`)})
		require.ErrorIs(t, err, errExecutorEventConflict)
		return nil
	}))
	n := 0
	for _, e := range s.Unacked() {
		if e.EventType == "item.completed" {
			n++
		}
	}
	require.Equal(t, 1, n)

	require.NoError(t, s.Update(func(tx *Tx) error {
		for i := range maxExecutorEventReceipts + 10 {
			if _, _, err := tx.enqueueExecutor(fmt.Sprintf("x:%d", i), Event{Type: "item.delta", Priority: P1, Payload: json.RawMessage(`{}`)}); err != nil {
				return err
			}
			if err := tx.ApplyAck(tx.HighestSourceSeq(), 2); err != nil {
				return err
			}
		}
		return nil
	}))
	require.Len(t, s.Snapshot().ExecutorEventReceipts, maxExecutorEventReceipts)

	// A receipt evicted while its event still waits for an ACK: a replay is
	// refused instead of queued twice.
	require.NoError(t, s.Update(func(tx *Tx) error {
		for i := range maxExecutorEventReceipts + 1 {
			if _, _, err := tx.enqueueExecutor(fmt.Sprintf("y:%d", i), Event{Type: "item.delta", Priority: P1, Payload: json.RawMessage(`{}`)}); err != nil {
				return err
			}
		}
		_, _, err := tx.enqueueExecutor("y:0", Event{Type: "item.delta", Priority: P1, Payload: json.RawMessage(`{}`)})
		require.ErrorIs(t, err, errExecutorEventConflict)
		return nil
	}))
}

// Scenario 23 (state part): on a v1 connection a v2-only event goes out as
// runner.diagnostic/event_requires_prp_v2 with the same sequence; after the
// v1 ACK the real payload is kept and re-enqueued with a new sequence on a
// later v2 connection.
func TestPRP23_V2EventsDowngradeOnV1AndReplayOnV2(t *testing.T) {
	s, cfg := newStore(t)
	require.NoError(t, s.Update(func(tx *Tx) error { return tx.SetProtocolVersion(1) }))
	goal := json.RawMessage(`{"objective":"ship it","status":"active"}`)
	seq := enqueue(t, s, Event{Type: "session.goal.updated", Priority: P1, Payload: goal})
	enqueue(t, s, p1("item.delta"))

	out := s.Unsent(0)
	require.Len(t, out, 2)
	w, err := out[0].Wire(1)
	require.NoError(t, err)
	var env envelope
	require.NoError(t, json.Unmarshal(w, &env))
	require.Equal(t, 1, env.Version)
	require.Equal(t, "runner.diagnostic", env.Payload.EventType)
	require.Equal(t, "paperclip.prp.event.v1", env.Payload.Schema)
	require.Equal(t, 1, env.Payload.SchemaVersion)
	require.Equal(t, seq, env.Payload.SourceSeq)
	require.JSONEq(t, `{"reasonCode":"event_requires_prp_v2","originalEventType":"session.goal.updated"}`, string(env.Payload.Payload))
	require.NotContains(t, string(w), "ship it", "the v2 payload is never copied onto a v1 link")
	w2, err := out[1].Wire(1)
	require.NoError(t, err)
	require.Equal(t, []byte(out[1].Envelope), w2, "v1 events on a v1 link are the stored bytes")
	w3, err := out[0].Wire(1)
	require.NoError(t, err)
	require.Equal(t, w, w3, "the downgrade is deterministic, so a replay is byte-identical")

	_, err = s.ApplyAck(2, 1)
	require.NoError(t, err)
	require.Len(t, s.Snapshot().V2ReplayEvents, 1, "a v1 ACK keeps the real payload")
	require.NoError(t, s.Close())

	s = openStore(t, cfg)
	require.NoError(t, s.Update(func(tx *Tx) error {
		if err := tx.SetProtocolVersion(2); err != nil {
			return err
		}
		return tx.RestoreV2ReplayEvents()
	}))
	var replayed *OutboxEvent
	for _, e := range s.Unacked() {
		if e.EventType == "session.goal.updated" {
			replayed = &e
		}
	}
	require.NotNil(t, replayed)
	require.Greater(t, replayed.SourceSeq, uint64(2), "fresh sequence number")
	w4, err := replayed.Wire(2)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(w4, &env))
	require.Equal(t, "session.goal.updated", env.Payload.EventType)
	require.Equal(t, 2, env.Payload.SchemaVersion)
	require.JSONEq(t, string(goal), string(env.Payload.Payload))

	_, err = s.ApplyAck(replayed.SourceSeq, 2)
	require.NoError(t, err)
	require.Empty(t, s.Snapshot().V2ReplayEvents, "a v2 ACK settles it")
}

// A turn's terminal event sets TurnEnded in the same durable write; it
// survives a restart until the runner clears it.
func TestTurnEndedCommittedWithTerminalEvent(t *testing.T) {
	s, cfg := newStore(t)
	enqueue(t, s, p1("item.completed"))
	require.False(t, s.Summary().TurnEnded)
	enqueue(t, s, Event{Type: "turn.completed", Priority: P0, Payload: json.RawMessage(`{}`)})
	require.True(t, s.Summary().TurnEnded)

	require.NoError(t, s.Close())
	s = openStore(t, cfg)
	require.True(t, s.Summary().TurnEnded, "durable")
	require.NoError(t, s.Update(func(tx *Tx) error {
		require.True(t, tx.turnEnded())
		tx.ClearTurnEnded()
		return nil
	}))
	require.False(t, s.Summary().TurnEnded)
	require.False(t, s.Snapshot().TurnEnded)
}

// Enqueue appends an event that names an executor id as an executor event:
// its sourceEventId is the executor form and a replay takes no new seq.
func TestEnqueueRoutesExecutorEvents(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()+"/state"))
	ev := Event{Type: "semantic_tool.input", Priority: P0, Payload: json.RawMessage(`{"x":1}`), ExecutorID: "semantic_tool.input:call_1"}
	var first, again uint64
	require.NoError(t, s.Update(func(tx *Tx) error {
		var err error
		if first, err = tx.Enqueue(ev); err != nil {
			return err
		}
		again, err = tx.Enqueue(ev)
		return err
	}))
	require.Equal(t, first, again, "a replayed executor event is not appended twice")
	un := s.Unacked()
	require.Len(t, un, 1)
	require.Equal(t, ExecutorSourceEventID(s.Snapshot().RunnerInstanceID, "semantic_tool.input:call_1"), un[0].sourceEventID())
}
