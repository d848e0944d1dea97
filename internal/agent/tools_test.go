package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
	"github.com/pcrunner/pcrunner/internal/toolcall"
)

// testCorrelation is the run identity the rig's semantic events name.
var testCorrelation = toolcall.Correlation{RunID: "run-1", NormalizedSessionID: "sess-1", TurnID: "turn-1", ItemID: "item-1"}

// Catalog operations of the tool scenarios.
var (
	opComment = catalog.Operation{OperationID: "issue.comment", Version: 1, Description: "Comment on the task.",
		InputSchema:    json.RawMessage(`{"type":"object","required":["body"],"properties":{"body":{"type":"string","maxLength":64}},"additionalProperties":false}`),
		ResponseSchema: json.RawMessage(`{"type":"object","required":["id"],"properties":{"id":{"type":"string"}}}`)}
	opNote = catalog.Operation{OperationID: "note.add", Version: 1, Description: "Add a note.",
		InputSchema: json.RawMessage(`{"type":"object"}`), ResponseSchema: json.RawMessage(`{"type":"object"}`)}
)

// catalogJSON is an authorizedTools value with its digest.
func catalogJSON(t testing.TB, ops ...catalog.Operation) json.RawMessage {
	t.Helper()
	if ops == nil {
		ops = []catalog.Operation{}
	}
	b, err := json.Marshal(map[string]any{"schema": catalog.Schema, "schemaVersion": 1,
		"catalogDigest": catalog.Digest(ops), "operations": ops})
	require.NoError(t, err)
	return b
}

func newToolRig(t testing.TB) *rig {
	return newRig(t, func(c *Config) { c.Correlation = func() toolcall.Correlation { return testCorrelation } })
}

// prepareTools binds fakeacp (advertising HTTP MCP servers) with a catalog.
func (r *rig) prepareTools(cat json.RawMessage, flags ...string) error {
	r.t.Helper()
	desc := map[string]any{"provider": map[string]any{
		"kind": "acpx", "agent": "claude", "command": fakeacpBin(r.t), "args": append([]string{"--mcp-http"}, flags...), "cwd": r.cwd,
	}}
	if cat != nil {
		desc["authorizedTools"] = cat
	}
	b, _ := json.Marshal(desc)
	_, err := r.m.Prepare(b)
	return err
}

// bearer adds the bridge's Authorization header, as the agent's
// mcpServers entry says.
type bearer struct {
	secret string
	base   http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.secret)
	return b.base.RoundTrip(req)
}

// mcpClient connects the Go SDK's Streamable HTTP client to the bridge the
// record names (what the agent got in session/new), with nothing custom
// but the header and no retries.
func mcpClient(t testing.TB, br *BridgeRecord) *mcp.ClientSession {
	t.Helper()
	require.NotNil(t, br, "the session has a bridge")
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "tools-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   "http://127.0.0.1:" + strconv.Itoa(br.Port) + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{secret: br.Secret, base: tr}},
		MaxRetries: -1,
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// toolOutcome is what the MCP client got for one call.
type toolOutcome struct {
	text    string
	isError bool
	err     error
}

// callAsync calls a tool in the background.
func callAsync(cs *mcp.ClientSession, name, args string) <-chan toolOutcome {
	ch := make(chan toolOutcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
		if err != nil {
			ch <- toolOutcome{err: err}
			return
		}
		var text string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		ch <- toolOutcome{text: text, isError: res.IsError}
	}()
	return ch
}

func callTool(t testing.TB, cs *mcp.ClientSession, name, args string) toolOutcome {
	t.Helper()
	return awaitOutcome(t, callAsync(cs, name, args))
}

func awaitOutcome(t testing.TB, ch <-chan toolOutcome) toolOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-timeAfter():
		t.Fatal("timed out waiting for the tool call's answer")
		return toolOutcome{}
	}
}

