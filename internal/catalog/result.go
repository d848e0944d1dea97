package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/quote"
)

// Run result names and bounds (tools.md §4; the share's result.schema.json,
// paperclip.run_result.v1).
const (
	// runResultSchema is the run result's schema name.
	runResultSchema = "paperclip.run_result.v1"
	// maxSummary bounds summary in characters (code points, as JSON Schema
	// counts; runner-core MAX_COMPLETION_SUMMARY_CHARS).
	maxSummary = 12_000
	// maxFeedback is where ServerFeedback cuts the server's text (§4), in
	// UTF-16 units.
	maxFeedback = 2000
	// defaultFeedback is the rejected-result text when the server gave none
	// (§4).
	defaultFeedback = "Paperclip semantic operation failed"
	// finishDescription and blockDescription are the reserved tools'
	// tools/list descriptions (§4).
	finishDescription = "Return the semantic completion result."
	blockDescription  = "Return the semantic blocked result."
)

// Dispositions of a run result (result.schema.json reportedWorkDisposition).
const (
	dispositionDone        = "done"
	dispositionBlocked     = "blocked"
	dispositionNeedsReview = "needs_review"
	dispositionYielded     = "yielded"
)

// The aliases §4 normalises.
var (
	schemaAliases      = map[string]bool{FinishTool: true, "paperclip_paperclip_finish": true, "paperclip_finish.v1": true}
	dispositionAliases = map[string]string{"completed": dispositionDone, "complete": dispositionDone}
	criterionAliases   = map[string]string{
		"pass": "satisfied", "passed": "satisfied", "complete": "satisfied", "completed": "satisfied",
		"fail": "not_satisfied", "failed": "not_satisfied", "incomplete": "not_satisfied",
	}
	verificationAliases = map[string]string{
		"pass": "passed", "success": "passed", "succeeded": "passed", "fail": "failed",
		"blocked": "not_run", "skipped": "not_run",
	}
)

// The schema builders below write the run result's field list (§4) once;
// the run result schema and the two advertised input schemas differ only by
// the aliases the input side also accepts.
type jobj = map[string]any

