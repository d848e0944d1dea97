package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// killAfterEnv makes a testhooks runnerd SIGKILL itself right after the
// durable write sel names (internal/runner killpoint_testhook_linux.go).
func killAfterEnv(sel string) []string { return []string{"PCRUNNER_TESTHOOK_KILL_AFTER=" + sel} }

// hookRig is an agent rig running the testhooks build of runnerd.
func hookRig(t *testing.T, extra ...string) *agentRig {
	t.Helper()
	r := newAgentRig(t, extra...)
	r.bin = testbin.Path(t, "runnerd", testbin.HooksTag)
	return r
}

// openResult is the part of session.open's result these tests read.
type openResult struct {
	Status            string `json:"status"`
	ProcessID         int    `json:"processId"`
	ProviderSessionID string `json:"providerSessionId"`
}

func decodeOpen(t *testing.T, res prp.CommandResultPayload) openResult {
	t.Helper()
	require.Equal(t, "completed", res.Status, string(res.Result))
	var o openResult
	require.NoError(t, json.Unmarshal(res.Result, &o))
	return o
}

// requireTurnWorks starts a turn and waits for its run.terminal: completed.
func requireTurnWorks(t *testing.T, r *agentRig, text string) {
	t.Helper()
	n := countType(r.events(t), "run.terminal")
	res := r.run(t, "turn.start", map[string]any{"text": text})
	require.Equal(t, "completed", res.Status, string(res.Result))
	require.NotContains(t, string(res.Result), "lossReason")
	evs := r.waitEvents(t, "run.terminal", n+1)
	var last event
	for _, e := range evs {
		if e.EventType == "run.terminal" {
			last = e
		}
	}
	require.Equal(t, "completed", field(t, last, "turnTerminalState"))
}

// TestSessionCloseResultAfterKill: runnerd is SIGKILLed right after the
// write that commits the closed agent's harness.exited; the relaunched
// runnerd finds that evidence and reports the close completed, never
// execution_indeterminate (prp.md §7.2 item 8, acp.md §3.5); the next
// session.open and turn.start work.
func TestSessionCloseResultAfterKill(t *testing.T) {
	r := hookRig(t)
	r.env = killAfterEnv(prp.EventHarnessExited)
	proc := r.start(t)
	r.prepare(t)
	r.open(t)
	id := r.queue(t, prp.CommandSessionClose, map[string]any{})
	waitExit(t, proc)
	require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "runnerd killed itself")

	r.env = nil
	r.start(t)
	res := r.result(t, id)
	require.Equal(t, "completed", res.Status, string(res.Result))
	require.JSONEq(t, `{"closed":true}`, string(res.Result))
	decodeOpen(t, r.run(t, prp.CommandSessionOpen, map[string]any{}))
	requireTurnWorks(t, r, "echo after-close")
}

// TestDeadAgentNotAdoptedAfterRestart: the agent is SIGKILLed, and runnerd
// is SIGKILLed right after the write that commits its harness.exited. The
// relaunched runnerd records the session ended instead of re-adopting a
// dead agent; the next session.open spawns a new agent whose pid it
// reports, and the next turn.start works. Per acp.md §4.1 a record that
// was never prompted starts a new session (started); one with prompt
// history is loaded into the new agent (resumed, same provider session).
func TestDeadAgentNotAdoptedAfterRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flags    []string
		prompted bool
		status   string
	}{
		{name: "never-prompted", status: "started"},
		{name: "prompted", flags: []string{"--supports-load-session"}, prompted: true, status: "resumed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := hookRig(t)
			r.env = killAfterEnv(prp.EventHarnessExited)
			proc := r.start(t)
			r.prepare(t, tc.flags...)
			first := decodeOpen(t, r.run(t, prp.CommandSessionOpen, map[string]any{}))
			require.Positive(t, first.ProcessID)
			if tc.prompted {
				requireTurnWorks(t, r, "echo before")
			}
			require.NoError(t, syscall.Kill(first.ProcessID, syscall.SIGKILL))
			waitExit(t, proc)
			require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "runnerd killed itself")

			r.env = nil
			r.start(t)
			again := decodeOpen(t, r.run(t, prp.CommandSessionOpen, map[string]any{}))
			require.Equal(t, tc.status, again.Status)
			require.Positive(t, again.ProcessID)
			require.NotEqual(t, first.ProcessID, again.ProcessID, "a new agent, not the dead one")
			if tc.prompted {
				require.Equal(t, first.ProviderSessionID, again.ProviderSessionID, "the recorded provider session")
			}
			requireTurnWorks(t, r, "echo after-restart")
		})
	}
}

