package runner

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/state"
)

// rekeyLimit is the core frame bound of the rekey scenarios: the smallest
// the newest server's qualification uses (durability.md §2.1, T-rekey).
const rekeyLimit = 16

// coreLimit lowers the core's frame bound and picks its close style.
func coreLimit(limit uint64, style prp.RekeyClose) func(*control.Config) {
	return func(c *control.Config) { c.FrameLimit, c.RekeyClose = limit, style }
}

// driveCommands queues n commands (drains, every third a snapshot; only
// snapshots when drains is false), waits
// for every result and checks what a rekey must keep: each event once, in
// order; every result completed; each drain's effect once; no
// runner.reconnected. It returns the final snapshot.
func driveCommands(t *testing.T, h *harness, n int, drains bool) control.Snapshot {
	t.Helper()
	var ids []string
	for i := range n {
		typ := prp.CommandRunnerDrain
		if i%3 == 2 || !drains {
			typ = prp.CommandSessionSnapshot
		}
		ids = append(ids, h.queue(typ, `{}`).CommandID)
	}
	s := h.waitCore(func(s control.Snapshot) bool { return len(s.Results) == len(ids) })
	want := 0
	if drains {
		want = len(drainIDs(ids))
	}
	s = h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), prp.EventRunnerDraining)) == want
	})
	requireEachEventOnce(t, s)
	effects := drainEffects(t, prptest.DecodeEvents(t, s.Events))
	for _, id := range ids {
		var p prp.CommandResultPayload
		require.NoError(t, json.Unmarshal(s.Results[id], &p))
		require.Equal(t, "completed", p.Status, id)
	}
	for _, id := range drainIDs(ids) {
		if drains {
			require.Equal(t, 1, effects[id], "drain %s took effect once", id)
		}
	}
	return s
}

// drainIDs picks driveCommands' drains out of ids.
func drainIDs(ids []string) []string {
	var out []string
	for i, id := range ids {
		if i%3 != 2 {
			out = append(out, id)
		}
	}
	return out
}

// requireEachEventOnce: the core committed contiguous sequences (it refuses
// a replay whose bytes differ), and nothing announced a reconnect.
func requireEachEventOnce(t *testing.T, s control.Snapshot) {
	t.Helper()
	evs := prptest.DecodeEvents(t, s.Events)
	ids := map[string]bool{}
	for i, e := range evs {
		require.EqualValues(t, i+1, e.SourceSeq)
		require.False(t, ids[e.SourceEventID], "event %s once", e.SourceEventID)
		ids[e.SourceEventID] = true
	}
	require.Empty(t, prptest.OfType(evs, prp.EventRunnerReconnected), "a rekey is no outage")
}

// TestDurability05_CoreLimitDialDrop: durability.md §11 scenario 5: "Core
// limit 16, dial mode (TCP destroyed at the limit) → reconnect with
// `credentialKind: "lease"`; unACKed events replayed byte-identical; the
// re-delivered command answered from the journal (effect once)."
func TestDurability05_CoreLimitDialDrop(t *testing.T) {
	simTest(t, coreLimit(rekeyLimit, prp.RekeyDrop), func(t *testing.T, h *harness) {
		start := time.Now()
		h.start(h.config(false), options{})
		s := driveCommands(t, h, 24, true)
		// One bootstrap ticket: every later connection used the lease.
		require.GreaterOrEqual(t, s.Authentications, 3, "the core's bound ended connections")
		requireNoFailure(t, h)
		t.Logf("rekey cost at core limit %d (dial, TCP drop): %d connections for %d events and 24 results in %v simulated",
			rekeyLimit, s.Authentications, len(s.Events), time.Since(start))
	})
}

// TestDurability08_RunnerSendLimit: durability.md §11 scenario 8: "Runner
// send limit lowered by a test hook to 8 → the 9th frame is not sent;
// runnerd closes, reconnects; its content (event or result) arrives on the
// next connection." runnerd's own bound closes with 1012 and redials at
// once (§2.2 item 2).
func TestDurability08_RunnerSendLimit(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		start := time.Now()
		h.start(h.config(false), options{SendFrameLimit: 8})
		s := driveCommands(t, h, 12, true)
		require.Greater(t, s.Authentications, 2, "runnerd's own bound ended connections")
		// A connection carries at most 8 runner frames, so the events and
		// results needed at least that many connections.
		require.GreaterOrEqual(t, s.Authentications, (len(s.Events)+len(s.Results))/8)
		requireNoFailure(t, h)
		t.Logf("runner send limit 8: %d connections for %d events and %d results in %v simulated",
			s.Authentications, len(s.Events), len(s.Results), time.Since(start))
	})
}

