package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// rekeyLimit is the core frame bound of the newest server's rekey
// qualification (durability.md §2.1, T-rekey).
const rekeyLimit = 16

// rekeyStyles are the two ways a core ends a connection at its bound:
// the dial-mode raw wire destroys TCP, the listen-mode ws wire sends Close
// 1012 (durability.md §2.1).
var rekeyStyles = map[string]prp.RekeyClose{"tcp-drop": prp.RekeyDrop, "close-1012": prp.RekeyCloseFrame}

// outageLog records, from the core's side, how long each rekey left the
// run without a connection: from the moment the core saw it end to the
// next authentication.
type outageLog struct {
	mu   sync.Mutex
	gaps []time.Duration
}

// watch samples the core until ctx ends.
func (o *outageLog) watch(ctx context.Context, core *control.Core) {
	auths := core.Snapshot().Authentications
	for ctx.Err() == nil {
		if core.Wait(ctx, func(s control.Snapshot) bool { return !s.Connected }) != nil {
			return
		}
		lost := time.Now()
		if core.Wait(ctx, func(s control.Snapshot) bool { return s.Connected && s.Authentications > auths }) != nil {
			return
		}
		auths = core.Snapshot().Authentications
		o.mu.Lock()
		o.gaps = append(o.gaps, time.Since(lost))
		o.mu.Unlock()
	}
}

// summary is "n rekeys, median m, max x".
func (o *outageLog) summary() (n int, median, maxGap time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	g := slices.Clone(o.gaps)
	slices.Sort(g)
	if len(g) == 0 {
		return 0, 0, 0
	}
	return len(g), g[len(g)/2], g[len(g)-1]
}

// startRekeyRig starts runnerd against a core whose frame bound is
// rekeyLimit, with a watcher of the outages its closes cause.
func startRekeyRig(t *testing.T, style prp.RekeyClose) (*agentRig, *outageLog) {
	t.Helper()
	r := newAgentRigWith(t, func(c *control.Config) { c.FrameLimit, c.RekeyClose = rekeyLimit, style })
	proc := r.start(t)
	t.Cleanup(func() {
		_ = proc.Process.Signal(syscall.SIGTERM)
		waitExit(t, proc)
	})
	r.c.wait(t, func(s control.Snapshot) bool { return s.Connected })
	ctx, cancel := context.WithCancel(context.Background())
	log := &outageLog{}
	done := make(chan struct{})
	go func() { defer close(done); log.watch(ctx, r.c.core.Core) }()
	t.Cleanup(func() { cancel(); <-done })
	return r, log
}

// requireRekeyedCleanly: ≥ 4 connections, every event once and in order,
// one turn, no runner.reconnected, no recoverable failure.
func requireRekeyedCleanly(t *testing.T, r *agentRig, evs []event) {
	t.Helper()
	requireContiguous(t, evs)
	require.GreaterOrEqual(t, r.c.core.Snapshot().Authentications, 4, "the core's bound ended connections")
	require.Equal(t, 1, countType(evs, "turn.started"))
	require.Equal(t, 1, countType(evs, "run.terminal"))
	require.Zero(t, countType(evs, prp.EventRunnerReconnected), "a rekey is no outage")
	require.Zero(t, countType(evs, "runner.recoverable_failure"))
	require.Equal(t, 1, countType(evs, prp.EventRunnerConnected))
	require.Zero(t, countType(evs, "runner.reconciled"), "the same runnerd process throughout")
}

