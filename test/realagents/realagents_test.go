// Package realagents runs the real coding agents (pinned in
// test/realagents/npm/*/package-lock.json, installed by .ci/run) through
// runnerd and pcwrap against test/fakellm, offline: the test binary
// re-executes itself in a network namespace that has only loopback.
package realagents

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/testutil/netns"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// requireEnv makes a missing namespace or agent fail instead of skip, so a
// green CI is never vacuous (.ci/run sets it).
const requireEnv = netns.RequireEnv

// agentsDirEnv names the folder holding one installed npm prefix per
// agent (.ci/run's cache); without it, test/realagents/npm is used.
const agentsDirEnv = "PCRUNNER_AGENTS_DIR"

// onlyEnv limits the run to a comma-separated list of agents (for a
// person iterating on one agent).
const onlyEnv = "PCRUNNER_REAL_AGENTS"

// maxParallelAgents keeps CI affordable on 2 cores: at most two agents
// run at once.
const maxParallelAgents = 2

// netnsProblem is why the tests cannot run offline here ("" when they can).
var netnsProblem string

func TestMain(m *testing.M) {
	if !netns.Inside() {
		code, err := netns.Reexec()
		if err == nil {
			os.Exit(code)
		}
		netnsProblem = err.Error()
	} else if err := netns.Ready(); err != nil {
		netnsProblem = err.Error()
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit))
}

// skipOrFail skips t with why, or fails it under PCRUNNER_REQUIRE_REAL_AGENTS=1.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	netns.SkipOrFail(t, why)
}

// agentDir finds spec's installed prefix, or skips (fails when required).
func agentDir(t *testing.T, spec agentSpec) string {
	t.Helper()
	if netnsProblem != "" {
		skipOrFail(t, "no network namespace with only loopback: "+netnsProblem)
	}
	base := os.Getenv(agentsDirEnv)
	if base == "" {
		base = filepath.Join(testbin.RepoRoot(t), "test", "realagents", "npm")
	}
	dir := filepath.Join(base, spec.prefix)
	argv := spec.argv(dir)
	probe := argv[0]
	if probe == "node" {
		probe = argv[1]
	}
	if _, err := os.Stat(probe); err != nil {
		skipOrFail(t, fmt.Sprintf("agent %s not installed at %s; run .ci/run or `npm ci` in test/realagents/npm/%s", spec.name, dir, spec.prefix))
	}
	return dir
}

var slots = make(chan struct{}, maxParallelAgents)

// timings collects session-open and turn times for the report.
var timings struct {
	sync.Mutex
	rows []string
}

func record(agent, cas string, d time.Duration, outcome string) {
	timings.Lock()
	defer timings.Unlock()
	timings.rows = append(timings.rows, fmt.Sprintf("%-8s %-20s %-4s %6.2fs", agent, cas, outcome, d.Seconds()))
}

// agentCase is one step of an agent session, timed.
func step(t *testing.T, agent, cas string, f func()) {
	t.Helper()
	start := time.Now()
	ok := false
	defer func() {
		outcome := "FAIL"
		if ok {
			outcome = "pass"
		}
		if ok && time.Since(start) < time.Millisecond {
			return // not applicable, recorded as such
		}
		record(agent, cas, time.Since(start), outcome)
		t.Logf("REALAGENT %s %s ok=%v %.2fs", agent, cas, ok, time.Since(start).Seconds())
	}()
	f()
	ok = !t.Failed()
}

// shellScript calls the agent's shell tool with a command whose output
// ("pcrunner-42") differs from its text, so the answer tells whether it ran
// (no command substitution: Gemini CLI refuses it), and that writes a file,
// so that no agent takes it for a read-only command it may run unasked.
const (
	shellScript = "FAKELLM: shell printf 'pcrunner-%d\\n' 42 | tee pcrunner-tool.txt"
	shellOutput = "pcrunner-42"
)

// instructionsMarker is the run's instructions; found in a model request,
// it shows the agent honoured session/new's _meta.systemPrompt.
const instructionsMarker = "PCRUNNER-INSTRUCTIONS-MARKER: answer as the script says."

