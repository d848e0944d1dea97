package runner

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

// pressureLease is the core's lease in these tests: short, so renewals
// fall due while a write waits for space.
const pressureLease = 20 * time.Second

// fullDisk fails every state write's temp-file write with ENOSPC while full
// is set.
func fullDisk(full *atomic.Bool) func(string) error {
	return func(op string) error {
		if full.Load() && op == "write" {
			return syscall.ENOSPC
		}
		return nil
	}
}

// countingStart is a turn.start handler that counts its effects.
func countingStart(n *atomic.Int32) map[string]func(emit) handler {
	return map[string]func(emit) handler{"turn.start": func(emit) handler {
		return func(context.Context, *prp.Command) (json.RawMessage, error) {
			n.Add(1)
			return nil, nil
		}
	}}
}

// startUnderPressure starts a runner, fills its disk and queues a
// turn.start whose journal write then waits for space; it returns once a
// pong reports storage pressure.
// idleFlushSettle is longer than the store's idle write of the ACK cursor.
const idleFlushSettle = time.Second

func startUnderPressure(t *testing.T, h *harness, full *atomic.Bool, effects *atomic.Int32) (*running, prp.Command) {
	t.Helper()
	return startUnderPressureWith(t, h, full, options{Handlers: countingStart(effects)})
}

// startUnderPressureWith is startUnderPressure with the runner's options
// (their StoreFault is the full disk).
func startUnderPressureWith(t *testing.T, h *harness, full *atomic.Bool, opts options) (*running, prp.Command) {
	t.Helper()
	opts.StoreFault = fullDisk(full)
	run := h.start(h.config(false), opts)
	h.waitCore(func(s control.Snapshot) bool { return s.Connected })
	// The connection's ACK schedules the store's idle cursor write: let it
	// happen before the disk fills. Otherwise it may be a second writer
	// during the wait, blocked on the store's lock, and a goroutine blocked
	// on a mutex keeps the bubble's clock from advancing.
	time.Sleep(idleFlushSettle)
	full.Store(true)
	cmd := h.queue("turn.start", `{"text":"x"}`)
	for i := 1; ; i++ {
		require.NoError(t, h.core.Ping(t.Context()))
		s := h.waitCore(func(s control.Snapshot) bool { return s.Pongs >= i })
		if p := s.LastPong.StoragePressure; p != nil && *p {
			require.NotEqual(t, string(state.Backpressure), s.LastPong.Lifecycle, "a full disk is not the outbox bound")
			return run, cmd
		}
		require.Less(t, i, 100, "no pong reported storage pressure")
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDurability17_FullDiskKeepsLeaseAndCompletes (durability.md §11
// scenario 17): a full disk while a command is admitted blocks its
// journal write; meanwhile pings are answered with storagePressure and
// the lease keeps being renewed past its original expiry; once space
// returns the command runs once and its one result is delivered.
func TestDurability17_FullDiskKeepsLeaseAndCompletes(t *testing.T) {
	simTest(t, func(c *control.Config) { c.LeaseTTL = pressureLease }, func(t *testing.T, h *harness) {
		var full atomic.Bool
		var effects atomic.Int32
		run, cmd := startUnderPressure(t, h, &full, &effects)
		renewals := h.core.Snapshot().Renewals
		time.Sleep(3 * pressureLease)
		s := h.core.Snapshot()
		require.Greater(t, s.Renewals, renewals, "the lease is renewed during the wait")
		require.True(t, s.Connected)
		require.Nil(t, s.Results[cmd.CommandID], "no result before it is durable")
		require.Zero(t, effects.Load(), "no effect before its journal entry is durable")
		select {
		case err := <-run.done:
			t.Fatalf("runner ended under pressure: %v", err)
		default:
		}

		full.Store(false)
		require.Equal(t, "completed", h.waitResult(cmd.CommandID).Status)
		require.EqualValues(t, 1, effects.Load())
		n := h.core.Snapshot().Pongs // before the ping: its pong may come at once
		require.NoError(t, h.core.Ping(t.Context()))
		s = h.waitCore(func(s control.Snapshot) bool { return s.Pongs > n })
		require.False(t, *s.LastPong.StoragePressure)
	})
}

// TestDurability18_RevokeUnderPressure (scenario 18, revoke): a revoke
// during the wait ends the runner with exit 0 without running the blocked
// command or inventing its result; the state file stays parseable.
func TestDurability18_RevokeUnderPressure(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		var full atomic.Bool
		var effects atomic.Int32
		run, cmd := startUnderPressure(t, h, &full, &effects)
		require.NoError(t, h.core.Revoke(3))
		require.NoError(t, run.wait(t))
		require.Zero(t, effects.Load())
		require.Nil(t, h.core.Snapshot().Results[cmd.CommandID], "no invented result")
		require.NotEqual(t, state.Revoked, h.readState().Lifecycle, "nothing written on a full disk")
	})
}

// TestDurability18_FreshStopUnderPressure (scenario 18, stop): a fresh
// turn.stop queued behind the blocked command ends the runner (agents
// stopped) without a result for either command. The test core keeps one
// command in flight, so the stop is sent raw, as a core that does not
// wait would send it.
func TestDurability18_FreshStopUnderPressure(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		var full atomic.Bool
		var effects atomic.Int32
		run, cmd := startUnderPressure(t, h, &full, &effects)
		stop := prp.Command{
			Schema: prp.CommandSchemaV1, CommandID: "command_prp_stop", ControllerSeq: cmd.ControllerSeq + 1,
			Type: "turn.stop", IssuedAt: fixedIssuedAt, Payload: json.RawMessage(`{}`),
		}
		h.sendRaw(prp.KindCommand, stop)
		err := run.wait(t)
		require.ErrorIs(t, err, errStopUnderPressure)
		require.Zero(t, effects.Load())
		s := h.core.Snapshot()
		require.Nil(t, s.Results[cmd.CommandID], "no invented result")
		require.Nil(t, s.Results[stop.CommandID], "no invented result")
		_ = h.readState()
	})
}