// TestDurability07_RekeyDuringAgentTurn: durability.md §11 scenario 7:
// "Core limit 16, active turn, 64 requests → ≥ 4 connections, no malformed
// frame, same runner/provider PIDs, one `turn/start`, no interrupt or
// resume (T-rekey); no `runner.reconnected`." With scenario 30's two close
// styles (dial mode: the listen-mode styles are
// internal/runner TestDurability06_ListenCoreClose1012). The agent's turn
// runs (a 2 s sleep) while the core sends 64 session.snapshot requests.
func TestDurability07_RekeyDuringAgentTurn(t *testing.T) {
	for name, style := range rekeyStyles {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			r, log := startRekeyRig(t, style)
			r.prepare(t)
			r.open(t)
			sessions := processSessions(r.dir)
			require.Len(t, sessions, 1)
			pgid := childPgid(t, filepath.Join(r.dir, "process-sessions", sessions[0]))
			require.Equal(t, "completed", r.run(t, "turn.start", map[string]any{"text": "sleep 2000"}).Status)
			before := r.c.core.Snapshot().Authentications
			var ids []string
			for range 64 {
				ids = append(ids, r.queue(t, "session.snapshot", map[string]any{}))
			}
			for _, id := range ids {
				require.Equal(t, "completed", r.result(t, id).Status, id)
			}
			require.Zero(t, countType(r.events(t), "run.terminal"), "the rekeys fell inside the turn")
			require.GreaterOrEqual(t, r.c.core.Snapshot().Authentications-before, 3, "rekeys inside the turn")
			evs := r.waitEvents(t, "run.terminal", 1)
			requireRekeyedCleanly(t, r, evs)
			require.Equal(t, sessions, processSessions(r.dir), "the same provider session")
			require.Equal(t, pgid, childPgid(t, filepath.Join(r.dir, "process-sessions", sessions[0])), "the same agent process")
			require.NoError(t, syscall.Kill(-pgid, 0), "the agent still runs")
			n, median, maxGap := log.summary()
			t.Logf("core limit %d, %s: %d connections, %d events, %d results; %d rekeys observed, outage median %v, max %v; total %v",
				rekeyLimit, name, r.c.core.Snapshot().Authentications, len(evs), len(r.c.core.Snapshot().Results), n, median, maxGap, time.Since(start))
			for _, f := range r.c.core.Snapshot().Frames {
				// Every ended connection stayed within the core's bound.
				require.LessOrEqual(t, f.Sent, uint64(rekeyLimit), f.ConnectionID)
				require.LessOrEqual(t, f.Received, uint64(rekeyLimit), f.ConnectionID)
				t.Logf("%s: core sent %d frames (welcome included), received %d", f.ConnectionID, f.Sent, f.Received)
			}
		})
	}
}

// TestDurability30_RekeyDuringToolCall: durability.md §11 scenario 30:
// "Frame-limit closes in both styles (Close 1012; TCP destroyed, no Close
// frame), listen and dial mode, limit 16 → plain disconnects: same PIDs,
// one `turn/start`, no `recoverable_failure`." Here in the middle of a
// Paperclip tool call (dial mode): the call's input, its result and the
// agent's answer arrive exactly once.
func TestDurability30_RekeyDuringToolCall(t *testing.T) {
	for name, style := range rekeyStyles {
		t.Run(name, func(t *testing.T) {
			r, log := startRekeyRig(t, style)
			res := r.run(t, "run.prepare", map[string]any{
				"provider":        map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(t), "args": []string{"--mcp-http"}, "cwd": t.TempDir()},
				"authorizedTools": commentCatalog(),
			})
			require.Equal(t, "completed", res.Status, string(res.Result))
			r.open(t)
			sessions := processSessions(r.dir)
			require.Len(t, sessions, 1)
			pgid := childPgid(t, filepath.Join(r.dir, "process-sessions", sessions[0]))
			res = r.run(t, "turn.start", map[string]any{"text": `mcp-call issue.comment {"body":"rekey"}`})
			require.Equal(t, "completed", res.Status, string(res.Result))
			evs := r.waitEvents(t, "semantic_tool.input", 1)
			in, _ := find(evs, "semantic_tool.input")
			st := field(t, in, "semantic_tool").(map[string]any)
			// The call is pending: enough traffic to cross the bound a few times.
			for range 32 {
				require.Equal(t, "completed", r.run(t, "session.snapshot", map[string]any{}).Status)
			}
			res = r.run(t, "semantic_tool.result", map[string]any{"callId": st["callId"], "operationId": st["operationId"],
				"inputDigest": st["content"].(map[string]any)["digest"], "result": map[string]any{"id": "c-rekey"}, "isError": false})
			require.Equal(t, "completed", res.Status, string(res.Result))
			require.Contains(t, string(res.Result), `"delivered"`)
			evs = r.waitEvents(t, "run.terminal", 1)
			requireRekeyedCleanly(t, r, evs)
			require.Equal(t, 1, countType(evs, "semantic_tool.input"))
			require.Equal(t, 1, countType(evs, "semantic_tool.result"))
			require.Equal(t, pgid, childPgid(t, filepath.Join(r.dir, "process-sessions", sessions[0])), "the same agent process")
			n, median, maxGap := log.summary()
			t.Logf("core limit %d, %s, tool call: %d connections; %d rekeys observed, outage median %v, max %v",
				rekeyLimit, name, r.c.core.Snapshot().Authentications, n, median, maxGap)
		})
	}
}
