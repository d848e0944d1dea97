package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// TestACP03_BoundFollowsAgent: the cold bound follows the agent name
// even with an overridden command: a slow initialize completes as claude
// and times out as codex (scenario 3, with scaled bounds).
func TestACP03_BoundFollowsAgent(t *testing.T) {
	bounds := func(c *Config) {
		c.ColdBound = func(a string) time.Duration {
			if a == "claude" {
				return 4 * time.Second
			}
			return 700 * time.Millisecond
		}
	}
	r := newRig(t, bounds)
	r.prepareAs("claude", "--init-delay-ms", "1500")
	r.open()

	r2 := newRig(t, bounds)
	r2.prepareAs("codex", "--init-delay-ms", "1500")
	ce := r2.openErr()
	require.Equal(t, "session_handshake_timeout", ce.Code)
}

// TestACP06_InitFailures: -32000 on session/new → authentication_required
// (no retry); protocol version 2 → acp_session_init_failed, agent stopped
// (scenario 6).
func TestACP06_InitFailures(t *testing.T) {
	r := newRig(t)
	r.prepare("--auth-required-on-new")
	require.Equal(t, "authentication_required", r.openErr().Code)

	r2 := newRig(t)
	r2.prepare("--protocol-version", "2")
	require.Equal(t, "acp_session_init_failed", r2.openErr().Code)
	entries, _ := os.ReadDir(filepath.Join(r2.state, processSessionsDir))
	require.Empty(t, entries, "the agent is stopped and its session dir removed")
}

// TestACP07_StartupExit: an agent that exits during startup fails with
// an agent_startup_* class; a command that does not exist with
// agent_spawn_failed (scenario 7).
func TestACP07_StartupExit(t *testing.T) {
	r := newRig(t)
	r.prepare("--exit-during-startup", "1")
	require.Regexp(t, `^agent_startup_`, r.openErr().Code)

	r2 := newRig(t)
	b, _ := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
		"command": "does-not-exist", "cwd": t.TempDir()}})
	_, err := r2.m.Prepare(b)
	require.NoError(t, err)
	require.Equal(t, "agent_spawn_failed", r2.openErr().Code)
}

// TestACP12_LateUpdates: updates after the prompt answer are dropped
// and counted; the next turn is unaffected (scenario 12).
func TestACP12_LateUpdates(t *testing.T) {
	r := newRig(t)
	r.prepare("--late-updates", "3")
	r.open()
	r.turn("echo one")
	r.sink.waitEvent(t, "run.terminal")
	// Late updates carry no turn id: they are told apart only by arriving
	// while no turn is active, so turn two starts once they were consumed.
	eventually(t, "late updates counted", func() bool {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		return r.m.cl.Record().Process.Wire.LateUpdates >= 3
	})
	_, before := r.sink.snapshot()
	r.turn("echo two")
	evs := r.sink.waitFor(t, "second terminal", func(_ Stored, evs []provider.Event) bool { return count(evs, "run.terminal") == 2 })
	text := ""
	for _, e := range since(evs, len(before)) {
		if e.EventType == "item.delta" {
			text += e.Payload["text"].(string)
		}
	}
	require.Equal(t, "two", text, "late updates of turn one never reach turn two")
}

// TestACP14_SerializedPrompts: a turn.start while a turn is active
// fails and sends nothing (scenario 14).
func TestACP14_SerializedPrompts(t *testing.T) {
	r := newRig(t)
	r.prepare("--busy-prompt", "reject")
	r.open()
	r.turn("sleep 2000")
	b, _ := json.Marshal(map[string]string{"text": "echo again"})
	_, err := r.m.StartTurn("cmd-turn", b)
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, codeCommandExecutionFailed, ce.Code)
	evs := r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, 1, count(evs, "turn.started"))
	require.Equal(t, "completed", payloadOf(evs, "run.terminal")["turnTerminalState"])
}

// TestACP15_ResumeByLoad: after an agent loss, a prompted record is
// resumed with session/load; replayed updates are not forwarded;
// session.resumed; a failing load is session_resume_required (scenario 15).
func TestACP15_ResumeByLoad(t *testing.T) {
	r := newRig(t)
	r.prepare("--supports-load-session", "--load-replay", "5")
	r.open()
	r.turn("echo before")
	r.sink.waitEvent(t, "run.terminal")
	r.killAgent()
	_, before := r.sink.snapshot()
	res := r.open()
	require.Contains(t, string(res), `"status":"resumed"`)
	_, evs := r.sink.snapshot()
	require.Equal(t, []string{"harness.starting", "session.resuming", "harness.ready", "session.resumed", "runtime.phase.changed"},
		types(since(evs, len(before))), "replay is not forwarded")
	r.turn("echo after")
	r.sink.waitFor(t, "second terminal", func(_ Stored, evs []provider.Event) bool { return count(evs, "run.terminal") == 2 })

	r2 := newRig(t)
	r2.prepare("--supports-load-session", "--load-fail-code", "-32002")
	r2.open()
	r2.turn("echo before")
	r2.sink.waitEvent(t, "run.terminal")
	r2.killAgent()
	require.Equal(t, "session_resume_required", r2.openErr().Code)
}