// semantic returns the semantic_tool payloads of type typ.
func semantic(evs []provider.Event, typ string) []map[string]any {
	var out []map[string]any
	for _, e := range evs {
		if e.EventType == typ {
			// As the core reads it: the payload's JSON.
			b, _ := json.Marshal(e.Payload["semantic_tool"])
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			out = append(out, m)
		}
	}
	return out
}

func semanticCount(evs []provider.Event) int {
	return count(evs, prp.EventSemanticToolInput) + count(evs, prp.EventSemanticToolResult)
}

// waitInputs waits for n semantic_tool.input events.
func (r *rig) waitInputs(n int) []map[string]any {
	r.t.Helper()
	evs := r.sink.waitFor(r.t, fmt.Sprintf("%d semantic_tool.input", n), func(_ Stored, evs []provider.Event) bool {
		return count(evs, prp.EventSemanticToolInput) >= n
	})
	return semantic(evs, prp.EventSemanticToolInput)
}

// result runs the semantic_tool.result command the core sends.
func (r *rig) result(commandID string, call map[string]any, result string, isError bool) (json.RawMessage, error) {
	r.t.Helper()
	b, err := json.Marshal(map[string]any{"callId": call["callId"], "operationId": call["operationId"],
		"inputDigest": call["content"].(map[string]any)["digest"], "sourceEventType": prp.EventSemanticToolInput,
		"correlation": call["correlation"], "result": json.RawMessage(result), "isError": isError})
	require.NoError(r.t, err)
	return r.m.ToolResult(commandID, b)
}

func statusOf(t testing.TB, res json.RawMessage) string {
	t.Helper()
	var s struct {
		Status string `json:"status"`
	}
	require.NoError(t, json.Unmarshal(res, &s))
	return s.Status
}

// openTurn opens the session and starts a long turn, so calls have an
// active turn; it returns the MCP client the agent would use.
func (r *rig) openTurn() *mcp.ClientSession {
	r.t.Helper()
	r.open()
	r.turn("sleep 30000")
	st, _ := r.sink.snapshot()
	return mcpClient(r.t, st.Bridge)
}

// TestTools01_CatalogRefused: a catalog with a bad digest, 257 operations,
// a bad id or a schema that does not compile fails run.prepare with
// command_execution_failed and a message naming the problem, never the
// tool text; nothing is bound, stored or started (tools.md §9 scenario 1).
func TestTools01_CatalogRefused(t *testing.T) {
	many := make([]catalog.Operation, catalog.MaxOperations+1)
	for i := range many {
		many[i] = opNote
		many[i].OperationID = fmt.Sprintf("op.%d", i)
	}
	badID := opNote
	badID.OperationID = "-bad id"
	badSchema := opNote
	badSchema.InputSchema = json.RawMessage(`{"type":"object","properties":{"x":{"type":"strung"}}}`)
	badDigest := catalogJSON(t, opComment)
	badDigest = json.RawMessage(strings.Replace(string(badDigest), catalog.Digest([]catalog.Operation{opComment}), "sha256:"+strings.Repeat("0", 64), 1))
	for name, cat := range map[string]json.RawMessage{
		"digest": badDigest, "257 operations": catalogJSON(t, many...), "id": catalogJSON(t, badID), "schema": catalogJSON(t, badSchema),
	} {
		t.Run(name, func(t *testing.T) {
			r := newToolRig(t)
			err := r.prepareTools(cat)
			var ce *CommandError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, codeCommandExecutionFailed, ce.Code)
			require.NotContains(t, ce.Message, "Comment on the task", "never the tool text")
			require.NotContains(t, ce.Message, "Add a note")
			st, evs := r.sink.snapshot()
			require.Nil(t, st.Binding, "nothing bound")
			require.Empty(t, evs)
			entries, _ := os.ReadDir(r.state)
			require.Empty(t, entries, "no side file, no process session")
			_, err = r.m.Open(context.Background(), "cmd-open")
			require.ErrorAs(t, err, &ce, "session.open finds nothing prepared")
		})
	}
}