// TestRealAgents drives each real agent through runnerd and pcwrap: in one
// agent session a text turn, a tool turn under approve-all, deny-all and a
// manual permission answered by request.resolve (accept), turn.interrupt
// mid-stream, a re-open and another turn, and a SIGKILL of runnerd
// mid-turn with the agent re-adopted. Every committed event validates
// against the reference schemas and no process is left behind.
func TestRealAgents(t *testing.T) {
	for _, name := range []string{"claude", "pi", "gemini", "codex", "opencode"} {
		spec := specs[name]
		if only := os.Getenv(onlyEnv); only != "" && !strings.Contains(","+only+",", ","+name+",") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := agentDir(t, spec)
			slots <- struct{}{}
			defer func() { <-slots }()
			runAgentSession(t, spec, dir)
		})
	}
	t.Cleanup(func() {
		timings.Lock()
		defer timings.Unlock()
		t.Logf("agent × case timings:\n%s", strings.Join(timings.rows, "\n"))
	})
}

func runAgentSession(t *testing.T, spec agentSpec, dir string) {
	schemas := prpschema.Load(t)
	r := newRig(t, spec, dir)
	proc := r.start()
	cwd := t.TempDir()
	prepare := func(mode string) {
		r.must("run.prepare", map[string]any{"provider": map[string]any{
			"kind": "acpx", "agent": spec.name, "command": spec.argv(dir)[0], "args": spec.argv(dir)[1:],
			"cwd": cwd, "permissionMode": mode, "instructions": instructionsMarker}})
	}
	terminals := 0
	turn := func(textIn string) []prptest.Event {
		t.Helper()
		r.must("turn.start", map[string]any{"text": textIn})
		terminals++
		return turnEvents(r.waitCount("run.terminal", terminals), terminals)
	}
	completed := func(evs []prptest.Event) {
		t.Helper()
		require.Len(t, prptest.OfType(evs, "turn.completed"), 1, "turn events: %v", types(evs))
	}
	a := spec.name

	step(t, a, "session.open", func() {
		prepare("approve-all")
		r.must("session.open", map[string]any{"reuse": "same_session"})
		// The cold start's phase sequence (workspace.md §8).
		require.Equal(t, []string{"runtime.phase.changed", "workspace.ready", "harness.starting", "session.starting",
			"harness.ready", "session.started", "runtime.phase.changed"}, phaseTypes(r.events()))
	})
	step(t, a, "text", func() {
		evs := turn("FAKELLM: text pcrunner real agent says hi")
		completed(evs)
		require.Contains(t, text(t, evs), "real agent says hi")
		// Did the instructions (session/new's _meta.systemPrompt, tools.md
		// §5) reach the model?
		b, err := os.ReadFile(r.record)
		require.NoError(t, err)
		honoured := strings.Contains(string(b), instructionsMarker)
		t.Logf("INSTRUCTIONS %s honours _meta.systemPrompt: %v", a, honoured)
		require.Equal(t, !acpx.IgnoresSystemPrompt(a), honoured, "acpx's table of agents that drop _meta.systemPrompt is out of date")
		diags := 0
		for _, e := range prptest.OfType(r.events(), "harness.diagnostic") {
			if payload(t, e)["code"] == "instructions_unsupported" {
				diags++
			}
		}
		require.Equal(t, !honoured, diags == 1, "instructions_unsupported at session.open exactly when the agent drops them")
	})
	step(t, a, "tool approve-all", func() {
		evs := turn(shellScript)
		completed(evs)
		require.Empty(t, prptest.OfType(evs, "runtime_request.created"))
		require.Contains(t, text(t, evs), shellOutput)
	})
	if spec.noPermission != "" {
		// The agent never asks: nothing for a permission mode to answer.
		record(a, "tool deny-all", 0, "n/a")
		record(a, "tool manual accept", 0, "n/a")
		t.Logf("%s: permission cases not applicable: %s", a, spec.noPermission)
	}
	step(t, a, "tool deny-all", func() {
		if spec.noPermission != "" {
			return
		}
		prepare("deny-all")
		evs := turn(shellScript)
		// Codex aborts its turn on a refusal (turn.interrupted); the others
		// tell the model and complete.
		require.Len(t, append(prptest.OfType(evs, "turn.completed"), prptest.OfType(evs, "turn.interrupted")...), 1,
			"turn events: %v", types(evs))
		require.Empty(t, prptest.OfType(evs, "runtime_request.created"))
		require.NotContains(t, text(t, evs), shellOutput)
	})
	step(t, a, "tool manual accept", func() {
		if spec.noPermission != "" {
			return
		}
		prepare("manual")
		r.must("turn.start", map[string]any{"text": shellScript})
		terminals++
		evs := r.waitCount("runtime_request.created", 1)
		req := payload(t, prptest.OfType(evs, "runtime_request.created")[0])["request"].(map[string]any)
		r.must("request.resolve", map[string]any{"requestId": req["requestId"], "turnId": req["turnId"],
			"resolution": map[string]any{"action": "accept"}})
		evs = turnEvents(r.waitCount("run.terminal", terminals), terminals)
		completed(evs)
		require.Len(t, prptest.OfType(evs, "runtime_request.resolved"), 1)
		require.Contains(t, text(t, evs), shellOutput)
	})
	step(t, a, "interrupt", func() {
		prepare("approve-all")
		before := len(prptest.OfType(r.events(), "item.delta"))
		r.must("turn.start", map[string]any{"text": "FAKELLM: slow 40 250 tick"})
		terminals++
		r.waitCount("item.delta", before+1)
		r.must("turn.interrupt", map[string]any{})
		evs := turnEvents(r.waitCount("run.terminal", terminals), terminals)
		require.Len(t, prptest.OfType(evs, "turn.interrupted"), 1, "turn events: %v", types(evs))
	})
	step(t, a, "re-open + text", func() {
		r.must("session.open", map[string]any{"reuse": "same_session"})
		evs := turn("FAKELLM: text back after the interrupt")
		completed(evs)
		require.Contains(t, text(t, evs), "after the interrupt")
	})
	step(t, a, "runnerd SIGKILL", func() {
		pgid := r.childPgid()
		before := len(prptest.OfType(r.events(), "item.delta"))
		r.must("turn.start", map[string]any{"text": "FAKELLM: slow 12 250 kept"})
		terminals++
		r.waitCount("item.delta", before+1)
		require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
		waitExit(t, proc)
		proc = r.start()
		r.waitCount("runner.reconciled", 1)
		all := r.waitCount("session.reconciled", 1)
		var after []string
		for _, e := range all {
			if e.EventType == "runner.reconciled" || e.EventType == "session.reconciled" {
				after = append(after, e.EventType)
			}
		}
		require.Equal(t, []string{"runner.reconciled", "session.reconciled"}, after)
		require.Equal(t, "adopted", payload(t, prptest.OfType(all, "session.reconciled")[0])["outcome"])
		evs := turnEvents(r.waitCount("run.terminal", terminals), terminals)
		t.Logf("%s: the turn runnerd was killed in settled: %v", a, types(evs))
		require.Equal(t, pgid, r.childPgid(), "the same agent process")
		require.NoError(t, syscall.Kill(-pgid, 0), "the agent still runs")
		// And it still takes turns.
		evs = turn("FAKELLM: text after the restart")
		completed(evs)
		require.Contains(t, text(t, evs), "after the restart")
	})
	step(t, a, "close + re-open", func() {
		if !reopen(t, r) {
			return
		}
		evs := turn("FAKELLM: text after the re-open")
		completed(evs)
		require.Contains(t, text(t, evs), "after the re-open")
	})
	require.NoError(t, proc.Process.Signal(syscall.SIGTERM))
	waitExit(t, proc)
	validateEvents(t, schemas, r.core.Snapshot().Events)
}

