package runner

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/state"
)

// spanningOpenBound stands in for session.open's own bound (the agent's
// start, acp.md): the handler below gives up at it, so a result that says
// it did is the deadlock, not a slow machine (synctest's clock).
const spanningOpenBound = 60 * time.Second

// spanningOpenPoll is how often the handler looks at the core's events.
const spanningOpenPoll = 10 * time.Millisecond

// TestCommandSpanningReconnectSeesItsOutputDelivered: a session.open still
// running when its connection drops commits the agent's handshake output
// and, like the agent's flow-control gate (prp.md §8.5), goes on only once
// the core has it. The next connection must attach the sender while the
// command still runs; when its authentication waited for the command, the
// two waited for each other until the command's bound (the chaos wave's
// agent-kill@turn+rekey@start run).
func TestCommandSpanningReconnectSeesItsOutputDelivered(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		entered, dropped := make(chan struct{}), make(chan struct{})
		delivered := func() bool {
			evs := prptest.DecodeEvents(t, h.core.Snapshot().Events)
			return len(prptest.OfType(evs, prp.EventRunnerDiagnostic)) > 0
		}
		open := func(e emit) handler {
			return func(ctx context.Context, cmd *prp.Command) (json.RawMessage, error) {
				close(entered)
				select {
				case <-dropped:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				if err := e(ctx, state.Event{Type: prp.EventRunnerDiagnostic, Priority: state.P1,
					Payload: json.RawMessage(`{"note":"agent handshake"}`)}); err != nil {
					return nil, err
				}
				bound := time.NewTimer(spanningOpenBound)
				defer bound.Stop()
				for !delivered() {
					select {
					case <-bound.C:
						return json.RawMessage(`{"reachedBound":true}`), nil
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(spanningOpenPoll):
					}
				}
				return json.RawMessage(`{"reachedBound":false}`), nil
			}
		}
		h.start(h.config(false), options{Handlers: map[string]func(emit) handler{prp.CommandSessionOpen: open}})
		h.waitCore(func(s control.Snapshot) bool { return s.Connected })
		cmd := h.queue(prp.CommandSessionOpen, `{}`)
		<-entered
		h.core.DropCurrent()
		h.waitCore(func(s control.Snapshot) bool { return s.Authentications == 2 })
		close(dropped)
		res := h.waitResult(cmd.CommandID)
		require.Equal(t, "completed", res.Status)
		require.JSONEq(t, `{"reachedBound":false}`, string(res.Result),
			"the open's output reached the core only after the open's own bound")
		requireEachEventOnceAllowing(t, h.core.Snapshot())
	})
}

// TestStartupMemoryReleasedOnceBeforeFirstConnection: the release of
// start-up memory (a forced collection in runnerd) runs once per process,
// after start-up and before the core sees a connection; a reconnect does not
// run it again.
func TestStartupMemoryReleasedOnceBeforeFirstConnection(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		var released, authenticatedBefore atomic.Int32
		h.start(h.config(false), options{ReleaseStartupMemory: func() {
			released.Add(1)
			authenticatedBefore.Store(int32(h.core.Snapshot().Authentications))
		}})
		h.waitResult(h.queue(prp.CommandSessionSnapshot, `{}`).CommandID)
		require.EqualValues(t, 1, released.Load(), "released during start-up")
		require.Zero(t, authenticatedBefore.Load(), "released before the first connection")

		h.core.DropCurrent()
		h.waitCore(func(s control.Snapshot) bool { return s.Authentications == 2 })
		h.waitResult(h.queue(prp.CommandSessionSnapshot, `{}`).CommandID)
		synctest.Wait()
		require.EqualValues(t, 1, released.Load(), "a reconnect releases nothing more")
	})
}