// TestTools03_CatalogCallDelivered: an agent calls a catalog tool through
// the bridge: one semantic_tool.input whose digest is the sha256 of the
// canonical input it carries and whose correlation is the run identity;
// the core's semantic_tool.result gives the agent the result as text, one
// semantic_tool.result event in the write that records the command's
// "delivered"; the same result again is "duplicate" with no event
// (tools.md §9 scenario 3).
func TestTools03_CatalogCallDelivered(t *testing.T) {
	r := newToolRig(t)
	require.NoError(t, r.prepareTools(catalogJSON(t, opComment, opNote)))
	cs := r.openTurn()
	st, _ := r.sink.snapshot()
	require.Equal(t, "sha256:", st.Binding.CatalogDigest[:7])
	require.NotEmpty(t, st.Binding.CatalogSide)

	pending := callAsync(cs, "paperclip__issue.comment", `{ "body" : "hello" }`)
	in := r.waitInputs(1)[0]
	require.Equal(t, "issue.comment", in["operationId"])
	require.Equal(t, "input", in["phase"])
	require.Regexp(t, `^call_[0-9a-f]{32}$`, in["callId"])
	input, err := json.Marshal(in["input"])
	require.NoError(t, err)
	canon, err := prp.Canonical(json.RawMessage(input))
	require.NoError(t, err)
	sum := sha256.Sum256(canon)
	require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), in["content"].(map[string]any)["digest"])
	require.Equal(t, map[string]any{"runId": "run-1", "normalizedSessionId": "sess-1", "turnId": "turn-1", "itemId": "item-1"}, in["correlation"])
	st, _ = r.sink.snapshot()
	require.Len(t, st.Tools.Calls, 1, "the call is durable with its event")

	res, err := r.result("cmd-res-1", in, `{"id":"c1","url":"https://x/c1"}`, false)
	require.NoError(t, err)
	require.JSONEq(t, `{"status":"delivered","callId":"`+in["callId"].(string)+`"}`, string(res))
	got := awaitOutcome(t, pending)
	require.NoError(t, got.err)
	require.False(t, got.isError)
	require.JSONEq(t, `{"id":"c1","url":"https://x/c1"}`, got.text)
	_, evs := r.sink.snapshot()
	require.Equal(t, 1, count(evs, prp.EventSemanticToolResult))
	require.Equal(t, []string{prp.EventSemanticToolResult}, r.sink.outcomeEvents["cmd-res-1"], "event and outcome in one write")
	out := semantic(evs, prp.EventSemanticToolResult)[0]
	require.Equal(t, "succeeded", out["outcome"])
	require.Equal(t, "operation_"+in["callId"].(string), out["operationReceiptId"])

	res, err = r.result("cmd-res-2", in, `{"url":"https://x/c1","id":"c1"}`, false)
	require.NoError(t, err)
	require.Equal(t, "duplicate", statusOf(t, res))
	_, err = r.result("cmd-res-3", in, `{"id":"c2"}`, false)
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, toolcall.CodeResultConflict, ce.Code)
	_, evs = r.sink.snapshot()
	require.Equal(t, 2, semanticCount(evs), "no event for a duplicate or a conflict")

	_, err = r.m.ToolResult("cmd-res-4", json.RawMessage(`{"callId":"call_unknown","operationId":"issue.comment","result":{}}`))
	require.ErrorAs(t, err, &ce)
	require.Equal(t, toolcall.CodeNotPending, ce.Code)
}

