package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

func fakecodexBin(t testing.TB) string {
	t.Helper()
	return testbin.Build(t, "test/fakecodex")
}

// prepareCodex binds fakecodex as kind codex (codex.md §1).
func (r *agentRig) prepareCodex(t *testing.T, flags ...string) {
	t.Helper()
	r.prepareDescriptor(t, map[string]any{"kind": "codex", "provider": "codex", "driver": "codex_app_server",
		"providerVersion": "codex-app-server-v1", "command": fakecodexBin(t), "args": flags, "cwd": t.TempDir(),
		"approvalPolicy": "never", "model": nil, "collaborationMode": "default"})
}

// requireSchemaValid validates every event the core received against the
// reference event schema (codex.md §5: as for ACP agents).
func (r *agentRig) requireSchemaValid(t *testing.T) {
	t.Helper()
	s := prpschema.Load(t)
	for i, raw := range r.c.core.Snapshot().Events {
		var env struct {
			Payload any `json:"payload"` // the event inside the transport frame
		}
		require.NoError(t, json.Unmarshal(raw, &env))
		require.NoError(t, prpschema.Validate(s.Event(env.Payload), env.Payload), "event %d: %s", i, raw)
	}
}

// TestCodex01_PrepareEndToEnd: run.prepare kind codex with approvalPolicy
// never completes; on-request and a kind still unknown fail
// command_execution_failed, the latter naming the kind.
func TestCodex01_PrepareEndToEnd(t *testing.T) {
	r := newAgentRig(t)
	r.start(t)
	r.prepareCodex(t)
	res := r.run(t, "run.prepare", map[string]any{"provider": map[string]any{"kind": "codex", "approvalPolicy": "on-request"}})
	require.Equal(t, "failed", res.Status)
	require.Contains(t, string(res.Result), "command_execution_failed")
	res = r.run(t, "run.prepare", map[string]any{"provider": map[string]any{"kind": "aws_agentcore"}})
	require.Equal(t, "failed", res.Status)
	require.Contains(t, string(res.Result), "command_execution_failed")
	require.Contains(t, string(res.Result), "aws_agentcore")
}

// TestCodex03_TurnEndToEnd: runnerd + pcwrap + fakecodex, driven by the
// fake core: a turn with plan, usage, deltas and a command execution → the
// events of codex.md §5, one run.terminal, every event schema-valid.
func TestCodex03_TurnEndToEnd(t *testing.T) {
	r := newAgentRig(t)
	r.start(t)
	r.prepareCodex(t, "--plan", "--usage", "--deltas", "5", "--command")
	r.open(t)
	res := r.run(t, "turn.start", map[string]any{"text": "go"})
	require.Equal(t, "completed", res.Status, string(res.Result))
	evs := r.waitEvents(t, "run.terminal", 1)
	for _, typ := range []string{"session.started", "turn.started", "plan.updated", "tool.execution.started",
		"tool.execution.completed", "usage.reported", "turn.completed"} {
		require.GreaterOrEqual(t, countType(evs, typ), 1, typ)
	}
	require.Equal(t, 1, countType(evs, "run.terminal"))
	requireContiguous(t, evs)
	r.requireSchemaValid(t)
}

// Codex hot-restart bounds.
const (
	// codexRestartRuns is the number of seeded SIGKILL rounds (20,
	// as TestACP20_HotRestart).
	codexRestartRuns = 20
	codexRestartMs   = 400
	codexChunks      = 2000
	codexRestartAll  = 2 * time.Minute
)