// TestToolResultAfterKill: the agent's issue.comment call is committed as
// semantic_tool.input, the core answers with semantic_tool.result, and
// runnerd is SIGKILLed right after the write that records that result
// (the write holding the semantic_tool.result event, and the first write
// the command makes) before the agent is answered. After the restart the
// command's result is {status: detached, callId} and the agent's repeated
// MCP call (fakeacp's real SDK client) gets the recorded answer exactly
// once: no second semantic_tool.input, no semantic_tool.reconciled, and
// the turn settles (tools.md §3 items 1, 5, 8; prp.md §7.2 item 8).
func TestToolResultAfterKill(t *testing.T) {
	for _, sel := range []string{prp.EventSemanticToolResult, prp.CommandSemanticToolResult + "#1"} {
		t.Run(sel, func(t *testing.T) {
			r := hookRig(t)
			r.env = killAfterEnv(sel)
			proc := r.start(t)
			res := r.run(t, prp.CommandRunPrepare, map[string]any{
				"provider":        map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(t), "args": []string{"--mcp-http"}, "cwd": t.TempDir()},
				"authorizedTools": commentCatalog(),
			})
			require.Equal(t, "completed", res.Status, string(res.Result))
			r.open(t)
			res = r.run(t, prp.CommandTurnStart, map[string]any{"text": `mcp-call-retry issue.comment {"body":"chaos"}`})
			require.Equal(t, "completed", res.Status, string(res.Result))
			evs := r.waitEvents(t, prp.EventSemanticToolInput, 1)
			in, _ := find(evs, prp.EventSemanticToolInput)
			st := field(t, in, "semantic_tool").(map[string]any)
			callID := st["callId"].(string)

			id := r.queue(t, prp.CommandSemanticToolResult, map[string]any{"callId": callID, "operationId": st["operationId"],
				"inputDigest": st["content"].(map[string]any)["digest"], "result": map[string]any{"id": "c-chaos"}, "isError": false})
			waitExit(t, proc)
			require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "runnerd killed itself")
			r.env = nil
			r.start(t)

			res = r.result(t, id)
			require.Equal(t, "completed", res.Status, string(res.Result))
			require.JSONEq(t, `{"status":"detached","callId":"`+callID+`"}`, string(res.Result))
			evs = r.waitEvents(t, "run.terminal", 1)
			require.Equal(t, 1, countType(evs, prp.EventSemanticToolInput), "no second input")
			require.Equal(t, 1, countType(evs, prp.EventSemanticToolResult))
			require.Zero(t, countType(evs, "semantic_tool.reconciled"))
			text := ""
			for _, e := range evs {
				if e.EventType == "item.delta" {
					text += field(t, e, "text").(string)
				}
			}
			require.Equal(t, 1, strings.Count(text, `tool issue.comment isError=false: {"id":"c-chaos"}`), text)
		})
	}
}

// TestAgentSIGKILLMidTurn: the agent is SIGKILLed from outside during a
// long turn. The turn ends promptly with a failure disposition (well
// within the 30 s loss bound of acp.md §5.1, far before the turn's own
// 30 s sleep), and the run is not blocked: the next session.open spawns a
// new agent and resumes the recorded session, and the next turn works.
// Combined with a runnerd SIGKILL right after the write of the agent's
// harness.exited, the same holds after the restart.
func TestAgentSIGKILLMidTurn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		runnerdToo bool
	}{{name: "agent"}, {name: "agent-then-runnerd", runnerdToo: true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := hookRig(t)
			if tc.runnerdToo {
				r.env = killAfterEnv(prp.EventHarnessExited)
			}
			proc := r.start(t)
			r.prepare(t, "--supports-load-session")
			first := decodeOpen(t, r.run(t, prp.CommandSessionOpen, map[string]any{}))
			res := r.run(t, prp.CommandTurnStart, map[string]any{"text": "sleep 30000"})
			require.Equal(t, "completed", res.Status, string(res.Result))
			r.waitEvents(t, "turn.started", 1)
			killed := time.Now()
			require.NoError(t, syscall.Kill(first.ProcessID, syscall.SIGKILL))
			if tc.runnerdToo {
				waitExit(t, proc)
				require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "runnerd killed itself")
				r.env = nil
				r.start(t)
			}
			evs := r.waitEvents(t, "run.terminal", 1)
			ended := time.Since(killed)
			term, _ := find(evs, "run.terminal")
			require.Equal(t, "failed", field(t, term, "turnTerminalState"))
			require.Equal(t, 1, countType(evs, "turn.failed"))
			require.Equal(t, 1, countType(evs, prp.EventHarnessExited))
			require.Less(t, ended, lossBound, "the turn outlived the loss bound")
			t.Logf("turn terminal %v after the agent's SIGKILL (loss bound %v)", ended.Round(time.Millisecond), lossBound)

			again := decodeOpen(t, r.run(t, prp.CommandSessionOpen, map[string]any{}))
			require.Equal(t, "resumed", again.Status)
			require.NotEqual(t, first.ProcessID, again.ProcessID)
			requireTurnWorks(t, r, "echo after-kill")
		})
	}
}