// TestTools04_RefusedWithoutEvent: invalid arguments, an unknown tool, a
// 500 KiB input and an input holding "apiKey" are tool errors to the agent
// and no PRP event (tools.md §9 scenario 4).
func TestTools04_RefusedWithoutEvent(t *testing.T) {
	r := newToolRig(t)
	require.NoError(t, r.prepareTools(catalogJSON(t, opComment, opNote)))
	cs := r.openTurn()
	big := `{"blob":"` + strings.Repeat("x", 500<<10) + `"}`
	for _, c := range []struct{ name, args, want string }{
		{"issue.comment", `{"body":42}`, "Invalid tool input: "},
		{"issue.comment", `{"body":"x","extra":1}`, "Invalid tool input: "},
		{"no.such.tool", `{}`, "Unsupported tool."},
		{"note.add", big, "Refused tool input: "},
		{"note.add", `{"config":{"apiKey":"x"}}`, "Refused tool input: "},
	} {
		got := callTool(t, cs, c.name, c.args)
		require.NoError(t, got.err, c.name)
		require.True(t, got.isError, c.name)
		require.True(t, strings.HasPrefix(got.text, c.want), "%s: %q", c.name, got.text)
		require.NotContains(t, got.text, `"x"`, "never the value")
	}
	_, evs := r.sink.snapshot()
	require.Zero(t, semanticCount(evs))
}

// TestTools06_InterruptDetaches: turn.interrupt while a call is pending
// gives the agent the stop error; the late result is recorded, not
// delivered: {status: "detached", callId} (tools.md §9 scenario 6).
func TestTools06_InterruptDetaches(t *testing.T) {
	r := newToolRig(t)
	require.NoError(t, r.prepareTools(catalogJSON(t, opComment)))
	cs := r.openTurn()
	pending := callAsync(cs, "issue.comment", `{"body":"late"}`)
	in := r.waitInputs(1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err := r.m.Cancel(ctx, Interrupt)
	require.NoError(t, err)
	got := awaitOutcome(t, pending)
	require.NoError(t, got.err)
	require.True(t, got.isError)
	require.Equal(t, textStopped, got.text)

	res, err := r.result("cmd-late", in, `{"id":"c9"}`, false)
	require.NoError(t, err)
	require.JSONEq(t, `{"status":"detached","callId":"`+in["callId"].(string)+`"}`, string(res))
	res, err = r.result("cmd-late-again", in, `{"id":"c9"}`, false)
	require.NoError(t, err)
	require.Equal(t, "duplicate", statusOf(t, res))
	_, evs := r.sink.snapshot()
	require.Equal(t, 1, count(evs, prp.EventSemanticToolResult), "the late result is reported once")
}

// TestTools07_CallIDsUniqueAcrossAgents: calls from two agent processes
// of the same run (the agent restarted between them; JSON-RPC ids start
// again) get different callIds (tools.md §9 scenario 7).
func TestTools07_CallIDsUniqueAcrossAgents(t *testing.T) {
	r := newToolRig(t)
	require.NoError(t, r.prepareTools(catalogJSON(t, opComment), "--supports-load-session"))
	var ids, procs []string
	for i := 0; i < 2; i++ {
		cs := r.openTurn()
		pending := callAsync(cs, "issue.comment", `{"body":"same"}`)
		in := r.waitInputs(i + 1)[i]
		ids = append(ids, in["callId"].(string))
		st, _ := r.sink.snapshot()
		procs = append(procs, st.Session.Process.UUID)
		_, err := r.result(fmt.Sprintf("cmd-res-%d", i), in, `{"id":"c"}`, false)
		require.NoError(t, err)
		require.NoError(t, awaitOutcome(t, pending).err)
		_ = cs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		_, err = r.m.Cancel(ctx, StopTurn) // stops the agent: the next open starts another process
		cancel()
		require.NoError(t, err)
	}
	require.NotEqual(t, procs[0], procs[1], "two agent processes")
	require.NotEqual(t, ids[0], ids[1])
}

// finishInput is a paperclip_finish input with aliases (tools.md §4).
const finishInput = `{"reportedWorkDisposition":"completed","summary":"Commented on the task.",` +
	`"completionClaim":{"contractRevision":"rev-1","objectiveSatisfied":true,"criteria":[{"criterionId":"c1","status":"pass","evidenceRefs":[]}],"remainingWork":[]},` +
	`"evidence":[],"verification":[{"commandOrCheck":"go test","status":"success"}]}`

// TestTools10_FinishFeedbackLoop: paperclip_finish with aliases goes to
// the core normalised; a rejection gives the agent the core's feedback;
// the agent calls again and the core accepts: the turn's one
// run.result.proposed is the normalised result, just before run.terminal,
// whose disposition is the result's; another reserved call in that turn
// is refused (tools.md §9 scenario 10).
func TestTools10_FinishFeedbackLoop(t *testing.T) {
	r := newToolRig(t)
	require.NoError(t, r.prepareTools(catalogJSON(t, opComment)))
	cs := r.openTurn()

	first := callAsync(cs, "paperclip_finish", finishInput)
	in := r.waitInputs(1)[0]
	require.Equal(t, catalog.FinishTool, in["operationId"])
	norm := in["input"].(map[string]any)
	require.Equal(t, "done", norm["reportedWorkDisposition"])
	require.Equal(t, "paperclip.run_result.v1", norm["schema"])
	require.Equal(t, "satisfied", norm["completionClaim"].(map[string]any)["criteria"].([]any)[0].(map[string]any)["status"])
	require.Equal(t, "passed", norm["verification"].([]any)[0].(map[string]any)["status"])
	require.Equal(t, []any{}, norm["artifacts"])

	_, err := r.result("cmd-reject", in, `{"success":false,"contentItems":[{"type":"inputText","text":"Add the evidence you cite."}]}`, true)
	require.NoError(t, err)
	got := awaitOutcome(t, first)
	require.True(t, got.isError)
	require.Equal(t, "Add the evidence you cite.", got.text)

	second := callAsync(cs, "paperclip_finish", finishInput)
	in2 := r.waitInputs(2)[1]
	require.NotEqual(t, in["callId"], in2["callId"])
	res, err := r.result("cmd-accept", in2, `{"success":true}`, false)
	require.NoError(t, err)
	require.Equal(t, "delivered", statusOf(t, res))
	got = awaitOutcome(t, second)
	require.False(t, got.isError)

	again := callTool(t, cs, "paperclip_finish", finishInput)
	require.True(t, again.isError)
	require.Equal(t, textAlreadyAccepted, again.text)

	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err = r.m.Cancel(ctx, Interrupt) // ends the turn: its settle emits the result
	require.NoError(t, err)
	evs := r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, 1, count(evs, "run.result.proposed"))
	end := len(evs)
	for evs[end-1].EventType != "run.terminal" {
		end-- // harness.exited of the stop follows
	}
	evs = evs[:end]
	got2 := types(evs)
	require.Equal(t, []string{"run.result.proposed", "run.terminal"}, got2[len(got2)-2:])
	proposed, err := json.Marshal(evs[len(evs)-2].Payload)
	require.NoError(t, err)
	want, err := json.Marshal(norm)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(proposed))
	require.Equal(t, "done", evs[len(evs)-1].Payload["reportedWorkDisposition"])
	require.Equal(t, "acpx", evs[len(evs)-1].Payload["provider"])
}