// TestDurability26_CoreFrameAtReceiveBound: durability.md §11 scenario 26:
// "Core frame with counter ≥ L (8's hook lowers the receive bound) →
// closed unprocessed (a command in it: no effect, no result); reconnect."
// With a receive bound of 4 (the welcome is frame 0), commands keep
// arriving past it; each one runs once, on a later connection.
func TestDurability26_CoreFrameAtReceiveBound(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		h.start(h.config(false), options{ReceiveFrameLimit: 4})
		s := driveCommands(t, h, 12, true)
		require.Greater(t, s.Authentications, 2, "the receive bound ended connections")
		requireNoFailure(t, h)
	})
}

// TestDurability11_UnnegotiatedEpochKindFatal: durability.md §11 scenario
// 11: "No `--indexed-state`; core sends `command_epoch_rotate`, or
// (another run) `event_epoch_committed` → fatal protocol error (§1.4): exit
// non-zero, state intact, no reconnect."
func TestDurability11_UnnegotiatedEpochKindFatal(t *testing.T) {
	for _, kind := range []string{prp.KindCommandEpochRotate, prp.KindEventEpochCommitted} {
		t.Run(kind, func(t *testing.T) {
			simTest(t, nil, func(t *testing.T, h *harness) {
				run := h.start(h.config(false), options{})
				h.waitResult(h.queue(prp.CommandSessionSnapshot, `{}`).CommandID)
				h.waitCore(func(s control.Snapshot) bool {
					return s.AckedSourceSeq == int64(len(s.Events)) && len(s.Events) > 0
				})
				// The runner's own write of that ack lands before the frame.
				for i := 0; h.readState().AckedSourceSeq != uint64(len(h.core.Snapshot().Events)); i++ {
					require.Less(t, i, 1000, "the runner did not record the ack")
					time.Sleep(time.Millisecond)
				}
				before, err := os.ReadFile(filepath.Join(h.stateDir, state.FileName))
				require.NoError(t, err)
				h.sendRaw(kind, map[string]any{
					"schema": "paperclip.prp.command-epoch.v1", "runId": testIdentity.RunID,
					"transitionId": "0b6c1c3e-1f2a-4b3c-8d4e-5f6a7b8c9d0e", "fromEpoch": nil,
					"nextEpoch": "6f1c1a52-9a3c-4d7e-8b1a-2f0e5c4d3b2a", "finalOrdinal": 1,
				})
				err = run.wait(t)
				require.Error(t, err)
				require.True(t, errors.Is(err, prp.ErrUnnegotiatedEpoch), "%v", err)
				after, err := os.ReadFile(filepath.Join(h.stateDir, state.FileName))
				require.NoError(t, err)
				require.Equal(t, string(before), string(after), "state intact")
				require.Equal(t, 1, h.core.Snapshot().Authentications, "no reconnect")
			})
		})
	}
}

// TestReconnectedOnlyAfterLongOutage: runner.reconnected marks an outage of
// at least ReconnectEventMinOutage (durability.md §2.2 item 4): a drop
// healed sooner enqueues nothing; one healed later enqueues exactly one.
func TestReconnectedOnlyAfterLongOutage(t *testing.T) {
	var refuse atomic.Bool // the core's challenges are refused while set
	tweak := func(c *control.Config) {
		c.Challenge = func(p map[string]any) {
			if refuse.Load() {
				p["eventEpochs"] = prp.EventEpochsCapability // unrequested: the runner retries
			}
		}
	}
	simTest(t, tweak, func(t *testing.T, h *harness) {
		h.start(h.config(false), options{})
		h.waitCore(func(s control.Snapshot) bool { return s.Connected })
		h.core.DropCurrent()
		h.waitCore(func(s control.Snapshot) bool { return s.Authentications == 2 })
		h.waitResult(h.queue(prp.CommandSessionSnapshot, `{}`).CommandID)
		reconnected := func() int {
			return len(prptest.OfType(prptest.DecodeEvents(t, h.core.Snapshot().Events), prp.EventRunnerReconnected))
		}
		require.Zero(t, reconnected(), "a short drop")

		refuse.Store(true)
		h.core.DropCurrent()
		time.Sleep(ReconnectEventMinOutage + time.Second)
		refuse.Store(false)
		h.waitCore(func(s control.Snapshot) bool { return s.Authentications == 3 })
		h.waitResult(h.queue(prp.CommandSessionSnapshot, `{}`).CommandID)
		require.Equal(t, 1, reconnected(), "a long outage")
		requireEachEventOnceAllowing(t, h.core.Snapshot())
	})
}

