package toolcall

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

var corr = Correlation{RunID: "run-1", NormalizedSessionID: "sess-1", TurnID: "turn-1", ItemID: "item-1"}

// fieldListSchema compiles the schema written from tools.md §3's field
// lists (the share holds none).
func fieldListSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open("testdata/semantic-tool.fieldlist.schema.json")
	require.NoError(t, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("urn:test:semantic-tool", doc))
	s, err := c.Compile("urn:test:semantic-tool")
	require.NoError(t, err)
	return s
}

func validate(t *testing.T, s *jsonschema.Schema, payload map[string]any) error {
	t.Helper()
	b, err := json.Marshal(payload)
	require.NoError(t, err)
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	require.NoError(t, err)
	return s.Validate(inst)
}

func newCall(t *testing.T, args string) (*Call, json.RawMessage) {
	t.Helper()
	in, d, err := CanonicalInput(json.RawMessage(args))
	require.NoError(t, err)
	return &Call{CallID: NewCallID(), OperationID: "issue.comment", Tool: "issue.comment", InputDigest: d, TurnID: "pturn-1",
		Agent: Identity{SessionKey: SessionKey("s"), RequestID: json.RawMessage(`1`), Process: "p"}}, in
}

// TestPayloadsMatchFieldLists checks semantic_tool.input and
// semantic_tool.result against tools.md §3 items 3–4, and that the check
// can fail.
func TestPayloadsMatchFieldLists(t *testing.T) {
	s := fieldListSchema(t)
	c, in := newCall(t, `{"b":1,"a":"x"}`)
	require.Equal(t, `{"a":"x","b":1}`, string(in))
	input := InputPayload(c, corr, in)
	require.NoError(t, validate(t, s, input))
	inner := input["semantic_tool"].(map[string]any)
	sum := sha256.Sum256(in)
	require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), inner["content"].(map[string]any)["digest"])

	res := json.RawMessage(`{"ok":true,"value":{"id":"c1"}}`)
	d, err := digest(res)
	require.NoError(t, err)
	for _, isErr := range []bool{false, true} {
		out := ResultPayload(c, corr, Outcome{Result: res, IsError: isErr, Digest: d})
		require.NoError(t, validate(t, s, out))
		in := out["semantic_tool"].(map[string]any)
		require.Equal(t, "operation_"+c.CallID, in["operationReceiptId"])
		require.Equal(t, map[string]any{"runId": "run-1", "normalizedSessionId": "sess-1", "turnId": "turn-1", "itemId": "item-1"}, in["correlation"])
	}

	// Negative cases: each breaks one required field or enum.
	for name, mutate := range map[string]func(m map[string]any){
		"no callId":       func(m map[string]any) { delete(m, "callId") },
		"bad phase":       func(m map[string]any) { m["phase"] = "reconciled" },
		"idempotency key": func(m map[string]any) { m["idempotencyKey"] = "k" },
		"bad digest": func(m map[string]any) {
			m["content"] = map[string]any{"digest": "sha256:x", "redactionDisposition": "digest_only", "references": []any{}}
		},
		"no itemId": func(m map[string]any) {
			m["correlation"] = map[string]any{"runId": "r", "normalizedSessionId": "s", "turnId": "t"}
		},
		"input no input": func(m map[string]any) { delete(m, "input") },
	} {
		p := InputPayload(c, corr, in)
		mutate(p["semantic_tool"].(map[string]any))
		require.Error(t, validate(t, s, p), name)
	}
	for name, mutate := range map[string]func(m map[string]any){
		"no outcome":    func(m map[string]any) { delete(m, "outcome") },
		"bad outcome":   func(m map[string]any) { m["outcome"] = "denied" },
		"code mismatch": func(m map[string]any) { m["code"] = "semantic_tool_failed" },
		"retryable":     func(m map[string]any) { m["retryable"] = true },
		"no receipt id": func(m map[string]any) { delete(m, "operationReceiptId") },
		"bad boundary":  func(m map[string]any) { m["authorizationBoundary"] = "company" },
	} {
		p := ResultPayload(c, corr, Outcome{Result: res, Digest: d})
		mutate(p["semantic_tool"].(map[string]any))
		require.Error(t, validate(t, s, p), name)
	}
}