func openObject(required []string, props jobj) jobj {
	o := jobj{"type": "object", "properties": props, "additionalProperties": true}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

func nonEmptyString() jobj   { return jobj{"type": "string", "minLength": 1} }
func arrayOf(items any) jobj { return jobj{"type": "array", "items": items} }
func oneOfValues(vals ...string) jobj {
	e := make([]any, len(vals))
	for i, v := range vals {
		e[i] = v
	}
	return jobj{"enum": e}
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sortStrings(out)
	return out
}

// resultSchema builds the run result schema; with input set, the reserved
// tool's permissive input schema for tool.
func resultSchema(input bool, tool string) jobj {
	criterionStatus := []string{"satisfied", "not_satisfied", "unknown"}
	verificationStatus := []string{"passed", "failed", "not_run"}
	disposition := []string{dispositionDone, dispositionBlocked, dispositionNeedsReview, dispositionYielded}
	schemaProp := jobj{"const": runResultSchema}
	if input {
		criterionStatus = append(criterionStatus, keysOf(criterionAliases)...)
		verificationStatus = append(verificationStatus, keysOf(verificationAliases)...)
		schemaProp = oneOfValues(runResultSchema, FinishTool, "paperclip_paperclip_finish", "paperclip_finish.v1")
		disposition = []string{dispositionDone, dispositionNeedsReview, dispositionYielded, "completed", "complete"}
		if tool == BlockTool {
			disposition = []string{dispositionBlocked}
		}
	}
	owner := jobj{"type": "object", "additionalProperties": true}
	if input {
		owner = openObject(nil, jobj{"kind": oneOfValues("agent", "user", "system", "external"), "name": jobj{"type": "string"}})
	}
	props := jobj{
		"schema":                  schemaProp,
		"reportedWorkDisposition": oneOfValues(disposition...),
		"summary":                 jobj{"type": "string", "minLength": 1, "maxLength": maxSummary},
		"completionClaim": openObject([]string{"contractRevision", "objectiveSatisfied", "criteria", "remainingWork"}, jobj{
			"contractRevision":   nonEmptyString(),
			"objectiveSatisfied": jobj{"type": "boolean"},
			"criteria": arrayOf(openObject([]string{"criterionId", "status", "evidenceRefs"}, jobj{
				"criterionId":  nonEmptyString(),
				"status":       oneOfValues(criterionStatus...),
				"evidenceRefs": arrayOf(jobj{"type": "string"}),
				"explanation":  jobj{"type": "string"},
			})),
			"remainingWork": arrayOf(openObject([]string{"description", "blocksCompletion"}, jobj{
				"description":      nonEmptyString(),
				"blocksCompletion": jobj{"type": "boolean"},
			})),
		}),
		"evidence": arrayOf(jobj{"type": "object"}),
		"verification": arrayOf(openObject([]string{"commandOrCheck", "status"}, jobj{
			"commandOrCheck": nonEmptyString(),
			"status":         oneOfValues(verificationStatus...),
			"detail":         jobj{"type": "string"},
			"artifactRef":    jobj{"type": "string"},
		})),
		"blocker": openObject([]string{"reasonCode", "owner", "unblockAction", "scope"}, jobj{
			"reasonCode":    nonEmptyString(),
			"owner":         owner,
			"unblockAction": nonEmptyString(),
			"scope":         oneOfValues("current_track", "task_wide"),
		}),
		"attentionRequests": arrayOf(jobj{"type": "object"}),
		"artifacts": arrayOf(openObject([]string{"kind", "ref"}, jobj{
			"kind":  nonEmptyString(),
			"ref":   nonEmptyString(),
			"title": jobj{"type": "string"},
		})),
		"continuation": openObject([]string{"kind", "summary", "idempotencyKey"}, jobj{
			"kind":           oneOfValues("same_agent", "retry", "delegated_issue", "response_wake", "monitor"),
			"summary":        nonEmptyString(),
			"idempotencyKey": nonEmptyString(),
		}),
	}
	required := []string{"schema", "reportedWorkDisposition", "summary", "completionClaim", "evidence", "verification", "attentionRequests", "artifacts"}
	if input {
		// schema, attentionRequests and artifacts are defaulted (§4).
		required = []string{"reportedWorkDisposition", "summary", "completionClaim", "evidence", "verification"}
		if tool == BlockTool {
			required = append(required, "blocker")
		}
	}
	when := func(disp, field string) jobj {
		return jobj{
			"if":   jobj{"properties": jobj{"reportedWorkDisposition": jobj{"const": disp}}},
			"then": jobj{"required": []string{field}},
		}
	}
	s := openObject(required, props)
	if !input {
		// The advertised input schemas name no dialect (2020-12 by default
		// here); agents' model APIs differ in what $schema they take.
		s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	}
	s["allOf"] = []any{when(dispositionBlocked, "blocker"), when(dispositionYielded, "continuation")}
	return s
}

var (
	reservedOnce = sync.OnceValue(func() []tool {
		return []tool{
			{Name: FinishTool, Description: finishDescription, InputSchema: mustJSON(resultSchema(true, FinishTool))},
			{Name: BlockTool, Description: blockDescription, InputSchema: mustJSON(resultSchema(true, BlockTool))},
		}
	})
	runResultOnce = sync.OnceValues(func() (*jsonschema.Schema, error) {
		raw := mustJSON(resultSchema(false, ""))
		return compileSchema("run-result", "result", raw)
	})
)

func reservedTools() []tool { return reservedOnce() }

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // static schema
	}
	return b
}

// runResultSchemaJSON is the run result schema NormalizeResult validates
// against (written from §4's field list; tests check it agrees with the
// share's result.schema.json).
func runResultSchemaJSON() json.RawMessage { return mustJSON(resultSchema(false, "")) }