// requireNoFailure: a rekey changes no lifecycle (durability.md §2.2 item 3).
func requireNoFailure(t *testing.T, h *harness) {
	t.Helper()
	st := h.readState()
	require.NotEqual(t, state.RecoverableFailure, st.Lifecycle)
	require.Nil(t, st.RecoverableFailure)
}

// requireEachEventOnceAllowing is requireEachEventOnce without the
// runner.reconnected rule.
func requireEachEventOnceAllowing(t *testing.T, s control.Snapshot) {
	t.Helper()
	for i, e := range prptest.DecodeEvents(t, s.Events) {
		require.EqualValues(t, i+1, e.SourceSeq)
	}
}

// TestDurability06_ListenCoreClose1012: durability.md §11 scenario 6:
// "Listen mode, core sends Close 1012 → runnerd keeps listening, accepts
// the redial, authenticates with the lease; lifecycle stays `ready`, no
// `recoverable_failure`." The core's bound is 16 frames, so it closes
// several times while commands run; it redials at once, as S-out does.
func TestDurability06_ListenCoreClose1012(t *testing.T) {
	// Scenario 30's other style in listen mode rides along: a core that
	// destroys TCP without a Close frame.
	for name, style := range map[string]prp.RekeyClose{"close-1012": prp.RekeyCloseFrame, "tcp-drop": prp.RekeyDrop} {
		t.Run(name, func(t *testing.T) { listenRekey(t, style) })
	}
}

func listenRekey(t *testing.T, style prp.RekeyClose) {
	h := newHarness(t, coreLimit(rekeyLimit, style))
	addr := make(chan string, 1)
	h.start(h.config(true), options{OnListening: func(a string) { addr <- a }})
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	var url string
	select {
	case a := <-addr:
		url = "ws://" + a + prp.ConnectPath(testIdentity.RunID)
	case <-ctx.Done():
		t.Fatal("runner did not listen")
	}
	redials := make(chan struct{})
	go func() { // the core's redial loop: at once after every close
		defer close(redials)
		for ctx.Err() == nil {
			if err := h.core.Connect(ctx, url); err != nil {
				time.Sleep(5 * time.Millisecond) // the runner is between accepts
				continue
			}
			_ = h.core.Wait(ctx, func(s control.Snapshot) bool { return !s.Connected })
		}
	}()
	s := driveCommands(t, h, 40, false)
	cancel()
	<-redials
	require.GreaterOrEqual(t, s.Authentications, 3, "the core's bound ended connections")
	requireNoFailure(t, h)
	require.Equal(t, state.Ready, h.readState().Lifecycle)
}

// TestDurability09_LostRenewalAtRekey: durability.md §11 scenario 9: "Core
// drops `lease_renewed` at a rekey → the next challenge's later expiry
// accepted (renewal outstanding)." The core commits the renewal and then
// ends the connection instead of sending its reply, as at its frame bound;
// the runner lives on past the first expiry.
func TestDurability09_LostRenewalAtRekey(t *testing.T) {
	const ttl = 20 * time.Second
	var dropped atomic.Bool
	tweak := func(c *control.Config) {
		c.LeaseTTL = ttl
		c.Outbound = func(kind string, p any) (any, error) {
			if kind == prp.KindLeaseRenewed && dropped.CompareAndSwap(false, true) {
				return nil, errors.New("frame bound reached")
			}
			return p, nil
		}
	}
	simTest(t, tweak, func(t *testing.T, h *harness) {
		run := h.start(h.config(false), options{})
		h.waitCore(func(s control.Snapshot) bool { return s.Connected })
		time.Sleep(3 * ttl)
		require.True(t, dropped.Load(), "a renewal reply was dropped")
		select {
		case err := <-run.done:
			t.Fatalf("runner stopped: %v", err)
		default:
		}
		require.Equal(t, "completed", h.waitResult(h.queue(prp.CommandSessionSnapshot, `{}`).CommandID).Status)
		s := h.core.Snapshot()
		require.GreaterOrEqual(t, s.Authentications, 2)
		require.GreaterOrEqual(t, s.Renewals, 2)
		requireEachEventOnce(t, s)
		requireNoFailure(t, h)
	})
}

