package runner

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

// heldDialWait bounds one core dial the runner is expected to hold: long
// enough for the runner to have answered had it not held the handshake.
const heldDialWait = time.Second

// listenUnderPressure starts a listen-mode runner, has the core dial it,
// fills the disk and queues a turn.start whose journal write then waits
// for space, and drops the connection once a pong reports the pressure.
// It returns the runner, the blocked command and the runner's URL.
func listenUnderPressure(t *testing.T, h *harness, full *atomic.Bool, effects *atomic.Int32) (*running, prp.Command, string) {
	t.Helper()
	addr := make(chan string, 1)
	run := h.start(h.config(true), options{Handlers: countingStart(effects), StoreFault: fullDisk(full),
		OnListening: func(a string) { addr <- a }})
	var url string
	select {
	case a := <-addr:
		url = "ws://" + a + prp.ConnectPath(testIdentity.RunID)
	case <-time.After(waitBound):
		t.Fatal("runner did not listen")
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitBound)
	defer cancel()
	require.NoError(t, h.core.Connect(ctx, url))
	time.Sleep(idleFlushSettle) // see startUnderPressure
	full.Store(true)
	cmd := h.queue("turn.start", `{"text":"x"}`)
	for i := 1; ; i++ {
		require.NoError(t, h.core.Ping(ctx))
		s := h.waitCore(func(s control.Snapshot) bool { return s.Pongs >= i })
		if p := s.LastPong.StoragePressure; p != nil && *p {
			break
		}
		require.Less(t, i, 100, "no pong reported storage pressure")
		time.Sleep(100 * time.Millisecond)
	}
	h.core.DropCurrent()
	h.waitCore(func(s control.Snapshot) bool { return !s.Connected })
	return run, cmd, url
}

// TestDurability19_ListenHoldsHandshakeUnderPressure (durability.md §6.2
// item 4, listen mode): the connection is lost while a state write waits
// for disk space; the core's redial is not authenticated until the write
// completes, so nothing renews the lease meanwhile. Once space returns the
// next redial authenticates and the command's one result arrives.
func TestDurability19_ListenHoldsHandshakeUnderPressure(t *testing.T) {
	h := newHarness(t, nil)
	var full atomic.Bool
	var effects atomic.Int32
	_, cmd, url := listenUnderPressure(t, h, &full, &effects)
	auths := h.core.Snapshot().Authentications

	ctx, cancel := context.WithTimeout(t.Context(), heldDialWait)
	err := h.core.Connect(ctx, url)
	cancel()
	require.Error(t, err, "a redial during the wait is not authenticated")
	require.Equal(t, auths, h.core.Snapshot().Authentications)
	require.Zero(t, effects.Load())

	full.Store(false)
	ctx, cancel = context.WithTimeout(t.Context(), waitBound)
	defer cancel()
	for h.core.Connect(ctx, url) != nil {
		require.NoError(t, ctx.Err(), "the runner never accepted a redial after the write completed")
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, "completed", h.waitResult(cmd.CommandID).Status)
	require.EqualValues(t, 1, effects.Load())
	require.Greater(t, h.core.Snapshot().Authentications, auths)
}

// TestDurability19_ListenLeaseExpiresWhileHeld (durability.md §6.2 item
// 4, listen mode): while the core keeps redialling, a held handshake does
// not keep the runner alive: the lease expires, the wait is cancelled and
// the runner exits with lease_expired, the state file as it was.
func TestDurability19_ListenLeaseExpiresWhileHeld(t *testing.T) {
	const ttl = 3 * time.Second
	h := newHarness(t, func(c *control.Config) { c.LeaseTTL = ttl })
	var full atomic.Bool
	var effects atomic.Int32
	run, cmd, url := listenUnderPressure(t, h, &full, &effects)
	auths := h.core.Snapshot().Authentications
	before, err := readFile(filepath.Join(h.stateDir, state.FileName))
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	redials := make(chan struct{})
	go func() { // the core redials at once after each failed attempt
		defer close(redials)
		for ctx.Err() == nil {
			actx, acancel := context.WithTimeout(ctx, heldDialWait)
			_ = h.core.Connect(actx, url)
			acancel()
		}
	}()
	err = run.wait(t)
	cancel()
	<-redials
	require.ErrorIs(t, err, config.ErrLeaseExpired)
	s := h.core.Snapshot()
	require.Equal(t, auths, s.Authentications, "no handshake completed during the wait")
	require.Nil(t, s.Results[cmd.CommandID])
	require.Zero(t, effects.Load())
	after, err := readFile(filepath.Join(h.stateDir, state.FileName))
	require.NoError(t, err)
	require.Equal(t, before, after, "state file intact")
}