// TestResultReceiptVerbatim: a result.resultReceipt naming this call and
// correlation is the event's payload as sent; another is ignored.
func TestResultReceiptVerbatim(t *testing.T) {
	c, _ := newCall(t, `{}`)
	rec := `{"schema":"paperclip.prp.semantic_tool.v1","schemaVersion":1,"phase":"result","operationId":"issue.comment","callId":"` + c.CallID +
		`","correlation":{"itemId":"item-1","normalizedSessionId":"sess-1","runId":"run-1","turnId":"turn-1"},"idempotencyKey":null,"content":{"digest":"sha256:` +
		strings.Repeat("a", 64) + `","redactionDisposition":"digest_only","references":[]},"outcome":"succeeded","code":"semantic_tool_succeeded","retryable":false,"authorizationBoundary":"active_task","operationReceiptId":"operation_x","auditReceiptId":"audit_1"}`
	res := json.RawMessage(`{"ok":true,"resultReceipt":` + rec + `}`)
	p := ResultPayload(c, corr, Outcome{Result: res, Digest: "sha256:" + strings.Repeat("b", 64)})
	require.JSONEq(t, rec, string(p["semantic_tool"].(json.RawMessage)))

	other := Correlation{RunID: "run-2", NormalizedSessionID: "sess-1", TurnID: "turn-1", ItemID: "item-1"}
	p = ResultPayload(c, other, Outcome{Result: res, Digest: "sha256:" + strings.Repeat("b", 64)})
	require.Equal(t, "operation_"+c.CallID, p["semantic_tool"].(map[string]any)["operationReceiptId"])
}

func cmd(t *testing.T, s string) resultCommand {
	t.Helper()
	c, err := DecodeResultCommand(json.RawMessage(s))
	require.NoError(t, err)
	return c
}

// TestDecide walks the verdicts of tools.md §3 items 4–5.
func TestDecide(t *testing.T) {
	var tb Table
	c, in := newCall(t, `{"x":1}`)
	require.NoError(t, tb.Add(c))
	waiting := map[string]bool{c.CallID: true}
	w := func(id string) bool { return waiting[id] }
	base := `{"callId":"` + c.CallID + `","operationId":"issue.comment","result":{"ok":true},"isError":false`

	require.Equal(t, NotPending, tb.Decide(cmd(t, `{"callId":"call_nope","operationId":"issue.comment","result":{}}`), w).Verdict)
	require.Equal(t, Conflict, tb.Decide(cmd(t, `{"callId":"`+c.CallID+`","operationId":"other","result":{}}`), w).Verdict)
	require.Equal(t, Conflict, tb.Decide(cmd(t, base+`,"input":{"x":2}}`), w).Verdict)
	require.Equal(t, Deliver, tb.Decide(cmd(t, base+`,"input":{"x":1}}`), w).Verdict)
	require.Equal(t, Deliver, tb.Decide(cmd(t, base+`,"inputDigest":"`+c.InputDigest+`"}`), w).Verdict)
	require.Equal(t, `{"x":1}`, string(in))

	// The agent stops waiting: the result is recorded.
	waiting[c.CallID] = false
	first := cmd(t, base+`}`)
	require.Equal(t, record, tb.Decide(first, w).Verdict)
	tb.Record(c.CallID, first.Outcome())
	require.Equal(t, detached, c.State)
	require.Equal(t, Duplicate, tb.Decide(cmd(t, base+`}`), w).Verdict)
	require.Equal(t, Conflict, tb.Decide(cmd(t, `{"callId":"`+c.CallID+`","operationId":"issue.comment","result":{"ok":false}}`), w).Verdict)
	require.Same(t, c, tb.Reattachable("pturn-1", "issue.comment", c.InputDigest))
	require.Nil(t, tb.Reattachable("pturn-2", "issue.comment", c.InputDigest))

	// Settled: duplicates and conflicts from the history.
	tb.Settle(c.CallID, first.Outcome())
	require.Nil(t, tb.Find(c.CallID))
	require.Equal(t, Duplicate, tb.Decide(cmd(t, base+`}`), w).Verdict)
	require.Equal(t, Conflict, tb.Decide(cmd(t, base[:len(base)-len("false")]+`true}`), w).Verdict)
}

