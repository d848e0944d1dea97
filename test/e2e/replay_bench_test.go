package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// replayOutboxBytes is the outbox bound of the replay bench: the Paperclip
// server starts runnerd with --max-outbox-bytes 16777216.
const replayOutboxBytes = 16 << 20

// The agent's stream in the replay bench: replayChunks chunks of
// replayChunk bytes that do not coalesce, about 30,000 events and 14 MiB
// of text, so the events fill most of the 16 MiB outbox once built into
// one (as the 15 MiB outbox of at least 30,000 events).
const (
	replayChunks = 8000
	replayChunk  = 1800
	// replayBuildBatch is how many events one store write takes while
	// the outbox is built.
	replayBuildBatch = 64
	// replayEnvelopeBytes is more than an event's envelope adds to its
	// payload; replayReserveBytes is runnerd's P0 reserve (prp.md §13).
	replayEnvelopeBytes = 1024
	replayReserveBytes  = 32 << 10
)

// BenchmarkAgentReplaySixteenMiB: replay-16mib-over-live. Live: one turn
// of the agent streaming 30,000 chunks that do not coalesce (bulk), timed from
// the turn's first event at the core to its last. Replay: the same events
// (types and payloads as the core received them) built into a fresh
// state's outbox through the store package, then a runnerd started on it
// against a new core, timed from its connection to the last event at the
// core. The figure is replay over live, from one run.
func BenchmarkAgentReplaySixteenMiB(b *testing.B) {
	bin, pcwrap := runnerdBin(b), testbin.Path(b, "pcwrap")
	for b.Loop() {
		lives, evs := replayLive(b, bin, pcwrap)
		replay, built, bytes := replayBuilt(b, bin, pcwrap, evs)
		// Live over the same events: the turn's first built ones.
		live := lives[built-1]
		b.ReportMetric(msf(live), "live-ms")
		b.ReportMetric(msf(replay), "replay-ms")
		b.ReportMetric(float64(replay)/float64(live), "replay-over-live")
		fmt.Printf("the turn's first %d events (of %d), %.1f MiB of payload: live %v, replayed from a full outbox after connecting %v (target replay/live <= 2)\n",
			built, len(evs), float64(bytes)/(1<<20), live.Round(time.Millisecond), replay.Round(time.Millisecond))
	}
}

// replayWaitBound bounds a wait of the replay bench: a stream of this
// size takes tens of seconds on a loaded machine.
const replayWaitBound = 3 * time.Minute

// replayWait waits for cond on c's core, bounded by replayWaitBound.
func replayWait(b *testing.B, c *coreServer, cond func(s control.Snapshot) bool) control.Snapshot {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), replayWaitBound)
	defer cancel()
	if err := c.core.Wait(ctx, func(s control.Snapshot) bool { return len(s.Events) > 0 && cond(s) }); err != nil {
		b.Fatalf("replay bench: %v", err)
	}
	return c.core.Snapshot()
}

// replayStart starts runnerd on dir against c with the replay bench's
// outbox bound; it is stopped (SIGTERM) when the bench ends.
func replayStart(b *testing.B, c *coreServer, bin, pcwrap, dir string) *agentRig {
	b.Helper()
	r := &agentRig{c: c, bin: bin, dir: dir, args: runnerdArgs(dir, "--connect-url", c.connectURL(),
		"--pcwrap-path", pcwrap, "--max-outbox-bytes", strconv.Itoa(replayOutboxBytes))}
	proc := c.startRunnerd(b, r.bin, r.args)
	r.pid = proc.Process.Pid
	b.Cleanup(func() {
		_ = proc.Process.Signal(syscall.SIGTERM)
		waitExit(b, proc)
	})
	return r
}

// replayLive runs the live turn and returns its events and when each
// reached the core, from the turn's first event.
func replayLive(b *testing.B, bin, pcwrap string) ([]time.Duration, []state.Event) {
	b.Helper()
	r := replayStart(b, newCoreServer(b), bin, pcwrap, stateDir(b))
	benchRun(b, r, "run.prepare", map[string]any{"provider": map[string]any{
		"kind": "acpx", "agent": "claude", "command": fakeacpBin(b), "cwd": b.TempDir()}})
	benchRun(b, r, "session.open", map[string]any{})
	arr := watchArrivals(r.c.core.Core)
	defer arr.close()
	before := len(r.c.core.Snapshot().Events)
	benchRun(b, r, "turn.start", map[string]any{"text": fmt.Sprintf("bulk %d %d", replayChunks, replayChunk)})
	s := replayWait(b, r.c, func(s control.Snapshot) bool {
		return bytes.Contains(s.Events[len(s.Events)-1], []byte(`"eventType":"run.terminal"`))
	})
	all := decodeEvents(b, s.Events)
	var lives []time.Duration
	var evs []state.Event
	for i, e := range all[before:] {
		lives = append(lives, arr.time(before+i).Sub(arr.time(before)))
		p := state.P1
		if e.EventType == "item.delta" {
			p = state.P2
		}
		evs = append(evs, state.Event{Type: e.EventType, Priority: p, Payload: e.Payload})
	}
	return lives, evs
}

// replayBuilt builds evs into a fresh state's outbox, as many as the
// outbox takes, and times their delivery by a runnerd started on it,
// from its connection; it returns that time, the events built and their
// payload bytes.
func replayBuilt(b *testing.B, bin, pcwrap string, evs []state.Event) (time.Duration, int, int) {
	b.Helper()
	dir := stateDir(b)
	st, err := state.Open(state.Config{Dir: dir, Identity: identity, MaxOutboxBytes: replayOutboxBytes})
	if err != nil {
		b.Fatal(err)
	}
	built, bytes := 0, 0
	for built < len(evs) {
		// A batch that could cross the soft limit (the P0 reserve and
		// an envelope's overhead per event) is not built: the outbox is
		// full.
		end := min(built+replayBuildBatch, len(evs))
		est := st.Summary().OutboxBytes
		for _, e := range evs[built:end] {
			est += len(e.Payload) + replayEnvelopeBytes
		}
		if est > replayOutboxBytes-replayReserveBytes {
			break
		}
		err := st.Update(func(tx *state.Tx) error {
			for built < end {
				if _, err := tx.Enqueue(evs[built]); err != nil {
					return err
				}
				bytes += len(evs[built].Payload)
				built++
			}
			return nil
		})
		if err != nil {
			b.Fatalf("build the outbox at event %d: %v", built, err)
		}
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	c := newCoreServer(b)
	arr := watchArrivals(c.core.Core)
	defer arr.close()
	replayStart(b, c, bin, pcwrap, dir)
	c.wait(b, func(s control.Snapshot) bool { return s.Connected })
	connected := time.Now()
	replayWait(b, c, func(s control.Snapshot) bool { return len(s.Events) >= built })
	return arr.time(built - 1).Sub(connected), built, bytes
}
