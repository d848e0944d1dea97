package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/runner"
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
// Killed right after the second write (the call settled as answered, the
// HTTP answer possibly not yet written), the result is delivered and the
// repeated call still gets the recorded answer once. Those kill points
// count the writes of other routines too: when an agent batch queued
// before the command takes the first, the kill at #1 lands before the
// command wrote anything, the command runs again after the restart and
// its result is delivered; at #2 the result's own first write is the
// second, and detached is the right report for it. Either way the agent
// gets one answer and the turn settles (the event selector always lands
// on the result's own write).
func TestToolResultAfterKill(t *testing.T) {
	for _, tc := range []struct {
		sel    string
		status []string
	}{
		{prp.EventSemanticToolResult, []string{"detached"}},
		{prp.CommandSemanticToolResult + "#1", []string{"detached", "delivered"}},
		{prp.CommandSemanticToolResult + "#2", []string{"delivered", "detached"}},
	} {
		sel := tc.sel
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
			var got struct{ Status, CallID string }
			require.NoError(t, json.Unmarshal(res.Result, &got), string(res.Result))
			require.Contains(t, tc.status, got.Status, string(res.Result))
			require.Equal(t, callID, got.CallID)
			t.Logf("result after the restart: %s", res.Result)
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

// resultCheck checks a command's result after the restart.
type resultCheck func(*testing.T, prp.CommandResultPayload)

// completed wants status completed and, unless want is "", that result.
func completed(want string) resultCheck {
	return func(t *testing.T, res prp.CommandResultPayload) {
		require.Equal(t, "completed", res.Status, string(res.Result))
		if want != "" {
			require.JSONEq(t, want, string(res.Result))
		}
	}
}

// endedWith wants the status (failed, rejected) with that code.
func endedWith(status, code string) resultCheck {
	return func(t *testing.T, res prp.CommandResultPayload) {
		require.Equal(t, status, res.Status, string(res.Result))
		var body struct{ Code string }
		require.NoError(t, json.Unmarshal(res.Result, &body))
		require.Equal(t, code, body.Code, string(res.Result))
	}
}

func failedWith(code string) resultCheck { return endedWith("failed", code) }

// indeterminate is the result of a row step without evidence.
var indeterminate = failedWith("execution_indeterminate")

// longTurn starts a turn that runs until it is cut.
func longTurn(t *testing.T, r *agentRig) {
	res := r.run(t, prp.CommandTurnStart, map[string]any{"text": "sleep 30000"})
	require.Equal(t, "completed", res.Status, string(res.Result))
	r.waitEvents(t, "turn.started", 1)
}

// goalFlags advertise fakeacp's goal extension (set and clear).
var goalFlags = []string{"--goal-actions", "set,clear"}

// commandSchemaV3 is the command schema of external_provider.operation
// (prp.md §7.2; the prp package keeps its name unexported).
const commandSchemaV3 = "paperclip.prp.command.v3"

// schemaOf is the command schema a test sends typ under: the oldest that
// carries it (prp.CommandSchemaV1 is what agentRig.queue sends).
func schemaOf(typ string) string {
	switch typ {
	case prp.CommandSessionGoalGet, prp.CommandSessionGoalSet, prp.CommandSessionGoalClear:
		return prp.CommandSchemaV2
	case prp.CommandExternalProviderOperation:
		return commandSchemaV3
	}
	return prp.CommandSchemaV1
}

// queueAs queues a command under the schema schemaOf names.
func queueAs(t *testing.T, r *agentRig, typ string, payload any) string {
	t.Helper()
	if schemaOf(typ) == prp.CommandSchemaV1 {
		return r.queue(t, typ, payload)
	}
	cmd, err := r.c.core.QueueCommand(prp.Command{Schema: schemaOf(typ), Type: typ, Payload: mustJSON(t, payload)})
	require.NotEmpty(t, cmd.CommandID, "queue %s: %v", typ, err)
	return cmd.CommandID
}

// goalSet sets a goal before the command under test.
func goalSet(t *testing.T, r *agentRig) {
	res := r.result(t, queueAs(t, r, prp.CommandSessionGoalSet, map[string]any{"objective": "before the kill"}))
	require.Equal(t, "completed", res.Status, string(res.Result))
}

// rowKill is one kill of TestEvidenceRowsAfterKill: runnerd dies right
// after the k-th durable write made once cmd arrived.
type rowKill struct {
	cmd     string
	payload map[string]any
	k       int
	// event, when set, is the kill point instead of cmd#k: the write
	// that enqueues that event, which is the row's step k.
	event  string
	noOpen bool
	flags  []string // fakeacp's, at run.prepare
	setup  func(*testing.T, *agentRig)
	want   resultCheck
	// defect, when set, says why the run does not go on after this kill
	// yet: the subtest checks the result, then skips with it.
	defect string
}

// rowKills are TestEvidenceRowsAfterKill's cases. Steps no case names:
// the last step of most rows is the write of the result itself, after
// which the recorded result is sent as on any reconnect; the
// external_provider.operation row's #2 (its refusal is journaled with its
// result in one write, so a second write never comes).
var rowKills = []rowKill{
	{cmd: prp.CommandSessionSnapshot, k: 1, want: completed("")},
	{cmd: prp.CommandRunnerDrain, k: 1, want: completed("")},
	{cmd: prp.CommandSessionClose, k: 1, want: completed(`{"closed":true}`)},
	{cmd: prp.CommandSessionClose, k: 2, want: completed(`{"closed":true}`)},
	{cmd: prp.CommandSessionClose, k: 3, want: completed(`{"closed":true}`)},
	{cmd: prp.CommandSessionClose, k: 4, want: completed(`{"closed":true}`)},
	{cmd: prp.CommandSessionClose, k: 5, want: completed(`{"closed":true}`)},
	{cmd: prp.CommandTurnStart, payload: map[string]any{"text": "echo k1"}, k: 1, want: failedWith("prompt_not_delivered")},
	{cmd: prp.CommandSessionOpen, k: 1, noOpen: true, want: failedWith("session_open_interrupted")},
	{cmd: prp.CommandSessionOpen, k: 2, noOpen: true, want: failedWith("session_open_interrupted")},
	// The handshake's progress writes vary in number (the reader's
	// batches), so the step of session.started is named by its event.
	{cmd: prp.CommandSessionOpen, k: 3, event: prp.EventSessionStarted, noOpen: true, want: completed("")},
	{cmd: prp.CommandRunPrepare, k: 1, noOpen: true, want: completed("")},
	{cmd: prp.CommandRunPrepare, k: 2, noOpen: true, want: completed("")},
	{cmd: prp.CommandRunPrepare, k: 3, noOpen: true, want: completed("")},
	{cmd: prp.CommandTurnStart, payload: map[string]any{"text": "echo k2"}, k: 2, want: failedWith("prompt_not_delivered")},
	{cmd: prp.CommandTurnStart, payload: map[string]any{"text": "echo k3"}, k: 3, want: completed("")},
	{cmd: prp.CommandTurnInterrupt, k: 1, setup: longTurn, want: completed("")},
	{cmd: prp.CommandTurnInterrupt, k: 2, setup: longTurn, want: completed("")},
	{cmd: prp.CommandTurnInterrupt, k: 3, setup: longTurn, want: completed("")},
	{cmd: prp.CommandTurnInterrupt, k: 4, setup: longTurn, want: completed("")},
	{cmd: prp.CommandTurnStop, k: 1, setup: longTurn, want: completed("")},
	{cmd: prp.CommandTurnStop, k: 2, setup: longTurn, want: completed("")},
	{cmd: prp.CommandTurnStop, k: 3, setup: longTurn, want: completed("")},
	{cmd: prp.CommandTurnStop, k: 4, setup: longTurn, want: completed("")},
	{cmd: prp.CommandRunCancel, k: 1, setup: longTurn, want: completed("")},
	{cmd: prp.CommandRunCancel, k: 2, setup: longTurn, want: completed("")},
	{cmd: prp.CommandRunCancel, k: 3, setup: longTurn, want: completed("")},
	{cmd: prp.CommandSessionDestroy, k: 1, want: completed(`{"destroyed":true}`)},
	{cmd: prp.CommandSessionDestroy, k: 2, want: completed(`{"destroyed":true}`)},
	{cmd: prp.CommandSessionDestroy, k: 3, want: completed(`{"destroyed":true}`)},
	// The goal rows: fakeacp advertises set and clear, and publishes the
	// goal (session_info_update) before its answer: set and clear make
	// four writes, get two (its pending marker, then its answer).
	{cmd: prp.CommandSessionGoalGet, k: 1, flags: goalFlags, want: indeterminate},
	{cmd: prp.CommandSessionGoalGet, k: 2, flags: goalFlags, want: completed("")},
	{cmd: prp.CommandSessionGoalSet, payload: map[string]any{"objective": "chaos"}, k: 1, flags: goalFlags, want: indeterminate},
	{cmd: prp.CommandSessionGoalSet, payload: map[string]any{"objective": "chaos"}, k: 2, flags: goalFlags, want: indeterminate},
	{cmd: prp.CommandSessionGoalSet, payload: map[string]any{"objective": "chaos"}, k: 3, flags: goalFlags, want: indeterminate},
	{cmd: prp.CommandSessionGoalSet, payload: map[string]any{"objective": "chaos"}, k: 4, flags: goalFlags, want: completed("")},
	{cmd: prp.CommandSessionGoalClear, k: 1, flags: goalFlags, setup: goalSet, want: indeterminate},
	{cmd: prp.CommandSessionGoalClear, k: 2, flags: goalFlags, setup: goalSet, want: indeterminate},
	{cmd: prp.CommandSessionGoalClear, k: 3, flags: goalFlags, setup: goalSet, want: indeterminate},
	{cmd: prp.CommandSessionGoalClear, k: 4, flags: goalFlags, setup: goalSet, want: completed("")},
	// The no-effect rows: refused by this runner's ACP executor.
	{cmd: prp.CommandTurnSteer, payload: map[string]any{"text": "steer"}, k: 1, want: indeterminate},
	{cmd: prp.CommandTurnSteer, payload: map[string]any{"text": "steer"}, k: 2, want: failedWith("command_execution_failed")}, // ACP v1 cannot steer
	{cmd: prp.CommandSessionBudgetIncrease, k: 1, want: indeterminate},
	{cmd: prp.CommandSessionBudgetIncrease, k: 2, want: endedWith("rejected", "provider_command_unavailable")},
	{cmd: prp.CommandInteractionReceipt, k: 1, want: indeterminate},
	{cmd: prp.CommandInteractionReceipt, k: 2, want: endedWith("rejected", "provider_command_unavailable")},
	{cmd: prp.CommandExternalProviderOperation, k: 1, want: endedWith("rejected", "command_not_implemented")},
}

// TestEvidenceRowsAfterKill kills runnerd right after each durable write
// of a command (the testhooks build's <commandType>#<k> kill point) and
// checks that the restarted runnerd reports what the evidence table
// (internal/runner evidence.go) says for that row and step:
// execution_indeterminate only where the table says no evidence can
// exist. semantic_tool.result's row is TestToolResultAfterKill,
// request.resolve's TestRequestResolveAfterKill, the terminal commands'
// TestFenceRowsAfterKill, run.attach's TestRunAttachAfterKill; turn.start's
// seeded kills are TestTurnStartResultAfterKill.
func TestEvidenceRowsAfterKill(t *testing.T) {
	for _, tc := range rowKills {
		sel := fmt.Sprintf("%s#%d", tc.cmd, tc.k)
		t.Run(sel, func(t *testing.T) {
			r := hookRig(t)
			r.env = killAfterEnv(sel)
			if tc.event != "" {
				r.env = killAfterEnv(tc.event)
			}
			proc := r.start(t)
			if tc.cmd != prp.CommandRunPrepare { // the kill point counts from the first run.prepare
				r.prepare(t, tc.flags...)
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
			id := queueAs(t, r, tc.cmd, payload)
			waitExit(t, proc)
			require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "runnerd killed itself")
			r.env = nil
			r.start(t)
			tc.want(t, r.result(t, id))
			if tc.cmd == prp.CommandSessionClose {
				require.Equal(t, 1, countType(r.events(t), prp.EventHarnessExited), "the agent's exit, once")
			}
			if tc.setup != nil && tc.cmd != prp.CommandSessionGoalClear {
				evs := r.waitEvents(t, "run.terminal", 1)
				require.Equal(t, 1, countType(evs, "run.terminal"), "the cut turn ends once")
			}
			if tc.defect != "" {
				t.Skipf("result as the evidence table says; open defect: %s", tc.defect)
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

// fenceKills are TestFenceRowsAfterKill's kill points: each durable step
// of runner.suspend and runner.shutdown.
var fenceKills = []string{
	prp.CommandRunnerSuspend + "#1", prp.CommandRunnerSuspend + "#2",
	prp.CommandRunnerShutdown + "#1", prp.CommandRunnerShutdown + "#2",
}

// TestFenceRowsAfterKill kills runnerd right after each durable write of
// a terminal command (prp.md §7.4). After the pending marker (#1) nothing
// happened: the restarted runnerd reports it failed
// execution_indeterminate and, the fence being the command's only effect,
// stops by itself; the next life goes on with the run. After the write of
// its lifecycle, fence and result (#2) the restarted runnerd delivers that
// result, reconciles the fence and ends by itself, as the lifecycle says;
// after a suspend the next life opens a session and runs a turn.
func TestFenceRowsAfterKill(t *testing.T) {
	for _, sel := range fenceKills {
		t.Run(sel, func(t *testing.T) {
			cmd, kStr, _ := strings.Cut(sel, "#")
			r := hookRig(t)
			r.env = killAfterEnv(sel)
			proc := r.start(t)
			r.prepare(t)
			r.open(t)
			id := r.queue(t, cmd, map[string]any{})
			waitExit(t, proc)
			require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "runnerd killed itself")
			r.env = nil
			proc = r.start(t)
			res := r.result(t, id)
			fact := map[string]string{prp.CommandRunnerSuspend: prp.EventRunnerSuspended, prp.CommandRunnerShutdown: prp.EventRunnerStopped}[cmd]
			if kStr == "1" {
				indeterminate(t, res)
				require.Zero(t, waitExit(t, proc), "the restarted runnerd stops: the fence was the effect")
				require.Zero(t, countType(r.events(t), fact), "no terminal fact without the fence")
			} else {
				lifecycle := map[string]string{prp.CommandRunnerSuspend: "suspended", prp.CommandRunnerShutdown: "stopped"}[cmd]
				completed(`{"lifecycle":"`+lifecycle+`"}`)(t, res)
				require.Zero(t, waitExit(t, proc), "the restarted runnerd ends as the fence says")
				require.Equal(t, 1, countType(r.events(t), fact), "the terminal fact, once")
				if cmd == prp.CommandRunnerShutdown {
					return // the run is over
				}
			}
			// The next life goes on with the run.
			r.start(t)
			decodeOpen(t, r.run(t, prp.CommandSessionOpen, map[string]any{}))
			requireTurnWorks(t, r, "echo after-"+strings.ReplaceAll(sel, "#", "-"))
		})
	}
}

// attachKills are TestRunAttachAfterKill's kill points: each durable step
// of run.attach.
var attachKills = []string{prp.CommandRunAttach + "#1", prp.CommandRunAttach + "#2", prp.CommandRunAttach + "#3"}

// TestRunAttachAfterKill kills runnerd right after each durable write of
// a warm rotation's run.attach and relaunches it under the identity the
// core issues the next ticket for, as the server does (prp.md §9.5).
// Before the activating write (#1 the pending marker, #2 the prepared
// transition) the rotation was not applied or may be half-made: the
// attach is failed execution_indeterminate under the old identity. After
// it (#3) the runner holds the new identity and the attach's recorded
// result is completed in the old epoch. Either way the next turn runs on
// the same agent process.
func TestRunAttachAfterKill(t *testing.T) {
	for _, sel := range attachKills {
		t.Run(sel, func(t *testing.T) {
			w := newWarmE2E(t)
			w.env = killAfterEnv(sel)
			proc, _ := w.start(t, identity, "")
			w.warmUp(t)
			attach, err := w.c.core.QueueCommand(prp.Command{Type: prp.CommandRunAttach, Payload: mustJSON(t, w.attachPayload())})
			require.NotEmpty(t, attach.CommandID, "queue run.attach: %v", err)
			waitExit(t, proc)
			require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "runnerd killed itself")
			w.env = nil

			if sel == prp.CommandRunAttach+"#3" {
				// The activating write follows the core's acknowledgement
				// of the prepared transition; the core records that
				// transition as it sends the acknowledgement, so wait for
				// the record before settling forward in its place.
				w.c.wait(t, func(s control.Snapshot) bool { return s.Warm != nil || s.Identity == warmNext })
			}
			w.c.core.SettleWarmForward()
			s := w.c.core.Snapshot()
			w.start(t, s.Identity, "")
			w.c.wait(t, func(s control.Snapshot) bool { return countType(decodeEvents(t, s.Events), "runner.reconciled") == 1 })
			var res prp.CommandResultPayload
			if sel != prp.CommandRunAttach+"#3" {
				require.Equal(t, identity, s.Identity, "the rotation was not applied")
				w.run(t, prp.CommandSessionSnapshot, map[string]any{}) // behind the re-delivered attach
				require.NoError(t, json.Unmarshal(w.c.core.Snapshot().Results[attach.CommandID], &res))
				indeterminate(t, res)
			} else {
				require.Equal(t, warmNext, s.Identity, "the rotation was applied")
				s = w.c.core.Snapshot()
				require.Len(t, s.Epochs, 1)
				require.NoError(t, json.Unmarshal(s.Epochs[0].Results[attach.CommandID], &res))
				completed("")(t, res)
			}
			w.finishOnSameAgent(t)
		})
	}
}

// otherKills are the steps, as <commandType>#<k>, that kill tests outside
// the lists above land on (some through an event type's kill point).
var otherKills = map[string]string{
	prp.CommandSemanticToolResult + "#1": "TestToolResultAfterKill",
	prp.CommandSemanticToolResult + "#2": "TestToolResultAfterKill",
	prp.CommandRequestResolve + "#1":     "TestRequestResolveAfterKill",
	prp.CommandRequestResolve + "#2":     "TestRequestResolveAfterKill (the write of runtime_request.resolved)",
}

// unkilledSteps are the durable steps of the evidence table no kill test
// lands on, and why.
var unkilledSteps = map[string]string{
	prp.CommandExternalProviderOperation + "#2": "unreachable: this runner refuses it command_not_implemented in its journal entry's write; no second write",
	prp.CommandSessionGoalGet + "#3":            "unreachable: get sends no request, so it makes two writes (the pending marker, then the answer: its #2)",
	prp.CommandSessionGoalGet + "#4":            "unreachable: get sends no request, so it makes two writes (the pending marker, then the answer: its #2)",
}

// TestEvidenceKillsCoverEveryRow: every row of the runner's evidence
// table is named by a kill test, and each of its durable steps is either
// killed at or listed in unkilledSteps with the reason; no kill point
// lies outside its row. A new command type without a kill test fails here.
func TestEvidenceKillsCoverEveryRow(t *testing.T) {
	steps := runner.EvidenceSteps()
	covered := map[string]bool{}
	for _, tc := range rowKills {
		covered[fmt.Sprintf("%s#%d", tc.cmd, tc.k)] = true
	}
	for _, sel := range slices.Concat(fenceKills, attachKills, slices.Collect(maps.Keys(otherKills))) {
		covered[sel] = true
	}
	stepOf := func(sel string) (string, int) {
		typ, kStr, ok := strings.Cut(sel, "#")
		require.True(t, ok, sel)
		k, err := strconv.Atoi(kStr)
		require.NoError(t, err, sel)
		return typ, k
	}
	rows := map[string]bool{}
	for sel := range covered {
		typ, k := stepOf(sel)
		require.Contains(t, steps, typ, "%s: no evidence row", sel)
		require.True(t, k >= 1 && k <= steps[typ], "%s: the %s row has %d steps", sel, typ, steps[typ])
		require.NotContains(t, unkilledSteps, sel, "%s is killed at: drop it from unkilledSteps", sel)
		rows[typ] = true
	}
	for sel := range unkilledSteps {
		typ, k := stepOf(sel)
		require.True(t, k >= 1 && k <= steps[typ], "%s: the %s row has %d steps", sel, typ, steps[typ])
	}
	for _, typ := range slices.Sorted(maps.Keys(steps)) {
		require.True(t, rows[typ], "the evidence row %s has no kill test", typ)
		for k := 1; k <= steps[typ]; k++ {
			sel := fmt.Sprintf("%s#%d", typ, k)
			require.True(t, covered[sel] || unkilledSteps[sel] != "", "%s: no kill test lands on this durable step, and unkilledSteps gives no reason", sel)
		}
	}
}

// TestFencedRestartLeavesNextCommand: runnerd is SIGKILLed right after
// the write of runner.suspend's lifecycle, fence and result. The next
// process only reconciles that result and stops (prp.md §9.4). The core
// queues session.open as soon as it has the suspend's result, and the new
// connection, whose welcome carried the suspend, is not fenced at the
// core, so the command reaches the stopping process: it must leave it
// unanswered for the next process instead of failing it ("the agent
// executor is closed"). The next process opens the session and runs a turn.
func TestFencedRestartLeavesNextCommand(t *testing.T) {
	r := hookRig(t)
	r.env = killAfterEnv(prp.CommandRunnerSuspend + "#2")
	proc := r.start(t)
	r.prepare(t)
	r.open(t)
	id := r.queue(t, prp.CommandRunnerSuspend, map[string]any{})
	waitExit(t, proc)
	require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "runnerd killed itself")

	r.env = nil
	proc = r.start(t)
	completed(`{"lifecycle":"suspended"}`)(t, r.result(t, id))
	next := r.queue(t, prp.CommandSessionOpen, map[string]any{"reuse": "same_session"})
	require.Zero(t, waitExit(t, proc), "the fenced process stops by itself")
	require.Nil(t, r.c.core.Snapshot().Results[next], "the stopping process must leave the next command unanswered")

	r.start(t)
	decodeOpen(t, r.result(t, next))
	requireTurnWorks(t, r, "echo after-resume")
}

// TestPcwrapSIGKILLBeforeOpen: the agent's pcwrap is SIGKILLed between
// turns and session.open follows as soon as it is dead (a zombie, or
// gone), possibly before runnerd has reaped it.
// The open must not adopt the process whose wrapper is gone (it would
// answer with the dead session, and the next turn would fail at once with
// transport_closed): it spawns a new agent, and the next turn works.
func TestPcwrapSIGKILLBeforeOpen(t *testing.T) {
	for i := range 5 { // the window is the reaping goroutine's: try it a few times
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			r := hookRig(t)
			r.start(t)
			r.prepare(t, "--supports-load-session")
			first := decodeOpen(t, r.run(t, prp.CommandSessionOpen, map[string]any{}))
			requireTurnWorks(t, r, "echo before")
			pid := pcwrapPid(t, r.sessionDir(t))
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
			require.Eventually(t, func() bool { return !running(pid) }, waitBound, time.Millisecond, "pcwrap dies")
			again := decodeOpen(t, r.run(t, prp.CommandSessionOpen, map[string]any{}))
			require.NotEqual(t, first.ProcessID, again.ProcessID, "a new agent, not the one whose pcwrap died")
			requireTurnWorks(t, r, "echo after-pcwrap-kill")
		})
	}
}

// running reports whether pid is a live process (not a zombie, not gone).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z' && s[i+2] != 'X'
}

// TestIndeterminateSuspendLeavesNextCommand: runnerd is SIGKILLed right
// after runner.suspend's pending marker; the next process replays the
// suspend's result, execution_indeterminate, and the core acknowledges it,
// which asks that process to end. The core queues session.open as soon as
// it has the result, and that command can reach the runner before the
// acknowledgement (here the core's sending of the acknowledgement is held
// back a moment, so it always does): the ending process must leave it for
// the next one instead of starting it and failing it as its executor shuts
// down.
func TestIndeterminateSuspendLeavesNextCommand(t *testing.T) {
	const ackLag = 300 * time.Millisecond
	for i := range 2 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			r := newAgentRigWith(t, func(cfg *control.Config) {
				cfg.Outbound = func(_ string, payload any) (any, error) {
					if p, ok := payload.(prp.CommandResultAckPayload); ok && p.CommandType == prp.CommandRunnerSuspend {
						time.Sleep(ackLag) // the next command overtakes the acknowledgement
					}
					return payload, nil
				}
			})
			r.bin = testbin.Path(t, "runnerd", testbin.HooksTag)
			r.env = killAfterEnv(prp.CommandRunnerSuspend + "#1")
			proc := r.start(t)
			r.prepare(t)
			r.open(t)
			id := r.queue(t, prp.CommandRunnerSuspend, map[string]any{})
			waitExit(t, proc)
			require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "runnerd killed itself")

			r.env = nil
			proc = r.start(t)
			r.c.wait(t, func(s control.Snapshot) bool { return s.Results[id] != nil })
			next := r.queue(t, prp.CommandSessionOpen, map[string]any{"reuse": "same_session"})
			indeterminate(t, r.result(t, id))
			require.Zero(t, waitExit(t, proc), "the process the core asked to end stops cleanly")
			if raw := r.c.core.Snapshot().Results[next]; raw != nil {
				require.Contains(t, string(raw), `"completed"`, "a command the ending process took must not fail for it")
			}
			r.start(t)
			decodeOpen(t, r.result(t, next))
			requireTurnWorks(t, r, "echo after-indeterminate-suspend")
		})
	}
}