// TestTools11_ResultToolRefusals: paperclip_block without a blocker and
// paperclip_finish reporting blocked are tool errors, no event (tools.md
// §9 scenario 11).
func TestTools11_ResultToolRefusals(t *testing.T) {
	r := newToolRig(t)
	require.NoError(t, r.prepareTools(catalogJSON(t)))
	cs := r.openTurn()
	blocked := strings.Replace(finishInput, `"completed"`, `"blocked"`, 1)
	for _, c := range []struct{ tool, args string }{
		{catalog.BlockTool, blocked},
		{catalog.FinishTool, blocked},
	} {
		got := callTool(t, cs, c.tool, c.args)
		require.NoError(t, got.err)
		require.True(t, got.isError, c.tool)
		require.True(t, strings.HasPrefix(got.text, "Invalid tool input: "), got.text)
	}
	_, evs := r.sink.snapshot()
	require.Zero(t, semanticCount(evs))
}

// TestToolsNoCatalogNoBridge: a run without authorizedTools gets no bridge
// (mcpServers stays []) and never a semantic event (tools.md §3 item 9).
func TestToolsNoCatalogNoBridge(t *testing.T) {
	r := newToolRig(t)
	require.NoError(t, r.prepareTools(nil))
	r.open()
	st, _ := r.sink.snapshot()
	require.Nil(t, st.Bridge)
	require.Empty(t, st.Binding.CatalogSide)
	_, err := r.m.ToolResult("cmd-x", json.RawMessage(`{"callId":"call_1","operationId":"op","result":{}}`))
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, toolcall.CodeNotPending, ce.Code)
}

