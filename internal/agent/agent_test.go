package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/provider"
)

// TestACP01_02_ColdOpenEchoTurn: a cold session.open runs initialize
// and session/new through pcwrap (harness.ready, session.started, record
// holds sess-0001), then "echo hi" yields turn.started, item.delta "hi",
// turn.completed and one run.terminal (no run.result.proposed without a
// contract or an accepted result, tools.md §4); every
// event file is consumed exactly once (acp.md §11 scenarios 1, 2).
func TestACP01_02_ColdOpenEchoTurn(t *testing.T) {
	r := newRig(t)
	r.prepare()
	res := r.open()
	var opened map[string]any
	require.NoError(t, json.Unmarshal(res, &opened))
	require.Greater(t, opened["processId"], float64(1), "the agent's pid")
	delete(opened, "processId")
	require.Equal(t, map[string]any{"status": "started", "provider": "acpx", "driver": "acpx_runtime",
		"providerVersion": "", "providerSessionId": "sess-0001", "sessionId": "sess-0001"}, opened, "tools.md §7 session.open result")
	st, evs := r.sink.snapshot()
	require.Equal(t, []string{"runtime.phase.changed", "workspace.ready", "harness.starting", "session.starting",
		"harness.ready", "session.started", "runtime.phase.changed"}, types(evs))
	require.Equal(t, "sess-0001", st.Session.ACPSessionID)
	require.NotNil(t, st.Session.Process)

	turn := r.turn("echo hi")
	require.Equal(t, "pturn-1", turn)
	evs = r.sink.waitEvent(t, "run.terminal")
	got := types(evs[7:])
	require.Equal(t, []string{"turn.submitted", "turn.started"}, got[:2])
	require.Equal(t, 1, count(evs, "turn.completed"))
	require.Equal(t, 0, count(evs, "run.result.proposed"), "no synthetic result without a completion contract (tools.md §4)")
	require.Equal(t, 1, count(evs, "run.terminal"))
	require.Equal(t, "run.terminal", got[len(got)-1])
	text := ""
	for _, e := range evs {
		if e.EventType == "item.delta" {
			text += e.Payload["text"].(string)
		}
	}
	require.Equal(t, "hi", text)

	// Exactly once: every file at or below the committed watermark is
	// deleted (after its commit, so eventually).
	st, _ = r.sink.snapshot()
	dir := r.sessionDir()
	eventually(t, "consumed event files deleted", func() bool {
		ents, err := os.ReadDir(dir + "/events")
		require.NoError(t, err)
		for _, e := range ents {
			if e.Name() <= seqName(st.Session.Process.ConsumedEventSeq) {
				return false
			}
		}
		return true
	})
	require.Positive(t, st.Session.Process.NextStdinSeq)
}

func seqName(n uint64) string {
	b, _ := json.Marshal(n)
	s := string(b)
	for len(s) < 12 {
		s = "0" + s
	}
	return s + ".json"
}

// TestACP04_HandshakeTimeout: an agent that never answers session/new
// is stopped at the bound, no provider event is emitted, the command fails
// session_handshake_timeout, and the next open starts fresh with
// session/new (acp.md §11 scenario 4).
func TestACP04_HandshakeTimeout(t *testing.T) {
	r := newRig(t, func(c *Config) { c.ColdBound = func(string) time.Duration { return 700 * time.Millisecond } })
	r.prepare("--hang-on-new-session")
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err := r.m.Open(ctx, "cmd-open")
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "session_handshake_timeout", ce.Code)
	require.Contains(t, ce.Message, "did not complete ACP initialization within 700ms")
	require.NotContains(t, ce.Message, "--hang")
	st, evs := r.sink.snapshot()
	require.Equal(t, []string{"runtime.phase.changed", "workspace.ready", "harness.starting", "session.starting"}, types(evs),
		"no event after the handshake began (workspace.md §8)")
	require.True(t, st.Session == nil || st.Session.Process == nil, "the agent is stopped")
	entries, _ := os.ReadDir(r.state + "/" + processSessionsDir)
	require.Empty(t, entries, "the session dir is removed")

	// Next open: fresh (the record was never prompted), agent works.
	r.prepare()
	res := r.open()
	require.Contains(t, string(res), `"status":"started"`)
}

// TestFlowControl: provider output waits while something sent is not yet
// acknowledged (prp.md §8.5). A handler waiting on the agent holds the gate
// no longer than the ACKs take: the ACK path fires the drain signal on its
// own routine, and the handshake completes once it does.
func TestFlowControl(t *testing.T) {
	r := newRig(t)
	r.sink.gate = make(chan struct{})
	r.prepare()
	opened := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	go func() { _, err := r.m.Open(ctx, "cmd-open"); opened <- err }()
	eventually(t, "the process recorded", func() bool {
		st, _ := r.sink.snapshot()
		return st.Session != nil && st.Session.Process != nil
	})
	dir := r.sessionDir()
	eventually(t, "the handshake waiting in events/", func() bool {
		ents, _ := os.ReadDir(dir + "/events")
		return len(ents) > 0
	})
	r.sink.mu.Lock()
	close(r.sink.gate) // the ACKs arrive while session.open waits
	r.sink.mu.Unlock()
	require.NoError(t, <-opened, "session.open completes once the gate opens") // bounded by ctx
	r.sink.mu.Lock()
	r.sink.gate = make(chan struct{})
	r.sink.mu.Unlock()
	n := len(func() []provider.Event { _, e := r.sink.snapshot(); return e }())
	r.turn("echo gated")
	eventually(t, "output waiting in events/", func() bool {
		ents, _ := os.ReadDir(dir + "/events")
		return len(ents) > 0
	})
	_, evs := r.sink.snapshot()
	require.Equal(t, []string{"turn.submitted", "turn.started"}, types(evs[n:]), "nothing consumed while the gate is closed")
	r.sink.mu.Lock()
	close(r.sink.gate)
	r.sink.mu.Unlock()
	r.sink.waitEvent(t, "run.terminal")
}