// reopen closes the session and opens it again, and checks the phase
// sequence of that session.open (workspace.md §8): a new agent either
// resumes the recorded provider session or, for an agent that cannot load
// one, starts a new one, as its result says. ok is false when the agent
// could not load the session it recorded (session_resume_required: Gemini
// CLI, now and then, after being stopped): {reuse: same_session} then never
// starts a new conversation (acp.md §4.1), and the phases must stop after
// session.resuming.
func reopen(t *testing.T, r *rig) (ok bool) {
	t.Helper()
	r.must("session.close", map[string]any{})
	from := len(r.events())
	open := r.result(r.queue("session.open", map[string]any{"reuse": "same_session"}))
	var res struct {
		Status string `json:"status"`
		Code   string `json:"code"`
	}
	require.NoError(t, json.Unmarshal(open.Result, &res))
	if open.Status == "failed" && res.Code == "session_resume_required" {
		require.Equal(t, []string{"harness.starting", "session.resuming"}, phaseTypes(r.events()[from:]))
		t.Logf("session.open after session.close: the agent could not load its session (%s)", open.Result)
		return false
	}
	require.Equal(t, "completed", open.Status, "session.open: %s", open.Result)
	executing := len(prptest.OfType(r.events()[:from], "runtime.phase.changed"))
	phases := phaseTypes(r.waitCount("runtime.phase.changed", executing+1)[from:])
	want := []string{"harness.starting", "session.starting", "harness.ready", "session.started", "runtime.phase.changed"}
	if res.Status == "resumed" {
		want = []string{"harness.starting", "session.resuming", "harness.ready", "session.resumed", "runtime.phase.changed"}
	}
	require.Equal(t, want, phases, "session.open %s", res.Status)
	t.Logf("session.open after session.close: %s, phases %v", res.Status, phases)
	return true
}