// TestTableBounds: at most maxPending pending calls; the settled history
// keeps maxSettled entries; callIds do not repeat; the table survives JSON.
func TestTableBounds(t *testing.T) {
	var tb Table
	seen := map[string]bool{}
	for i := 0; i < maxPending; i++ {
		c, _ := newCall(t, `{}`)
		require.False(t, seen[c.CallID])
		seen[c.CallID] = true
		require.NoError(t, tb.Add(c))
	}
	c, _ := newCall(t, `{}`)
	require.ErrorIs(t, tb.Add(c), errTooManyPending)
	require.True(t, tb.DetachAll())
	require.NoError(t, tb.Add(c))
	for i := 0; i < maxUnsettled; i++ {
		x, _ := newCall(t, `{}`)
		require.NoError(t, tb.Add(x))
		tb.Detach(x.CallID)
	}
	require.Len(t, tb.Calls, maxUnsettled, "the oldest detached calls are forgotten")
	require.NotNil(t, tb.Find(c.CallID), "a pending call is never forgotten")
	tb.Calls = tb.Calls[:0]
	require.NoError(t, tb.Add(c))

	for i := 0; i < maxSettled+10; i++ {
		x, _ := newCall(t, `{}`)
		tb.Calls = append(tb.Calls, x)
		tb.Settle(x.CallID, Outcome{Digest: "d"})
	}
	require.Len(t, tb.Settled, maxSettled)
	b, err := json.Marshal(tb)
	require.NoError(t, err)
	var back Table
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, tb.clone(), &back)
	require.NotContains(t, string(b), `"s"`, "the MCP session id is kept as a digest only")
}

// TestDecodeResultCommand covers the decoder's refusals.
func TestDecodeResultCommand(t *testing.T) {
	for _, bad := range []string{
		`[]`, `{}`, `{"callId":"c","operationId":"o"}`, `{"callId":"-c","operationId":"o","result":{}}`,
		`{"callId":"c","operationId":"o","result":{},"inputDigest":"sha256:zz"}`,
		`{"callId":"c","operationId":"o","result":{},"input":{"a":1},"inputDigest":"sha256:` + strings.Repeat("0", 64) + `"}`,
		`{"callId":"` + strings.Repeat("c", 241) + `","operationId":"o","result":{}}`,
	} {
		_, err := DecodeResultCommand(json.RawMessage(bad))
		require.ErrorIs(t, err, errMalformedCommand, bad)
	}
	c := cmd(t, `{"callId":"c","operationId":"o","result":{"b":1,"a":2},"input":{"z":1}}`)
	want, err := digest(json.RawMessage(`{"a":2,"b":1}`))
	require.NoError(t, err)
	require.Equal(t, want, c.ResultDigest)
	require.True(t, digestPattern.MatchString(c.InputDigest))
}

