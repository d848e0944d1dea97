package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/codexapp"
	"github.com/pcrunner/pcrunner/internal/opencode"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// newOpenCodeRig is a Manager whose opencode executable is
// test/fakeopencode.
func newOpenCodeRig(t *testing.T) *rig {
	t.Helper()
	bin := testbin.Build(t, "test/fakeopencode")
	oc := opencode.Registration
	oc.Executable = bin
	return newRig(t, func(c *Config) { c.Drivers = []provider.Registration{acpx.Registration, codexapp.Registration, oc} })
}

// prepareOpenCode binds kind opencode (codex.md §6); command/args name
// the reference's Node facade and are ignored.
func (r *rig) prepareOpenCode(extra ...string) {
	r.t.Helper()
	prov := map[string]any{
		"kind": "opencode", "provider": "opencode", "driver": "opencode_server", "providerVersion": "opencode-server-v1",
		"command": "node", "args": []string{"facade.js"}, "cwd": r.cwd, "approvalPolicy": "never",
		"model": "fake/fake-model", "instructions": "Be brief.",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		prov[extra[i]] = extra[i+1]
	}
	desc := map[string]any{"provider": prov}
	b, _ := json.Marshal(desc)
	_, err := r.m.Prepare(b)
	require.NoError(r.t, err)
}

// TestOpenCode01_ColdOpenTurn: kind opencode runs `opencode serve` under
// pcwrap; session.open creates an OpenCode session (session.started with
// its id); a turn's deltas, its tool call and its end become the shared
// mapper's events, once each, schema-valid; the password is in the
// record only.
func TestOpenCode01_ColdOpenTurn(t *testing.T) {
	r := newOpenCodeRig(t)
	r.prepareOpenCode()
	r.open()
	evs := r.sink.waitEvent(t, "session.started")
	got, _ := json.Marshal(payloadOf(evs, "session.started"))
	require.Contains(t, string(got), "ses_")
	n := len(evs)
	r.turn("FAKEOC: text hello from opencode")
	evs = since(r.sink.waitEvent(t, "run.terminal"), n)
	t.Logf("events: %v", types(evs))
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, "hello from opencode", said(evs))
	require.Equal(t, 1, count(evs, "turn.completed"))
	require.Equal(t, 1, count(evs, "run.terminal"))

	n += len(evs)
	r.turn("FAKEOC: tool go test ./...")
	all := r.sink.waitFor(t, "a second run.terminal", func(_ Stored, evs []provider.Event) bool { return count(evs, "run.terminal") == 2 })
	evs = since(all, n)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, 1, count(evs, "tool.execution.completed"), "%v", types(evs))

	r.m.mu.Lock()
	rec := opencode.ReadRecord(r.m.cl.Core)
	r.m.mu.Unlock()
	require.Len(t, rec.Password, 43)
	require.True(t, strings.HasPrefix(rec.URL, "http://127.0.0.1:"))
	for _, e := range all {
		b, _ := json.Marshal(e)
		require.NotContains(t, string(b), rec.Password)
	}
}

// TestOpenCode02_Interrupt: turn.interrupt aborts over HTTP; the turn
// ends turn.interrupted and the server keeps running for the next turn.
func TestOpenCode02_Interrupt(t *testing.T) {
	r := newOpenCodeRig(t)
	r.prepareOpenCode()
	r.open()
	n := len(r.sink.waitEvent(t, "session.started"))
	r.turn("FAKEOC: slow 1000 20")
	r.sink.waitEvent(t, "item.delta")
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err := r.m.Cancel(ctx, Interrupt)
	require.NoError(t, err)
	evs := since(r.sink.waitEvent(t, "run.terminal"), n)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, 1, count(evs, "turn.interrupted"), "%v", types(evs))
	n += len(evs)
	r.turn("FAKEOC: text still alive")
	all := r.sink.waitFor(t, "a second run.terminal", func(_ Stored, evs []provider.Event) bool { return count(evs, "run.terminal") == 2 })
	require.Equal(t, "still alive", said(since(all, n)))
}

// TestOpenCodePrepare: kind opencode binds the opencode_server driver
// with `serve --hostname 127.0.0.1 --port 0` whatever command/args say;
// an approvalPolicy other than never fails command_execution_failed.
func TestOpenCodePrepare(t *testing.T) {
	b, err := parseDescriptor(json.RawMessage(mustJSON(map[string]any{"provider": map[string]any{
		"kind": "opencode", "command": "node", "args": []string{"proxy.js"}, "cwd": "/work"}})), testDrivers)
	require.NoError(t, err)
	require.Equal(t, opencode.Kind, b.Driver)
	require.Equal(t, "opencode", b.Command)
	require.Equal(t, []string{"serve", "--hostname", "127.0.0.1", "--port", "0"}, b.Args)
	_, err = parseDescriptor(json.RawMessage(mustJSON(map[string]any{"provider": map[string]any{
		"kind": "opencode", "approvalPolicy": "on-request"}})), testDrivers)
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, codeCommandExecutionFailed, ce.Code)
}