// phaseTypes are the phase and session lifecycle events of evs
// (workspace.md §8), in order.
func phaseTypes(evs []prptest.Event) []string {
	var out []string
	for _, e := range evs {
		switch e.EventType {
		case "runtime.phase.changed", "workspace.ready", "harness.starting", "session.starting", "harness.ready",
			"session.started", "session.resuming", "session.resumed", "session.reconciled":
			out = append(out, e.EventType)
		}
	}
	return out
}

func types(evs []prptest.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.EventType)
	}
	return out
}

// TestTools13_ClaudeBridgeTool: Claude Code's model (fakellm) calls a
// Paperclip tool, mcp__paperclip__<operationId>; the call travels agent →
// runnerd's MCP bridge → core (semantic_tool.input) → core's
// semantic_tool.result → agent, and the agent's next message quotes the
// result (tools.md §9 scenario 13).
func TestTools13_ClaudeBridgeTool(t *testing.T) {
	spec := specs["claude"]
	dir := agentDir(t, spec)
	slots <- struct{}{}
	defer func() { <-slots }()
	schemas := prpschema.Load(t)
	r := newRig(t, spec, dir)
	proc := r.start()
	op := catalog.Operation{OperationID: "issue.comment", Version: 1, Description: "Comment on the task.",
		InputSchema:    json.RawMessage(`{"type":"object","required":["body"],"properties":{"body":{"type":"string"}}}`),
		ResponseSchema: json.RawMessage(`{"type":"object"}`)}
	step(t, "claude", "bridge session.open", func() {
		r.must("run.prepare", map[string]any{
			"provider": map[string]any{"kind": "acpx", "agent": spec.name, "command": spec.argv(dir)[0],
				"args": spec.argv(dir)[1:], "cwd": t.TempDir(), "permissionMode": "approve-paperclip"},
			"authorizedTools": map[string]any{"schema": catalog.Schema, "schemaVersion": 1,
				"catalogDigest": catalog.Digest([]catalog.Operation{op}), "operations": []catalog.Operation{op}},
		})
		r.must("session.open", map[string]any{"reuse": "same_session"})
	})
	step(t, "claude", "bridge tool turn", func() {
		// Claude Code offers the MCP tool issue.comment as
		// mcp__paperclip__issue_comment (API tool names take no dots).
		r.must("turn.start", map[string]any{"text": `FAKELLM: tool mcp__paperclip__issue_comment {"body":"from claude"}`})
		evs := r.waitCount("semantic_tool.input", 1)
		in := prptest.OfType(evs, "semantic_tool.input")[0]
		st := payload(t, in)["semantic_tool"].(map[string]any)
		require.Equal(t, "issue.comment", st["operationId"])
		r.must("semantic_tool.result", map[string]any{"callId": st["callId"], "operationId": st["operationId"],
			"inputDigest": st["content"].(map[string]any)["digest"], "result": map[string]any{"id": "comment-13"}, "isError": false})
		evs = turnEvents(r.waitCount("run.terminal", 1), 1)
		require.Len(t, prptest.OfType(evs, "turn.completed"), 1, "turn events: %v", types(evs))
		require.Empty(t, prptest.OfType(evs, "runtime_request.created"), "approve-paperclip allows a bridge tool at once")
		require.Contains(t, text(t, evs), "comment-13", "the next message quotes the result")
	})
	require.NoError(t, proc.Process.Signal(syscall.SIGTERM))
	waitExit(t, proc)
	validateEvents(t, schemas, r.core.Snapshot().Events)
}