// TestDurability19_DropUnderPressureLeaseExpires (scenario 19): the
// connection drops during the wait; runnerd does not reconnect (so it
// does not renew), the lease expires and ends the wait: the runner exits
// with lease_expired and the state file is as it was before the wait.
func TestDurability19_DropUnderPressureLeaseExpires(t *testing.T) {
	simTest(t, func(c *control.Config) { c.LeaseTTL = pressureLease }, func(t *testing.T, h *harness) {
		var full atomic.Bool
		var effects atomic.Int32
		run, cmd := startUnderPressure(t, h, &full, &effects)
		before, err := readFile(filepath.Join(h.stateDir, state.FileName))
		require.NoError(t, err)
		auths := h.core.Snapshot().Authentications
		h.core.DropCurrent()
		time.Sleep(pressureLease) // the lease's remaining time at most
		err = run.wait(t)
		require.ErrorIs(t, err, config.ErrLeaseExpired)
		s := h.core.Snapshot()
		require.Equal(t, auths, s.Authentications, "no reconnect during the wait")
		require.Nil(t, s.Results[cmd.CommandID])
		require.Zero(t, effects.Load())
		after, err := readFile(filepath.Join(h.stateDir, state.FileName))
		require.NoError(t, err)
		require.Equal(t, before, after, "state file intact")
	})
}

// pressureRekeyLimit is the core's frame bound in scenario 10: high enough
// for the connection to reach the wait (welcome, events, ACKs, the
// command, the first pressure pong), low enough that a few pings during
// the wait reach it.
const pressureRekeyLimit = 32

// TestDurability10_RekeyDuringPressureWait (durability.md §11 scenario
// 10, §2.2 item 5): the core's frame bound ends the connection while a
// state write waits for disk space. That is a disconnect, not a failure:
// runnerd does not redial during the wait (§6.2 item 4) and does not exit;
// once space returns the write completes, runnerd reconnects with its
// lease, and the command's one effect and its result are delivered once.
func TestDurability10_RekeyDuringPressureWait(t *testing.T) {
	tweak := func(c *control.Config) {
		c.LeaseTTL = pressureLease
		coreLimit(pressureRekeyLimit, prp.RekeyDrop)(c)
	}
	simTest(t, tweak, func(t *testing.T, h *harness) {
		var full atomic.Bool
		var effects atomic.Int32
		run, cmd := startUnderPressure(t, h, &full, &effects)
		auths := h.core.Snapshot().Authentications
		// Pings spend the core's frames until its bound ends the connection.
		for i := 0; h.core.Ping(t.Context()) == nil; i++ {
			require.Less(t, i, pressureRekeyLimit, "the core's bound never ended the connection")
			time.Sleep(100 * time.Millisecond)
		}
		ended := h.waitCore(func(s control.Snapshot) bool { return !s.Connected && len(s.Frames) == 1 }).Frames[0]
		require.True(t, ended.Sent >= pressureRekeyLimit || ended.Received >= pressureRekeyLimit,
			"the core's frame bound ended the connection: %+v", ended)
		time.Sleep(pressureLease / 4) // the wait goes on, disconnected
		s := h.core.Snapshot()
		require.Equal(t, auths, s.Authentications, "no reconnect during the wait")
		require.Nil(t, s.Results[cmd.CommandID])
		require.Zero(t, effects.Load())
		select {
		case err := <-run.done:
			t.Fatalf("a rekey during the wait ended the runner: %v", err)
		default:
		}

		full.Store(false)
		require.Equal(t, "completed", h.waitResult(cmd.CommandID).Status)
		s = h.waitCore(func(s control.Snapshot) bool { return s.Connected })
		require.Greater(t, s.Authentications, auths, "reconnected once the write completed")
		require.EqualValues(t, 1, effects.Load(), "the effect ran once")
		// The outage outlived ReconnectEventMinOutage, so runner.reconnected
		// may report it; every event still arrives once, in order.
		requireEachEventOnceAllowing(t, s)
		requireNoFailure(t, h)
	})
}