func timeAfter() <-chan time.Time { return time.After(testWait) }

// restart is a runnerd crash and restart for the executor: the manager
// goes away without stopping its agent (the bridge's listener dies with
// it), and a new one re-adopts the agent from the committed record
// (acp.md §3.5).
func (r *rig) restart() {
	r.t.Helper()
	r.m.Close()
	st, _ := r.sink.snapshot()
	r.m = NewManager(r.cfg, st)
	require.NoError(r.t, r.m.Start())
}

// TestTools05_HotRestartDeliversOnce: runnerd goes away while a call is
// pending; after the restart the bridge listens on the same port with the
// same secret and session; the agent (the same process, fakeacp's real
// MCP client) repeats the call after its connection error, which re-takes
// the pending call without a new semantic_tool.input; the core's result
// is then delivered exactly once, into the same turn (tools.md §9
// scenario 5).
func TestTools05_HotRestartDeliversOnce(t *testing.T) {
	r := newToolRig(t)
	require.NoError(t, r.prepareTools(catalogJSON(t, opComment)))
	r.open()
	r.turn(`mcp-call-retry issue.comment {"body":"survive"}`)
	in := r.waitInputs(1)[0]
	before, _ := r.sink.snapshot()
	pgid := agentPgid(t, r.sessionDir())

	r.restart()
	st, _ := r.sink.snapshot()
	require.Equal(t, before.Bridge.Port, st.Bridge.Port, "the same port")
	require.Equal(t, before.Session.Process.UUID, st.Session.Process.UUID, "the same agent process session")
	// The agent's repeat re-takes the call: it is pending again.
	r.sink.waitFor(t, "the repeated call re-attached", func(st Stored, _ []provider.Event) bool {
		return st.Tools != nil && len(st.Tools.Calls) == 1 && st.Tools.Calls[0].State == toolcall.Pending
	})
	res, err := r.result("cmd-res", in, `{"id":"c-restart"}`, false)
	require.NoError(t, err)
	require.Equal(t, "delivered", statusOf(t, res))
	evs := r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, 1, count(evs, prp.EventSemanticToolInput), "no second semantic_tool.input")
	require.Equal(t, 1, count(evs, prp.EventSemanticToolResult))
	text := ""
	for _, e := range evs {
		if e.EventType == "item.delta" {
			text += e.Payload["text"].(string)
		}
	}
	require.Contains(t, text, `tool issue.comment isError=false: {"id":"c-restart"}`)
	require.Equal(t, 1, strings.Count(text, "isError="), "one answer reached the agent")
	require.Equal(t, pgid, agentPgid(t, r.sessionDir()), "the agent was never restarted")
	res, err = r.result("cmd-res-again", in, `{"id":"c-restart"}`, false)
	require.NoError(t, err)
	require.Equal(t, "duplicate", statusOf(t, res))
}