// TestDurability25_PrepareDurabilityIgnored: durability.md §11 scenario 25:
// "`run.prepare` with `durability: "durability.indexed_state.v1"` → same
// result and events as without it."
func TestDurability25_PrepareDurabilityIgnored(t *testing.T) {
	h := newHarness(t, nil)
	h.agentRun()
	provider := map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(t), "cwd": t.TempDir()}
	prepare := func(extra map[string]any) (prp.CommandResultPayload, []string) {
		// A fresh root each time: workspace.ready is once per process and root.
		provider["cwd"] = t.TempDir()
		p := map[string]any{"provider": provider}
		for k, v := range extra {
			p[k] = v
		}
		b, err := json.Marshal(p)
		require.NoError(t, err)
		before := len(h.core.Snapshot().Events)
		res := h.waitResult(h.queue(prp.CommandRunPrepare, string(b)).CommandID)
		// A barrier: the events of run.prepare precede this result's.
		require.Equal(t, "completed", h.waitResult(h.queue(prp.CommandSessionSnapshot, `{}`).CommandID).Status)
		var types []string
		for _, e := range prptest.DecodeEvents(t, h.core.Snapshot().Events)[before:] {
			types = append(types, e.EventType)
		}
		return res, types
	}
	// The connection's own event lands before the first look.
	require.Equal(t, "completed", h.waitResult(h.queue(prp.CommandSessionSnapshot, `{}`).CommandID).Status)
	h.waitCore(func(s control.Snapshot) bool { return len(s.Events) >= 1 })
	plain, plainEvents := prepare(nil)
	withField, withEvents := prepare(map[string]any{"durability": prp.DurabilityCapability})
	require.Equal(t, "completed", plain.Status, string(plain.Result))
	require.Equal(t, plain.Status, withField.Status)
	require.JSONEq(t, string(plain.Result), string(withField.Result))
	require.Equal(t, plainEvents, withEvents)
}

// TestDurability27_RekeyBeforeTerminalAck: durability.md §11 scenario 27:
// "`runner.shutdown`; the core limit cuts the connection after
// `run.terminal` and the result, before `command_result_ack` → reconciled
// exactly once: one `run.terminal`, one result, cleanup once, exit." The
// core ends the connection instead of sending its command_result_ack, as
// at its frame bound (runnerd's loop emits runner.stopped as the terminal
// event). As for any lost ack (TestPRP18_NoAckStopsWithFence), this
// process stops at the 2 s bound with the fence kept, and the next one
// reconciles from the welcome and exits 0, running nothing again.
func TestDurability27_RekeyBeforeTerminalAck(t *testing.T) {
	var cut atomic.Bool
	tweak := func(c *control.Config) {
		c.Outbound = func(kind string, p any) (any, error) {
			if kind == prp.KindCommandResultAck && cut.CompareAndSwap(false, true) {
				return nil, errors.New("frame bound reached")
			}
			return p, nil
		}
	}
	simTest(t, tweak, func(t *testing.T, h *harness) {
		run := h.start(h.config(false), options{})
		cmd := h.queue(prp.CommandRunnerShutdown, `{}`)
		err := run.wait(t)
		require.Error(t, err)
		require.Contains(t, err.Error(), "not acknowledged")
		require.True(t, cut.Load())
		require.NotNil(t, h.readState().PendingTerminalDelivery, "the fence stays for the next process")

		require.NoError(t, h.start(h.config(false), options{}).wait(t), "reconciled, exit 0")
		s := h.core.Snapshot()
		require.Equal(t, "completed", h.waitResult(cmd.CommandID).Status)
		evs := prptest.DecodeEvents(t, s.Events)
		require.Len(t, prptest.OfType(evs, prp.EventRunnerStopped), 1, "terminal event once")
		for i, e := range evs {
			require.EqualValues(t, i+1, e.SourceSeq)
		}
		st := h.readState()
		require.Equal(t, state.Stopped, st.Lifecycle)
		require.Nil(t, st.PendingTerminalDelivery)
		require.Empty(t, st.Outbox)
		require.Equal(t, state.StatusCompleted, st.ProcessedCommands[cmd.CommandID].Status, "one result, journaled once")
	})
}