// TestRealAgentCodexShimGroupKill: codex-acp runs further processes under
// its Node entry point (with the pinned 1.6.2, the codex app-server through
// @openai/codex's own Node shim and its native binary; a shim that runs
// its native binary with spawnSync, as 0.16.0's does, orphans it when
// only the shim dies). pcwrap kills the agent's whole process
// group when its leader exits, so when only the leader is SIGKILLed,
// nothing with the session's HOME outlives it.
func TestRealAgentCodexShimGroupKill(t *testing.T) {
	spec := specs["codex"]
	dir := agentDir(t, spec)
	slots <- struct{}{}
	defer func() { <-slots }()
	r := newRig(t, spec, dir)
	proc := r.start()
	r.must("run.prepare", map[string]any{"provider": map[string]any{"kind": "acpx", "agent": spec.name,
		"command": spec.argv(dir)[0], "args": spec.argv(dir)[1:], "cwd": t.TempDir()}})
	r.must("session.open", map[string]any{"reuse": "same_session"})
	// A turn, so that everything the agent starts for a turn runs.
	r.must("turn.start", map[string]any{"text": "FAKELLM: text warm"})
	r.waitCount("run.terminal", 1)
	leader := r.childPgid() // pcwrap makes the agent its group's leader
	var others []int
	for _, pid := range processesWithHome(r.home) {
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid == leader && pid != leader {
			others = append(others, pid)
		}
	}
	require.NotEmpty(t, others, "codex-acp runs processes beside its entry point")
	t.Logf("codex-acp leader %d, in its group: %v", leader, others)

	require.NoError(t, syscall.Kill(leader, syscall.SIGKILL), "only the leader")
	deadline := time.Now().Add(agentBound)
	for _, pid := range others {
		for syscall.Kill(pid, 0) == nil && !isZombie(pid) {
			require.True(t, time.Now().Before(deadline), "pid %d outlived the agent's leader", pid)
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.NoError(t, proc.Process.Signal(syscall.SIGTERM))
	waitExit(t, proc)
}

// validateEvents checks every committed event against the reference
// schema of its envelope version (v2: the session goal events, whose
// payloads have no reference schema but the required field lists).
func validateEvents(t *testing.T, schemas *prpschema.Set, raw []json.RawMessage) {
	t.Helper()
	for _, b := range raw {
		var env struct {
			Payload json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(b, &env))
		var head struct {
			Schema    string          `json:"schema"`
			EventType string          `json:"eventType"`
			Payload   json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(env.Payload, &head))
		s := schemas.EventV1
		if head.Schema == "paperclip.prp.event.v2" {
			s = schemas.EventV2
			if head.EventType == "session.capabilities.updated" {
				require.NoError(t, prpschema.Validate(schemas.GoalCapabilities, head.Payload), "capabilities %s", head.Payload)
			}
		}
		require.NoError(t, prpschema.Validate(s, env.Payload), "event %s", env.Payload)
	}
}