// TestToolsBridgeLostOnRestart: a restart that finds the bridge's port
// taken ends the turn with the loss sequence (reason other) and
// harness.diagnostic {code: tool_bridge_lost} (tools.md §2).
func TestToolsBridgeLostOnRestart(t *testing.T) {
	r := newToolRig(t)
	require.NoError(t, r.prepareTools(catalogJSON(t, opComment)))
	r.openTurn()
	r.m.Close()
	st, _ := r.sink.snapshot()
	ln, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(st.Bridge.Port))
	require.NoError(t, err)
	defer ln.Close()
	r.m = NewManager(r.cfg, st)
	require.NoError(t, r.m.Start())
	evs := r.sink.waitEvent(t, "run.terminal")
	var codes, reasons []any
	for _, e := range evs {
		if e.EventType == "harness.diagnostic" {
			codes, reasons = append(codes, e.Payload["code"]), append(reasons, e.Payload["lossReason"])
		}
	}
	require.Contains(t, codes, diagBridgeLost)
	require.Contains(t, reasons, string(provider.LossOther))
	require.Equal(t, 1, count(evs, "turn.failed"))
}

// TestToolsBridgeUnsupported: an agent without mcpCapabilities.http gets
// no bridge; with a non-empty catalog session.open still succeeds and
// emits harness.diagnostic {code: tool_bridge_unsupported} (tools.md §2).
func TestToolsBridgeUnsupported(t *testing.T) {
	r := newToolRig(t)
	desc, _ := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
		"command": fakeacpBin(t), "cwd": r.cwd}, "authorizedTools": catalogJSON(t, opComment)})
	_, err := r.m.Prepare(desc)
	require.NoError(t, err)
	r.open()
	st, evs := r.sink.snapshot()
	require.Nil(t, st.Bridge)
	require.Equal(t, diagBridgeUnsupported, payloadOf(evs, "harness.diagnostic")["code"])
}

// TestNativeServerEntry: the native server needs all three variables, a
// name other than paperclip, and HTTPS or loopback HTTP (tools.md §2).
func TestNativeServerEntry(t *testing.T) {
	env := func(name, url string) []string {
		return []string{envNativeName + "=" + name, envNativeURL + "=" + url, envNativeToken + "=tok"}
	}
	for _, c := range []struct {
		env []string
		ok  bool
	}{
		{env("native", "https://mcp.example.com/mcp"), true},
		{env("native", "http://127.0.0.1:9/mcp"), true},
		{env("native", "http://localhost:9/mcp"), true},
		{env("native", "http://example.com/mcp"), false},
		{env("paperclip", "https://mcp.example.com/mcp"), false},
		{env("native", "ftp://x/y"), false},
		{env("native", "https://user:pw@x/y"), false},
		{env("native", "https://x/y")[:2], false},
	} {
		s, ok := nativeServer(c.env)
		require.Equal(t, c.ok, ok, "%v", c.env)
		if ok {
			require.Equal(t, []acpx.HTTPHeader{{Name: "Authorization", Value: "Bearer tok"}}, s.Headers)
			require.Equal(t, acpx.MCPTransportHTTP, s.Type)
		}
	}
}

// TestTools06_EveryStopAnswersOpenCalls: turn.interrupt, turn.stop,
// run.cancel and session.close each answer a call still open on the agent
// side with the stop error; the call stays, detached, for a late result
// (tools.md §3 item 6).
func TestTools06_EveryStopAnswersOpenCalls(t *testing.T) {
	stops := map[string]func(m *Manager, ctx context.Context) error{
		"turn.stop":     func(m *Manager, ctx context.Context) error { _, err := m.Cancel(ctx, StopTurn); return err },
		"run.cancel":    func(m *Manager, ctx context.Context) error { _, err := m.Cancel(ctx, RunCancel); return err },
		"session.close": func(m *Manager, ctx context.Context) error { _, err := m.CloseSession(ctx); return err },
	}
	for name, stop := range stops {
		t.Run(name, func(t *testing.T) {
			r := newToolRig(t)
			require.NoError(t, r.prepareTools(catalogJSON(t, opComment)))
			cs := r.openTurn()
			pending := callAsync(cs, "issue.comment", `{"body":"x"}`)
			in := r.waitInputs(1)[0]
			ctx, cancel := context.WithTimeout(context.Background(), testWait)
			defer cancel()
			require.NoError(t, stop(r.m, ctx))
			got := awaitOutcome(t, pending)
			require.NoError(t, got.err)
			require.Equal(t, toolOutcome{text: textStopped, isError: true}, got)
			res, err := r.result("cmd-late", in, `{"id":"c"}`, false)
			require.NoError(t, err)
			require.Equal(t, "detached", statusOf(t, res))
			st, _ := r.sink.snapshot()
			require.Nil(t, st.Bridge, "the bridge ends with its session")
		})
	}
}

