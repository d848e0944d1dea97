package catalog

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pcrunner/pcrunner/internal/testutil/sharedtest"
)

const finishBase = `{"reportedWorkDisposition":"completed","summary":"Did it.",
 "completionClaim":{"contractRevision":"r1","objectiveSatisfied":true,
   "criteria":[{"criterionId":"c1","status":"pass","evidenceRefs":["e1"]},{"criterionId":"c2","status":"incomplete","evidenceRefs":[]}],
   "remainingWork":[]},
 "evidence":[{"kind":"log"}],
 "verification":[{"commandOrCheck":"go test","status":"success"},{"commandOrCheck":"lint","status":"skipped","reasonCode":"n/a"}]}`

const blockBase = `{"reportedWorkDisposition":"blocked","summary":"Stuck.",
 "completionClaim":{"contractRevision":"r1","objectiveSatisfied":false,"criteria":[],"remainingWork":[{"description":"all","blocksCompletion":true}]},
 "evidence":[],"verification":[],
 "blocker":{"reasonCode":"needs_access","owner":{"kind":"user","name":"ops"},"unblockAction":"grant access","scope":"task_wide"}}`

// TestNormalizeResultAliases is §4 and §9 scenario 10's normalisation: the
// aliases become the schema's values and the defaults are filled in.
func TestNormalizeResultAliases(t *testing.T) {
	out, err := NormalizeResult(FinishTool, json.RawMessage(finishBase))
	if err != nil {
		t.Fatalf("NormalizeResult: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	claim := got["completionClaim"].(map[string]any)
	crit := claim["criteria"].([]any)
	ver := got["verification"].([]any)
	checks := map[string]any{
		"schema":      got["schema"],
		"disposition": got["reportedWorkDisposition"],
		"c1":          crit[0].(map[string]any)["status"],
		"c2":          crit[1].(map[string]any)["status"],
		"v1":          ver[0].(map[string]any)["status"],
		"v2":          ver[1].(map[string]any)["status"],
		"reasonCode":  ver[1].(map[string]any)["reasonCode"],
	}
	want := map[string]any{"schema": runResultSchema, "disposition": "done", "c1": "satisfied", "c2": "not_satisfied", "v1": "passed", "v2": "not_run", "reasonCode": "n/a"}
	for k, w := range want {
		if checks[k] != w {
			t.Errorf("%s = %v, want %v", k, checks[k], w)
		}
	}
	if a, ok := got["attentionRequests"].([]any); !ok || len(a) != 0 {
		t.Errorf("attentionRequests = %v, want []", got["attentionRequests"])
	}
	if a, ok := got["artifacts"].([]any); !ok || len(a) != 0 {
		t.Errorf("artifacts = %v, want []", got["artifacts"])
	}
	// Canonical: sorted keys, compact; normalising again changes nothing.
	again, err := NormalizeResult(FinishTool, out)
	if err != nil || !bytes.Equal(again, out) {
		t.Fatalf("not a fixed point: %s vs %s (%v)", again, out, err)
	}
	if !bytes.HasPrefix(out, []byte(`{"artifacts":[],"attentionRequests":[],"completionClaim":`)) {
		t.Fatalf("not canonical: %.80s", out)
	}
	for _, alias := range []string{FinishTool, "paperclip_paperclip_finish", "paperclip_finish.v1", runResultSchema} {
		in := strings.Replace(finishBase, `{"reportedWorkDisposition"`, `{"schema":"`+alias+`","reportedWorkDisposition"`, 1)
		if _, err := NormalizeResult(FinishTool, json.RawMessage(in)); err != nil {
			t.Errorf("schema alias %s: %v", alias, err)
		}
	}
	if _, err := NormalizeResult(BlockTool, json.RawMessage(blockBase)); err != nil {
		t.Fatalf("block: %v", err)
	}
}

// TestNormalizeResultRefuses is §9 scenario 11: paperclip_block without a
// blocker, paperclip_finish with "blocked", and the schema's own errors.
func TestNormalizeResultRefuses(t *testing.T) {
	set := func(base, from, to string) string { return strings.Replace(base, from, to, 1) }
	cases := []struct{ tool, in, want string }{
		{BlockTool, set(blockBase, `"blocker":`, `"notBlocker":`), `at the root: missing property "blocker"`},
		{FinishTool, set(finishBase, `"completed"`, `"blocked"`), `at the root: missing property "blocker"`},
		{FinishTool, set(set(finishBase, `"completed"`, `"blocked"`), `"evidence":`, `"blocker":{"reasonCode":"x","owner":{},"unblockAction":"y","scope":"task_wide"},"evidence":`), `"blocked" is reported through paperclip_block`},
		{BlockTool, set(blockBase, `"blocked"`, `"done"`), `paperclip_block reports only "blocked"`},
		{FinishTool, set(finishBase, `"completed"`, `"yielded"`), `at the root: missing property "continuation"`},
		{FinishTool, set(finishBase, `"Did it."`, `""`), `at "/summary": length must be >= 1`},
		{FinishTool, set(finishBase, `"Did it."`, `"`+strings.Repeat("x", maxSummary+1)+`"`), `at "/summary": length must be <= 12000`},
		{FinishTool, set(finishBase, `"pass"`, `"SECRETSTATUS"`), `at "/completionClaim/criteria/0/status": value is not one of the allowed values`},
		{FinishTool, set(finishBase, `"completed"`, `"unknown"`), `at "/reportedWorkDisposition": value is not one of the allowed values`},
		{FinishTool, set(finishBase, `{"reportedWorkDisposition"`, `{"schema":"v2","reportedWorkDisposition"`), `at "/schema": value is not the allowed constant`},
		{FinishTool, `[]`, `at the root: got array, want object`},
		{FinishTool, `{`, `the input is not JSON`},
		{FinishTool, finishBase + `]`, `the input is not JSON`},
		{FinishTool, finishBase + ` {}`, `the input is not JSON`},
		{"other", `{}`, `"other" is not a result tool`},
	}
	for _, tc := range cases {
		_, err := NormalizeResult(tc.tool, json.RawMessage(tc.in))
		if err == nil {
			t.Errorf("NormalizeResult(%s, %.60s) accepted", tc.tool, tc.in)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NormalizeResult(%s, %.60s) = %q, want %q", tc.tool, tc.in, err, tc.want)
		}
		if strings.Contains(err.Error(), "SECRET") {
			t.Errorf("error quotes the value: %q", err)
		}
	}
	out, err := NormalizeResult(FinishTool, json.RawMessage(set(finishBase, `"completed"`, `"yielded"`)[:len(finishBase)-1+len(`"yielded"`)-len(`"completed"`)]+`,"continuation":{"kind":"response_wake","summary":"s","idempotencyKey":"k"}}`))
	if err != nil || !bytes.Contains(out, []byte(`"reportedWorkDisposition":"yielded"`)) {
		t.Fatalf("yielded with continuation: %v", err)
	}
}

// shareResultSchema compiles the share's result.schema.json, loaded by path.
func shareResultSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	p := sharedtest.Path(t, "reference", "paperclip-protocol", "schemas", "result.schema.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(p, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// resultVariants is a spread of run results, valid and not, normalised or
// hand-made, for the agreement tests.
func resultVariants() []string {
	full := `{"schema":"paperclip.run_result.v1","reportedWorkDisposition":"done","summary":"s","completionClaim":{"contractRevision":"r","objectiveSatisfied":true,"criteria":[],"remainingWork":[]},"evidence":[],"verification":[],"attentionRequests":[],"artifacts":[]}`
	r := func(from, to string) string { return strings.Replace(full, from, to, 1) }
	return []string{
		full, `{}`, `[]`, `"x"`, `null`,
		r(`"done"`, `"needs_review"`), r(`"done"`, `"blocked"`), r(`"done"`, `"yielded"`), r(`"done"`, `"unknown"`),
		r(`"done"`, `"blocked"`) + "", r(`"artifacts":[]`, `"artifacts":[],"blocker":{"reasonCode":"a","owner":{},"unblockAction":"b","scope":"task_wide"}`),
		r(`"done","summary"`, `"blocked","blocker":{"reasonCode":"a","owner":{},"unblockAction":"b","scope":"task_wide"},"summary"`),
		r(`"done","summary"`, `"blocked","blocker":{"reasonCode":"","owner":{},"unblockAction":"b","scope":"task_wide"},"summary"`),
		r(`"done","summary"`, `"blocked","blocker":{"reasonCode":"a","owner":[],"unblockAction":"b","scope":"task_wide"},"summary"`),
		r(`"done","summary"`, `"blocked","blocker":{"reasonCode":"a","owner":{},"unblockAction":"b","scope":"everywhere"},"summary"`),
		r(`"done","summary"`, `"yielded","continuation":{"kind":"retry","summary":"x","idempotencyKey":"k"},"summary"`),
		r(`"done","summary"`, `"yielded","continuation":{"kind":"later","summary":"x","idempotencyKey":"k"},"summary"`),
		r(`"done","summary"`, `"done","continuation":{"kind":"retry","summary":"","idempotencyKey":"k"},"summary"`),
		r(`"summary":"s"`, `"summary":""`), r(`"summary":"s"`, `"summary":"`+strings.Repeat("é", 12000)+`"`),
		r(`"summary":"s"`, `"summary":"`+strings.Repeat("😀", 12001)+`"`), r(`"summary":"s"`, `"summary":7`),
		r(`"schema":"paperclip.run_result.v1"`, `"schema":"paperclip_finish"`),
		r(`"schema":"paperclip.run_result.v1",`, ``), r(`,"artifacts":[]`, ``), r(`,"attentionRequests":[]`, ``),
		r(`"criteria":[]`, `"criteria":[{"criterionId":"c","status":"satisfied","evidenceRefs":[]}]`),
		r(`"criteria":[]`, `"criteria":[{"criterionId":"c","status":"pass","evidenceRefs":[]}]`),
		r(`"criteria":[]`, `"criteria":[{"criterionId":"","status":"unknown","evidenceRefs":[]}]`),
		r(`"criteria":[]`, `"criteria":[{"criterionId":"c","status":"unknown","evidenceRefs":[1]}]`),
		r(`"criteria":[]`, `"criteria":[{"criterionId":"c","status":"unknown","evidenceRefs":[],"explanation":3}]`),
		r(`"criteria":[]`, `"criteria":[{"criterionId":"c","status":"unknown"}]`),
		r(`"remainingWork":[]`, `"remainingWork":[{"description":"d","blocksCompletion":false,"x":1}]`),
		r(`"remainingWork":[]`, `"remainingWork":[{"description":"d","blocksCompletion":"no"}]`),
		r(`"objectiveSatisfied":true`, `"objectiveSatisfied":"yes"`), r(`"contractRevision":"r"`, `"contractRevision":""`),
		r(`"evidence":[]`, `"evidence":[1]`), r(`"evidence":[]`, `"evidence":[{}]`), r(`"evidence":[]`, `"evidence":{}`),
		r(`"verification":[]`, `"verification":[{"commandOrCheck":"c","status":"passed","detail":"d","artifactRef":"a"}]`),
		r(`"verification":[]`, `"verification":[{"commandOrCheck":"c","status":"success"}]`),
		r(`"verification":[]`, `"verification":[{"commandOrCheck":"c","status":"not_run","detail":1}]`),
		r(`"verification":[]`, `"verification":[{"status":"failed"}]`),
		r(`"attentionRequests":[]`, `"attentionRequests":[{"a":1}]`), r(`"attentionRequests":[]`, `"attentionRequests":["x"]`),
		r(`"artifacts":[]`, `"artifacts":[{"kind":"k","ref":"r","title":"t"}]`), r(`"artifacts":[]`, `"artifacts":[{"kind":"k"}]`),
		r(`"artifacts":[]`, `"artifacts":[{"kind":"k","ref":"r","title":5}]`),
		r(`"artifacts":[]`, `"artifacts":[],"extra":{"anything":true}`),
		r(`"completionClaim":{`, `"completionClaim":{"extra":1,`),
		r(`"completionClaim":{"contractRevision":"r","objectiveSatisfied":true,"criteria":[],"remainingWork":[]}`, `"completionClaim":{}`),
		finishBase, blockBase,
	}
}

func validBy(s *jsonschema.Schema, raw string) bool {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(raw))
	if err != nil {
		return false
	}
	return s.Validate(inst) == nil
}

// TestRunResultSchemaAgreesWithShare: our run result schema (written from §4's
// field list) and the share's result.schema.json accept and refuse the same
// results, raw and after NormalizeResult.
func TestRunResultSchemaAgreesWithShare(t *testing.T) {
	share := shareResultSchema(t)
	ours, err := runResultOnce()
	if err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for _, v := range resultVariants() {
		o, s := validBy(ours, v), validBy(share, v)
		if o != s {
			t.Errorf("ours=%v share=%v for %.120s", o, s, v)
		}
		for _, tool := range []string{FinishTool, BlockTool} {
			out, err := NormalizeResult(tool, json.RawMessage(v))
			if err == nil {
				accepted++
				if !validBy(share, string(out)) {
					t.Errorf("NormalizeResult(%s) accepted what the share refuses: %.120s", tool, out)
				}
			} else if norm := normalizedText(v); norm != "" && validBy(share, norm) && !strings.Contains(err.Error(), "paperclip_block") && !strings.Contains(err.Error(), "through paperclip_block") {
				t.Errorf("NormalizeResult(%s) refused what the share accepts after normalising: %v: %.120s", tool, err, norm)
			}
		}
	}
	if accepted < 10 {
		t.Fatalf("only %d results accepted: the variants test little", accepted)
	}
}

// normalizedText applies only the alias/default step, for comparison.
func normalizedText(v string) string {
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(v))
	d.UseNumber()
	if d.Decode(&m) != nil || m == nil {
		return ""
	}
	normalize(m)
	b, _ := json.Marshal(m)
	return string(b)
}

func TestReservedInputSchemasCompile(t *testing.T) {
	for _, tl := range reservedTools() {
		s, err := compileSchema(tl.Name, "input", tl.InputSchema)
		if err != nil {
			t.Fatalf("%s input schema: %v", tl.Name, err)
		}
		base := finishBase
		if tl.Name == BlockTool {
			base = blockBase
		}
		if !validBy(s, base) {
			t.Errorf("%s input schema refuses its own example", tl.Name)
		}
		if validBy(s, `{"summary":"x"}`) {
			t.Errorf("%s input schema accepts a result without its required fields", tl.Name)
		}
	}
}

func TestServerFeedback(t *testing.T) {
	long := strings.Repeat("é", maxFeedback+5)
	cases := []struct{ result, want string }{
		{`{"success":false,"contentItems":[{"type":"inputText","text":"Add evidence."}]}`, "Add evidence."},
		{`{"success":false,"contentItems":[{"type":"inputText","text":"` + long + `"}]}`, strings.Repeat("é", maxFeedback)},
		{`{"success":true,"contentItems":[{"type":"inputText","text":"x"}]}`, defaultFeedback},
		{`{"success":false,"contentItems":[{"type":"image","text":"x"}]}`, defaultFeedback},
		{`{"success":false,"contentItems":[]}`, defaultFeedback},
		{`{"success":false}`, defaultFeedback},
		{`{"error":"x"}`, defaultFeedback},
		{`{"SUCCESS":false,"contentItems":[{"type":"inputText","text":"x"}]}`, defaultFeedback},
		{`{"success":false,"contentItems":[{"type":"inputText","text":7}]}`, defaultFeedback},
		{`{"success":false,"contentItems":[{"type":"inputText"}]}`, defaultFeedback},
		{`"text"`, defaultFeedback},
		{``, defaultFeedback},
	}
	for _, tc := range cases {
		if got := ServerFeedback(json.RawMessage(tc.result)); got != tc.want {
			t.Errorf("ServerFeedback(%.60s) = %.60q, want %.60q", tc.result, got, tc.want)
		}
	}
}