// TestOpenCode03_RestartMidTurn: runnerd goes away mid-turn (the manager
// closes, opencode serve keeps running under pcwrap) and a new one
// re-adopts it: the stream reopens, the message list fills in what was
// missed, and the turn's text arrives exactly once across both, with one
// turn.completed.
func TestOpenCode03_RestartMidTurn(t *testing.T) {
	r := newOpenCodeRig(t)
	r.prepareOpenCode()
	r.open()
	n := len(r.sink.waitEvent(t, "session.started"))
	r.turn("FAKEOC: slow 60 20")
	r.sink.waitFor(t, "some deltas", func(_ Stored, evs []provider.Event) bool { return len(said(evs)) >= 20 })
	dir := r.sessionDir()
	pgid := agentPgid(t, dir)
	r.m.Close()

	st, _ := r.sink.snapshot()
	m2 := NewManager(r.cfg, st)
	r.m = m2 // the rig's cleanup shuts it down
	require.NoError(t, m2.Start())
	evs := since(r.sink.waitEvent(t, "run.terminal"), n)
	require.Equal(t, pgid, agentPgid(t, dir), "the server keeps its process group")
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, strings.Repeat("slow ", 60), said(evs))
	require.Equal(t, 1, count(evs, "turn.started"))
	require.Equal(t, 1, count(evs, "turn.completed"), "%v", types(evs))
	require.Equal(t, 1, count(evs, "item.started"))
}

// TestOpenCode04_Permission: OpenCode's permission.asked goes through the
// shared permission flow: approve-all answers it at once; manual makes it
// a runtime_request.created that request.resolve answers, over HTTP; a
// rejection fails the tool call (tools.md §6–§7).
func TestOpenCode04_Permission(t *testing.T) {
	t.Run("approve-all", func(t *testing.T) {
		r := newOpenCodeRig(t)
		r.prepareOpenCode()
		r.open()
		r.turn("FAKEOC: permission rm -rf build")
		evs := r.sink.waitEvent(t, "run.terminal")
		prpschema.RequireValidEvents(t, evs)
		require.Zero(t, count(evs, "runtime_request.created"))
		require.Equal(t, "completed", payloadOf(evs, "tool.execution.completed")["status"])
	})
	for _, tc := range []struct{ action, status string }{{provider.ActionAccept, "completed"}, {provider.ActionDecline, "failed"}} {
		t.Run("manual-"+tc.action, func(t *testing.T) {
			r := newOpenCodeRig(t)
			r.prepareOpenCode("permissionMode", "manual")
			r.open()
			r.turn("FAKEOC: permission rm -rf build")
			evs := r.sink.waitEvent(t, "runtime_request.created")
			id := payloadOf(evs, "runtime_request.created")["request"].(map[string]any)["requestId"].(string)
			b, _ := json.Marshal(map[string]any{"requestId": id, "resolution": map[string]any{"action": tc.action}})
			res, err := r.m.Resolve("cmd-resolve", b)
			require.NoError(t, err)
			require.JSONEq(t, `{"status":"delivered","requestId":"`+id+`"}`, string(res))
			evs = r.sink.waitEvent(t, "run.terminal")
			prpschema.RequireValidEvents(t, evs)
			require.Equal(t, 1, count(evs, "runtime_request.resolved"), "%v", types(evs))
			require.Equal(t, tc.status, payloadOf(evs, "tool.execution.completed")["status"])
		})
	}
}

// TestOpenCodeBurstCommitsInBatches: OpenCode's event stream follows the
// agent reader's waits (the commit queue, then prp.md §8.5's flow
// control), and what arrived meanwhile goes in one durable write: a burst
// of deltas held at the gate costs fewer writes than deltas, and every
// delta arrives once, in order.
func TestOpenCodeBurstCommitsInBatches(t *testing.T) {
	const words = 400
	r := newOpenCodeRig(t)
	r.prepareOpenCode()
	r.open()
	n := len(r.sink.waitEvent(t, "session.started"))
	gate := make(chan struct{})
	r.sink.mu.Lock()
	r.sink.gate = gate // nothing sent is acknowledged until the burst is over
	r.sink.mu.Unlock()

	ws := make([]string, words)
	for i := range ws {
		ws[i] = fmt.Sprintf("w%d", i)
	}
	text := strings.Join(ws, " ")
	r.turn("FAKEOC: text " + text)
	r.m.mu.Lock()
	rec := opencode.ReadRecord(r.m.cl.Core)
	r.m.mu.Unlock()
	waitOpenCodeIdle(t, rec.URL, rec.Password)
	r.sink.mu.Lock()
	before := r.sink.commits
	r.sink.mu.Unlock()
	close(gate)

	evs := since(r.sink.waitEvent(t, "run.terminal"), n)
	r.sink.mu.Lock()
	writes := r.sink.commits - before
	r.sink.mu.Unlock()
	require.Equal(t, text, said(evs), "every delta once, in order")
	require.Equal(t, 1, count(evs, "turn.completed"))
	t.Logf("%d deltas in %d durable writes", words, writes)
	// Typically a few writes; under load the fake's stream writer may
	// still be flushing its events one by one when the gate opens, and the
	// reader keeps pace with part of the burst (125 writes seen). One write
	// per delta, as before batching, is 400.
	require.Less(t, writes, words/2, "a held burst is committed in batches")
}

// waitOpenCodeIdle waits until the OpenCode server at url reports no busy
// session: the turn's events are all published.
func waitOpenCodeIdle(t *testing.T, url, password string) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for {
		req, err := http.NewRequest(http.MethodGet, url+"/session/status", nil)
		require.NoError(t, err)
		req.SetBasicAuth("opencode", password)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var busy map[string]any
		err = json.NewDecoder(resp.Body).Decode(&busy)
		resp.Body.Close()
		require.NoError(t, err)
		if len(busy) == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "the OpenCode turn did not end within %v", testWait)
		time.Sleep(10 * time.Millisecond)
	}
}