// TestToolsSecretNowhere: the bridge's secret and MCP session id are in
// the 0600 record only: never in runnerd's log, the events, the command
// results or fakeacp's transcript (tools.md §2).
func TestToolsSecretNowhere(t *testing.T) {
	logs := &syncbuf.Buffer{}
	transcript := filepath.Join(t.TempDir(), "transcript.ndjson")
	r := newRig(t, func(c *Config) {
		c.Correlation = func() toolcall.Correlation { return testCorrelation }
		c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	require.NoError(t, r.prepareTools(catalogJSON(t, opComment), "--transcript", transcript))
	r.open()
	r.turn(`mcp-servers mcp-call issue.comment {"body":"x"} mcp-call nope {}`)
	in := r.waitInputs(1)[0]
	res, err := r.result("cmd-res", in, `{"id":"c"}`, false)
	require.NoError(t, err)
	evs := r.sink.waitEvent(t, "run.terminal")
	st, _ := r.sink.snapshot()
	require.NotNil(t, st.Bridge)
	tr, err := os.ReadFile(transcript)
	require.NoError(t, err)
	require.Contains(t, string(tr), `\u003credacted\u003e`, "the transcript shows the header, redacted")
	allEvents, err := json.Marshal(evs)
	require.NoError(t, err)
	for _, secret := range []string{st.Bridge.Secret, st.Bridge.SessionID} {
		require.NotEmpty(t, secret)
		for what, text := range map[string]string{"log": logs.String(), "events": string(allEvents), "result": string(res), "transcript": string(tr)} {
			require.NotContains(t, text, secret, what)
		}
	}
	raw, err := state.ReadSide(r.state, st.Binding.CatalogSide, maxCatalogSide)
	require.NoError(t, err)
	require.JSONEq(t, string(catalogJSON(t, opComment)), string(raw), "the catalog side file holds run.prepare's catalog")
}

// TestToolsBridgeOnLoad: a resumed session (session/load) gets the bridge
// in its mcpServers too, on a fresh bridge for the new agent process
// (tools.md §2).
func TestToolsBridgeOnLoad(t *testing.T) {
	r := newToolRig(t)
	require.NoError(t, r.prepareTools(catalogJSON(t, opComment), "--supports-load-session"))
	r.open()
	r.turn("echo hi") // a prompted session is resumable
	r.sink.waitEvent(t, "run.terminal")
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err := r.m.CloseSession(ctx)
	require.NoError(t, err)
	st, _ := r.sink.snapshot()
	require.Nil(t, st.Bridge, "the bridge closed with the session")
	res := r.open()
	require.Contains(t, string(res), "resumed")
	n := count(func() []provider.Event { _, e := r.sink.snapshot(); return e }(), "run.terminal")
	r.turn(`mcp-servers mcp-call issue.comment {"body":"after load"}`)
	in := r.waitInputs(1)[0]
	_, err = r.result("cmd-res", in, `{"id":"c-load"}`, false)
	require.NoError(t, err)
	evs := r.sink.waitFor(t, "the second turn's end", func(_ Stored, evs []provider.Event) bool { return count(evs, "run.terminal") > n })
	text := ""
	for _, e := range evs {
		if e.EventType == "item.delta" {
			text += e.Payload["text"].(string)
		}
	}
	require.Contains(t, text, `"name":"paperclip","type":"http"`)
	require.Contains(t, text, `tool issue.comment isError=false: {"id":"c-load"}`)
}