// TestCodex06_HotRestart kills runnerd with SIGKILL at a seeded point of
// a running Codex turn, relaunches it on the same state dir, and checks
// over the real binaries: the same app-server process group is re-adopted,
// every turn completes, every event arrives once (contiguous sourceSeq,
// each turn's text once). PCRUNNER_HOTRESTART_SEED replays a run.
func TestCodex06_HotRestart(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PCRUNNER_HOTRESTART_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("codex hot-restart seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	deadline := time.Now().Add(codexRestartAll)

	r := newAgentRig(t)
	proc := r.start(t)
	r.prepareCodex(t)
	r.open(t)
	sessions := processSessions(r.dir)
	require.Len(t, sessions, 1)
	sdir := filepath.Join(r.dir, "process-sessions", sessions[0])
	pgid := childPgid(t, sdir)
	want := map[string]string{}
	for i := 1; i <= codexRestartRuns; i++ {
		require.True(t, time.Now().Before(deadline), "codex hot-restart loop exceeded its bound at round %d", i)
		ms := 100 + rng.IntN(codexRestartMs)
		text, reply := fmt.Sprintf("sleep %d", ms), fmt.Sprintf("slept %d ms", ms)
		if i%2 == 0 {
			n := 300 + rng.IntN(codexChunks)
			var b strings.Builder
			for k := range n {
				b.WriteString(strconv.Itoa(k) + ",")
			}
			text, reply = fmt.Sprintf("chunks %d", n), b.String()
		}
		res := r.run(t, "turn.start", map[string]any{"text": text})
		require.Equal(t, "completed", res.Status, string(res.Result))
		want[fmt.Sprintf("pturn-%d", i)] = reply
		time.Sleep(time.Duration(rng.IntN(ms+100)) * time.Millisecond) // the kill point
		require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
		waitExit(t, proc)
		proc = r.start(t)
		r.waitEvents(t, "run.terminal", i)
		r.waitEvents(t, "runner.reconciled", i)
		require.Equal(t, pgid, childPgid(t, sdir), "the app-server keeps its process group")
		require.NoError(t, syscall.Kill(-pgid, 0), "the app-server still runs")
	}
	evs := r.events(t)
	requireContiguous(t, evs)
	require.Equal(t, codexRestartRuns, countType(evs, "turn.started"))
	require.Equal(t, codexRestartRuns, countType(evs, "turn.completed"))
	require.Equal(t, codexRestartRuns, countType(evs, "run.terminal"))
	got := map[string]string{}
	for _, e := range evs {
		if e.EventType == "item.delta" {
			turn, _ := field(t, e, "providerTurnId").(string)
			got[turn] += field(t, e, "text").(string)
		}
	}
	require.Equal(t, want, got, "each turn's text exactly once")
	require.Equal(t, []string{sessions[0]}, processSessions(r.dir), "the same process session throughout")
	r.requireSchemaValid(t)
}

// TestCodex06_ToolCallAcrossSIGKILL: runnerd is SIGKILLed while Codex
// waits on item/tool/call; the relaunched runnerd re-adopts the same
// app-server, waits for the call's result again (Codex never re-sends its
// request), and the core's semantic_tool.result is delivered exactly once,
// with one semantic_tool.input, over the real binaries.
func TestCodex06_ToolCallAcrossSIGKILL(t *testing.T) {
	r := newAgentRig(t)
	proc := r.start(t)
	res := r.run(t, "run.prepare", map[string]any{
		"provider": map[string]any{"kind": "codex", "approvalPolicy": "never", "command": fakecodexBin(t),
			"args": []string{"--tool-call", "issue.comment", "--tool-args", `{"body":"survive"}`}, "cwd": t.TempDir()},
		"authorizedTools": commentCatalog(),
	})
	require.Equal(t, "completed", res.Status, string(res.Result))
	r.open(t)
	sessions := processSessions(r.dir)
	require.Len(t, sessions, 1)
	pgid := childPgid(t, filepath.Join(r.dir, "process-sessions", sessions[0]))
	res = r.run(t, "turn.start", map[string]any{"text": "call the tool"})
	require.Equal(t, "completed", res.Status, string(res.Result))
	evs := r.waitEvents(t, "semantic_tool.input", 1)
	in, _ := find(evs, "semantic_tool.input")
	st := field(t, in, "semantic_tool").(map[string]any)

	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	waitExit(t, proc)
	r.start(t)
	r.waitEvents(t, "runner.reconciled", 1)
	res = r.run(t, "semantic_tool.result", map[string]any{"callId": st["callId"], "operationId": st["operationId"],
		"inputDigest": st["content"].(map[string]any)["digest"], "result": map[string]any{"id": "c-kill"}, "isError": false})
	require.Equal(t, "completed", res.Status, string(res.Result))
	// runner.reconciled can precede the re-arm of Codex's open request:
	// a result in between is recorded ("detached") and the re-arm answers
	// Codex from it. Either way the answer below reaches Codex once.
	require.Regexp(t, `"(delivered|detached)"`, string(res.Result))
	evs = r.waitEvents(t, "run.terminal", 1)
	require.Equal(t, 1, countType(evs, "semantic_tool.input"))
	require.Equal(t, 1, countType(evs, "semantic_tool.result"))
	text := ""
	for _, e := range evs {
		if e.EventType == "item.delta" {
			text += field(t, e, "text").(string)
		}
	}
	require.Equal(t, 1, strings.Count(text, "tool answered:"), text)
	require.Contains(t, text, `c-kill`)
	require.Equal(t, pgid, childPgid(t, filepath.Join(r.dir, "process-sessions", sessions[0])), "the same app-server")
	requireContiguous(t, evs)
	r.requireSchemaValid(t)
}