// NormalizeResult is §4 for FinishTool and BlockTool: it normalises the
// aliases (schema, disposition, criterion and verification status) and the
// defaults (attentionRequests, artifacts: []), validates the result against
// the run result schema, and checks the disposition against the tool
// (blocked only, and always, through BlockTool). It returns the normalised
// input as canonical JSON. The error is the tool error's text: the first
// schema error (instance path and keyword, never the value) or the mismatch.
func NormalizeResult(tool string, input json.RawMessage) (json.RawMessage, error) {
	if tool != FinishTool && tool != BlockTool {
		return nil, fmt.Errorf("%s is not a result tool", quote.Text(tool))
	}
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errors.New("the input is not JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("the input is not JSON")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("at the root: got " + jsonType(v) + ", want object")
	}
	normalize(m)
	canon, err := prp.Canonical(m)
	if err != nil {
		if errors.Is(err, prp.ErrCanonicalTooLarge) {
			return nil, fmt.Errorf("the result is too large (more than %d values or %d levels)", prp.MaxCanonicalNodes, prp.MaxCanonicalDepth)
		}
		return nil, errors.New("the input is not JSON")
	}
	sch, err := runResultOnce()
	if err != nil {
		return nil, fmt.Errorf("compile run result schema: %w", err)
	}
	if msg, ok := validate(sch, canon); !ok {
		return nil, errors.New(msg)
	}
	disp, _ := m["reportedWorkDisposition"].(string)
	switch {
	case tool == BlockTool && disp != dispositionBlocked:
		return nil, errors.New(`at "/reportedWorkDisposition": paperclip_block reports only "blocked"`)
	case tool == FinishTool && disp == dispositionBlocked:
		return nil, errors.New(`at "/reportedWorkDisposition": "blocked" is reported through paperclip_block`)
	}
	return canon, nil
}

// normalize rewrites m's aliases and defaults in place (§4).
func normalize(m map[string]any) {
	if s, ok := m["schema"]; !ok || s == nil {
		m["schema"] = runResultSchema
	} else if str, ok := s.(string); ok && schemaAliases[str] {
		m["schema"] = runResultSchema
	}
	if d, ok := m["reportedWorkDisposition"].(string); ok {
		if to, ok := dispositionAliases[d]; ok {
			m["reportedWorkDisposition"] = to
		}
	}
	if claim, ok := m["completionClaim"].(map[string]any); ok {
		aliasStatuses(claim["criteria"], criterionAliases)
	}
	aliasStatuses(m["verification"], verificationAliases)
	for _, k := range []string{"attentionRequests", "artifacts"} {
		if v, ok := m[k]; !ok || v == nil {
			m[k] = []any{}
		}
	}
}

func aliasStatuses(list any, aliases map[string]string) {
	items, _ := list.([]any)
	for _, it := range items {
		o, ok := it.(map[string]any)
		if !ok {
			continue
		}
		if s, ok := o["status"].(string); ok {
			if to, ok := aliases[s]; ok {
				o["status"] = to
			}
		}
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	default:
		return "object"
	}
}

// ServerFeedback is §4's rejected-result text: result.contentItems[0].text,
// cut to maxFeedback UTF-16 units, when result is {success: false,
// contentItems: [{type: "inputText", text}]} with a non-empty text; else
// defaultFeedback.
func ServerFeedback(result json.RawMessage) string {
	// Member names match exactly (encoding/json's struct decoding would
	// also take "SUCCESS").
	var r map[string]json.RawMessage
	if json.Unmarshal(result, &r) != nil || string(bytes.TrimSpace(r["success"])) != "false" {
		return defaultFeedback
	}
	var items []map[string]json.RawMessage
	if json.Unmarshal(r["contentItems"], &items) != nil || len(items) == 0 {
		return defaultFeedback
	}
	var typ, text string
	if json.Unmarshal(items[0]["type"], &typ) != nil || typ != "inputText" ||
		json.Unmarshal(items[0]["text"], &text) != nil || text == "" {
		return defaultFeedback
	}
	return cutUTF16(text, maxFeedback)
}