// lossBound is acp.md §5.1's loss deadline (--loss-deadline-ms default).
const lossBound = 30 * time.Second

// TestEvidenceRowsAfterKill kills runnerd right after each durable write
// of a command (the testhooks build's <commandType>#<k> kill point) and
// checks that the restarted runnerd reports what the evidence table
// (internal/runner evidence.go) says for that row and step:
// execution_indeterminate only where the table says no evidence can
// exist. semantic_tool.result's row is TestToolResultAfterKill; turn.start's
// seeded kills are TestTurnStartResultAfterKill.
func TestEvidenceRowsAfterKill(t *testing.T) {
	completed := func(want string) func(*testing.T, prp.CommandResultPayload) {
		return func(t *testing.T, res prp.CommandResultPayload) {
			require.Equal(t, "completed", res.Status, string(res.Result))
			if want != "" {
				require.JSONEq(t, want, string(res.Result))
			}
		}
	}
	failedWith := func(code string) func(*testing.T, prp.CommandResultPayload) {
		return func(t *testing.T, res prp.CommandResultPayload) {
			require.Equal(t, "failed", res.Status, string(res.Result))
			var body struct{ Code string }
			require.NoError(t, json.Unmarshal(res.Result, &body))
			require.Equal(t, code, body.Code, string(res.Result))
		}
	}
	closed := completed(`{"closed":true}`)
	longTurn := func(t *testing.T, r *agentRig) {
		res := r.run(t, prp.CommandTurnStart, map[string]any{"text": "sleep 30000"})
		require.Equal(t, "completed", res.Status, string(res.Result))
		r.waitEvents(t, "turn.started", 1)
	}
	for _, tc := range []struct {
		cmd     string
		payload map[string]any
		k       int
		noOpen  bool
		setup   func(*testing.T, *agentRig)
		want    func(*testing.T, prp.CommandResultPayload)
	}{
		{cmd: prp.CommandSessionSnapshot, k: 1, want: completed("")},
		{cmd: prp.CommandRunnerDrain, k: 1, want: completed("")},
		{cmd: prp.CommandSessionClose, k: 1, want: closed},
		{cmd: prp.CommandSessionClose, k: 2, want: closed},
		{cmd: prp.CommandSessionClose, k: 3, want: closed},
		{cmd: prp.CommandSessionClose, k: 4, want: closed},
		{cmd: prp.CommandSessionClose, k: 5, want: closed},
		{cmd: prp.CommandTurnStart, payload: map[string]any{"text": "echo k1"}, k: 1, want: failedWith("prompt_not_delivered")},
		{cmd: prp.CommandSessionOpen, k: 1, noOpen: true, want: failedWith("session_open_interrupted")},
		{cmd: prp.CommandSessionOpen, k: 2, noOpen: true, want: failedWith("session_open_interrupted")},
		{cmd: prp.CommandRunPrepare, k: 1, noOpen: true, want: completed("")},
		{cmd: prp.CommandRunPrepare, k: 2, noOpen: true, want: completed("")},
		{cmd: prp.CommandTurnStart, payload: map[string]any{"text": "echo k2"}, k: 2, want: failedWith("prompt_not_delivered")},
		{cmd: prp.CommandTurnInterrupt, k: 1, setup: longTurn, want: completed("")},
		{cmd: prp.CommandTurnInterrupt, k: 2, setup: longTurn, want: completed("")},
		{cmd: prp.CommandTurnInterrupt, k: 3, setup: longTurn, want: completed("")},
		{cmd: prp.CommandTurnStop, k: 1, setup: longTurn, want: completed("")},
		{cmd: prp.CommandTurnStop, k: 2, setup: longTurn, want: completed("")},
		{cmd: prp.CommandTurnStop, k: 3, setup: longTurn, want: completed("")},
		{cmd: prp.CommandRunCancel, k: 1, setup: longTurn, want: completed("")},
		{cmd: prp.CommandRunCancel, k: 2, setup: longTurn, want: completed("")},
		{cmd: prp.CommandSessionDestroy, k: 1, want: completed(`{"destroyed":true}`)},
		{cmd: prp.CommandSessionDestroy, k: 2, want: completed(`{"destroyed":true}`)},
	} {
		sel := fmt.Sprintf("%s#%d", tc.cmd, tc.k)
		t.Run(sel, func(t *testing.T) {
			r := hookRig(t)
			r.env = killAfterEnv(sel)
			proc := r.start(t)
			if tc.cmd != prp.CommandRunPrepare { // the kill point counts from the first run.prepare
				r.prepare(t)
			}
			if !tc.noOpen {
				r.open(t)
			}
			if tc.setup != nil {
				tc.setup(t, r)
			}
			payload := tc.payload
			if payload == nil {
				payload = map[string]any{}
			}
			if tc.cmd == prp.CommandRunPrepare {
				payload = map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(t), "cwd": t.TempDir()}}
			}
			id := r.queue(t, tc.cmd, payload)
			waitExit(t, proc)
			require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "runnerd killed itself")
			r.env = nil
			r.start(t)
			tc.want(t, r.result(t, id))
			if tc.cmd == prp.CommandSessionClose {
				require.Equal(t, 1, countType(r.events(t), prp.EventHarnessExited), "the agent's exit, once")
			}
			if tc.setup != nil {
				evs := r.waitEvents(t, "run.terminal", 1)
				require.Equal(t, 1, countType(evs, "run.terminal"), "the cut turn ends once")
			}
			// The run goes on: a session opens and a turn completes.
			decodeOpen(t, r.run(t, prp.CommandSessionOpen, map[string]any{}))
			if tc.cmd != prp.CommandRunnerDrain { // draining refuses new turns
				requireTurnWorks(t, r, "echo after-"+strings.ReplaceAll(sel, "#", "-"))
			}
		})
	}
}