func FuzzDecodeResultCommand(f *testing.F) {
	f.Add([]byte(`{"callId":"call_1","operationId":"op","result":{"ok":true},"isError":false,"input":{"a":[1,2.5,"x"]}}`))
	f.Add([]byte(`{"callId":"c","operationId":"o","result":null,"inputDigest":"sha256:` + strings.Repeat("a", 64) + `"}`))
	f.Add([]byte(`{"callId":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeResultCommand(b)
		if err != nil {
			require.ErrorIs(t, err, errMalformedCommand)
			return
		}
		require.True(t, stableID.MatchString(c.CallID))
		require.True(t, digestPattern.MatchString(c.ResultDigest))
		if c.InputDigest != "" {
			require.True(t, digestPattern.MatchString(c.InputDigest))
		}
	})
}

// TestAnsweringSurvivesACrash: a delivered result is kept on its call,
// detached, until the write that settles it; a crash in between leaves it
// for the agent's repeated call (Reattachable, then the recorded result),
// and Unanswered names the command whose answer was cut off, once.
func TestAnsweringSurvivesACrash(t *testing.T) {
	o := Outcome{Result: json.RawMessage(`{"id":"c"}`), Digest: "sha256:x"}
	newTable := func() *Table {
		tb := &Table{}
		require.NoError(t, tb.Add(&Call{CallID: "call_1", OperationID: "issue.comment", InputDigest: "sha256:in", TurnID: "t1"}))
		tb.Answering("call_1", "cmd_1", o)
		return tb
	}

	crashed := newTable()
	require.Equal(t, map[string]string{"cmd_1": "call_1"}, crashed.Unanswered())
	require.Empty(t, crashed.Unanswered(), "the mark is dropped")
	c := crashed.Reattachable("t1", "issue.comment", "sha256:in")
	require.NotNil(t, c)
	require.Equal(t, &o, c.Recorded)

	settled := newTable()
	require.False(t, settled.SettleAnswered("cmd_other"))
	require.True(t, settled.SettleAnswered("cmd_1"))
	require.Nil(t, settled.Reattachable("t1", "issue.comment", "sha256:in"), "answered: a live bridge never re-attaches it")
	require.Empty(t, settled.Unanswered())
	_, ok := settled.findSettled("call_1")
	require.True(t, ok)
}

// TestAnsweredKeptForARepeatAfterRestart: a call settled as answered (its
// answer handed to the agent's request, which a crash may have cut off
// before the HTTP write) is in the settled history, blocks no warm attach,
// names no request identity and is not re-attached while the bridge
// lives; after a restart (DetachAll) the repeated call in its turn takes
// the recorded result; a new call of another turn forgets it.
func TestAnsweredKeptForARepeatAfterRestart(t *testing.T) {
	o := Outcome{Result: json.RawMessage(`{"id":"c"}`), Digest: "sha256:x"}
	id := Identity{SessionKey: "s", RequestID: json.RawMessage(`2`), Process: "p"}
	tb := &Table{}
	require.NoError(t, tb.Add(&Call{CallID: "call_1", OperationID: "issue.comment", InputDigest: "sha256:in", TurnID: "t1", Agent: id}))
	tb.Answering("call_1", "cmd_1", o)
	require.True(t, tb.SettleAnswered("cmd_1"))

	require.False(t, tb.Open())
	require.Nil(t, tb.ByIdentity(id))
	require.Nil(t, tb.Reattachable("t1", "issue.comment", "sha256:in"))
	require.Len(t, tb.Settled, 1)
	d := tb.Decide(resultCommand{CallID: "call_1", OperationID: "issue.comment", ResultDigest: "sha256:x"}, nil)
	require.Equal(t, Duplicate, d.Verdict)
	d = tb.Decide(resultCommand{CallID: "call_1", OperationID: "issue.comment", ResultDigest: "sha256:y"}, nil)
	require.Equal(t, Conflict, d.Verdict)

	restarted := tb.clone()
	require.True(t, restarted.DetachAll())
	c := restarted.Reattachable("t1", "issue.comment", "sha256:in")
	require.NotNil(t, c)
	require.Equal(t, &o, c.Recorded)
	restarted.MarkAnswered(c.CallID, *c.Recorded)
	require.Len(t, restarted.Settled, 1, "settled once in the history")

	require.NoError(t, tb.Add(&Call{CallID: "call_2", OperationID: "issue.comment", InputDigest: "sha256:in", TurnID: "t2"}))
	require.Nil(t, tb.Find("call_1"), "its turn is over")
	_, ok := tb.findSettled("call_1")
	require.True(t, ok)
}