// TestACP16_NeverPromptedIsDiscarded: a record that never received a
// prompt is discarded after an agent loss: the next open runs session/new
// (scenario 16).
func TestACP16_NeverPromptedIsDiscarded(t *testing.T) {
	r := newRig(t)
	r.prepare("--supports-load-session")
	r.open()
	r.killAgent()
	res := r.open()
	require.Contains(t, string(res), `"status":"started"`)
}

// TestACP21_CommittedFileDeletedUnread: a file at or below the
// committed sequence (a crash between the outbox commit and the deletion)
// is deleted unread by the next process (scenario 21).
func TestACP21_CommittedFileDeletedUnread(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	r.turn("echo once")
	r.sink.waitEvent(t, "run.terminal")
	dir := r.sessionDir()
	r.m.Close()
	st, before := r.sink.snapshot()
	seq := st.Session.Process.ConsumedEventSeq
	require.Positive(t, seq)
	line := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-0001","update":{"sessionUpdate":"agent_message_chunk","messageId":"x","content":{"type":"text","text":"DUPLICATE"}}}}` + "\n"
	body := frame.DataFrame(frame.StreamStdout, []byte(line)).AppendJSON(nil)
	name := filepath.Join(dir, sessiondir.EventsDir, sessiondir.SeqName(int64(seq)))
	require.NoError(t, os.WriteFile(name, body, 0o600))

	m2 := NewManager(r.cfg, st)
	r.m = m2
	require.NoError(t, m2.Start())
	eventually(t, "replayed file deleted", func() bool { _, err := os.Stat(name); return os.IsNotExist(err) })
	_, evs := r.sink.snapshot()
	require.Equal(t, []string{"session.reconciled"}, types(evs[len(before):]), "nothing emitted from a committed file")
}

// TestACP22_PcwrapDiedWhileDown: pcwrap is killed while runnerd is
// down; the restart finds .pcwrap.lock free, marks the agent gone, and the
// next session.open resumes via session/load (scenario 22).
func TestACP22_PcwrapDiedWhileDown(t *testing.T) {
	r := newRig(t)
	r.prepare("--supports-load-session")
	r.open()
	r.turn("echo before")
	r.sink.waitEvent(t, "run.terminal")
	r.m.mu.Lock()
	pid := r.m.proc.pid
	r.m.mu.Unlock()
	dir := r.sessionDir()
	r.m.Close()
	require.NoError(t, killWait(pid))
	st, _ := r.sink.snapshot()
	m2 := NewManager(r.cfg, st)
	r.m = m2
	require.NoError(t, m2.Start())
	eventually(t, "agent marked gone", func() bool { st, _ := r.sink.snapshot(); return st.Session.Process == nil })
	_, err := os.Stat(dir)
	require.True(t, os.IsNotExist(err), "the dead session dir is removed")
	res := r.open()
	require.Contains(t, string(res), `"status":"resumed"`)
}

// TestACP19_ColdStartGate: five concurrent cold opens with a slow
// initialize share a gate of four: no fifth agent is launched before a
// handshake finished, and all five succeed (scenario 19).
func TestACP19_ColdStartGate(t *testing.T) {
	gate := acpx.NewColdStartGate(4, nil)
	rigs := make([]*rig, 5)
	for i := range rigs {
		rigs[i] = newRig(t, func(c *Config) { c.Gate = gate })
		rigs[i].prepare("--init-delay-ms", "800")
	}
	launched := func() int {
		n := 0
		for _, r := range rigs {
			ents, _ := os.ReadDir(filepath.Join(r.state, processSessionsDir))
			for _, e := range ents {
				if e.IsDir() {
					n++
				}
			}
		}
		return n
	}
	var wg sync.WaitGroup
	errs := make([]error, len(rigs))
	for i, r := range rigs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), testWait)
			defer cancel()
			_, errs[i] = r.m.Open(ctx, "cmd-open")
		}()
	}
	// Count launches only while no slot has been given back. The release
	// count is read after the launch count: a fifth launch that waited for
	// a slot happened after a release, so its sample is never counted.
	opened := make(chan struct{})
	go func() { wg.Wait(); close(opened) }()
	maxBefore := 0
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
sample:
	for gate.Released() == 0 {
		n := launched()
		if gate.Released() == 0 {
			maxBefore = max(maxBefore, n)
		}
		select {
		case <-tick.C:
		case <-opened:
			break sample
		}
	}
	<-opened
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.LessOrEqual(t, maxBefore, 4, "at most four cold handshakes at once")
	require.Equal(t, 5, launched())
}