// TestRequestResolveAfterKill: runnerd is SIGKILLed right after each
// durable write of request.resolve. After its pending marker (#1) the
// restarted runnerd reports it failed resolve_not_delivered (the answer
// goes out only after the write that records the result), the agent's
// request still waits, and a new request.resolve answers it. After the
// write that records the answer (the one holding runtime_request.resolved)
// it reports delivered, and the staged
// answer reaches the agent. Either way the turn completes.
func TestRequestResolveAfterKill(t *testing.T) {
	for k, sel := range []string{1: prp.CommandRequestResolve + "#1", 2: prp.EventRuntimeRequestResolved} {
		if sel == "" {
			continue
		}
		t.Run(sel, func(t *testing.T) {
			r := hookRig(t)
			r.env = killAfterEnv(sel)
			proc := r.start(t)
			r.prepareDescriptor(t, map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(t),
				"cwd": t.TempDir(), "permissionMode": "manual"})
			r.open(t)
			res := r.run(t, prp.CommandTurnStart, map[string]any{"text": "permission allow"})
			require.Equal(t, "completed", res.Status, string(res.Result))
			evs := r.waitEvents(t, "runtime_request.created", 1)
			created, _ := find(evs, "runtime_request.created")
			reqID := field(t, created, "request").(map[string]any)["requestId"]
			require.NotEmpty(t, reqID)
			resolve := map[string]any{"requestId": reqID, "resolution": map[string]any{"action": "accept"}}
			id := r.queue(t, prp.CommandRequestResolve, resolve)
			waitExit(t, proc)
			require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "runnerd killed itself")
			r.env = nil
			r.start(t)

			res = r.result(t, id)
			if k == 1 {
				require.Equal(t, "failed", res.Status, string(res.Result))
				require.Contains(t, string(res.Result), `"code":"resolve_not_delivered"`)
				res = r.run(t, prp.CommandRequestResolve, resolve)
			}
			require.Equal(t, "completed", res.Status, string(res.Result))
			require.Contains(t, string(res.Result), `"delivered"`)
			evs = r.waitEvents(t, "run.terminal", 1)
			term, _ := find(evs, "run.terminal")
			require.Equal(t, "completed", field(t, term, "turnTerminalState"))
			require.Equal(t, 1, countType(evs, "runtime_request.resolved"))
		})
	}
}