// TestRequestResolve: with the manual permission mode the agent's request
// stays pending as runtime_request.created until request.resolve answers
// it; the agent then goes on with the chosen option (acp.md §4.5).
func TestRequestResolve(t *testing.T) {
	r := newRig(t)
	b, _ := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
		"command": fakeacpBin(t), "cwd": t.TempDir(), "permissionMode": "manual"}})
	_, err := r.m.Prepare(b)
	require.NoError(t, err)
	r.open()
	r.turn("permission allow")
	evs := r.sink.waitEvent(t, "runtime_request.created")
	req := payloadOf(evs, "runtime_request.created")["request"].(map[string]any)
	id := req["requestId"].(string)
	_, err = r.m.Resolve("cmd-resolve", json.RawMessage(`{"requestId":"nope","response":{"optionId":"allow"}}`))
	require.Error(t, err, "an unknown request id is refused")
	res, err := r.m.Resolve("cmd-resolve", jsonenc.MustMarshalEscaped(map[string]any{"requestId": id, "turnId": "pturn-1", "response": map[string]any{"optionId": "allow"}}))
	require.NoError(t, err)
	require.JSONEq(t, `{"status":"delivered","requestId":"`+id+`"}`, string(res))
	evs = r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, "accept", payloadOf(evs, "runtime_request.resolved")["action"])
	require.Equal(t, "completed", payloadOf(evs, "run.terminal")["turnTerminalState"])
	text := ""
	for _, e := range evs {
		if e.EventType == "item.delta" {
			text += e.Payload["text"].(string)
		}
	}
	require.Contains(t, text, "permission outcome allow")
}

// TestDestroyAndSteer: turn.steer is refused (ACP v1 cannot steer);
// session.destroy sends session/close when advertised, stops the agent and
// discards the record, so the next open is cold (acp.md §4.3, §4.5).
func TestDestroyAndSteer(t *testing.T) {
	r := newRig(t)
	r.prepare("--supports-close")
	r.open()
	_, err := r.m.steer()
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, codeCommandExecutionFailed, ce.Code)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err = r.m.Destroy(ctx)
	require.NoError(t, err)
	st, evs := r.sink.snapshot()
	require.Nil(t, st.Session)
	require.Equal(t, "session.closed", evs[len(evs)-1].EventType)
	res := r.open()
	require.Contains(t, string(res), `"status":"started"`)
}

// TestLargePayloadStagedInFile: a launch payload whose base64 exceeds
// 64×1024 characters is staged as command.b64 instead of the environment
// (acp.md §3.1, pcwrap-protocol.md §2.3); pcwrap reads and deletes it.
func TestLargePayloadStagedInFile(t *testing.T) {
	r := newRig(t)
	r.prepare("--runtime-session-id", strings.Repeat("x", 60<<10))
	r.open()
	_, err := os.Stat(filepath.Join(r.sessionDir(), "command.b64"))
	require.True(t, os.IsNotExist(err), "pcwrap deleted the staged payload")
	r.turn("echo big")
	evs := r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, "completed", payloadOf(evs, "run.terminal")["turnTerminalState"])
}

// TestEffectResultsRideWithEvidence: session.open, request.resolve and
// turn.start record their completed result in the very commit that holds
// their effect's evidence (the session, the answer, the prompt's
// reservation), so a crash after it reports the real result (prp.md §7.2
// item 8).
func TestEffectResultsRideWithEvidence(t *testing.T) {
	r := newRig(t)
	b, _ := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
		"command": fakeacpBin(t), "cwd": t.TempDir(), "permissionMode": "manual"}})
	_, err := r.m.Prepare(b)
	require.NoError(t, err)
	opened := r.open()
	r.turn("permission allow")
	evs := r.sink.waitEvent(t, "runtime_request.created")
	id := payloadOf(evs, "runtime_request.created")["request"].(map[string]any)["requestId"].(string)
	resolved, err := r.m.Resolve("cmd-resolve", jsonenc.MustMarshalEscaped(map[string]any{"requestId": id, "response": map[string]any{"optionId": "allow"}}))
	require.NoError(t, err)
	r.sink.waitEvent(t, "run.terminal")

	r.sink.mu.Lock()
	defer r.sink.mu.Unlock()
	for cmd, want := range map[string]struct {
		result json.RawMessage
		event  string
	}{
		"cmd-open":    {opened, "session.started"},
		"cmd-resolve": {resolved, "runtime_request.resolved"},
		"cmd-turn-1":  {nil, "turn.started"},
	} {
		got, ok := r.sink.outcomes[cmd]
		require.True(t, ok, "%s recorded a result with its effect", cmd)
		require.Equal(t, outcomeCompleted, got.Status, cmd)
		if want.result != nil {
			require.JSONEq(t, string(want.result), string(got.Result), cmd)
		}
		require.Contains(t, r.sink.outcomeEvents[cmd], want.event, "%s: in the commit of its evidence", cmd)
	}
}
