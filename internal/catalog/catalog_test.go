package catalog

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// catalogJSON builds authorizedTools for ops with the right digest.
func catalogJSON(t testing.TB, ops []Operation) json.RawMessage {
	t.Helper()
	d := Digest(ops)
	if d == "" {
		t.Fatal("Digest failed")
	}
	return withDigest(t, ops, d)
}

func withDigest(t testing.TB, ops []Operation, digest string) json.RawMessage {
	t.Helper()
	if ops == nil {
		ops = []Operation{}
	}
	b, err := json.Marshal(map[string]any{"schema": Schema, "schemaVersion": 1, "catalogDigest": digest, "operations": ops})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func op(id, in string) Operation {
	return Operation{OperationID: id, Version: 1, Description: "Do " + id + ".", InputSchema: json.RawMessage(in), ResponseSchema: json.RawMessage(`{"type":"object"}`)}
}

const taskSchema = `{"type":"object","required":["taskId"],"properties":{"taskId":{"type":"string","pattern":"^T-\\d+$"},"body":{"type":"string","maxLength":20}},"additionalProperties":false}`

func mustParse(t testing.TB, ops []Operation) *Catalog {
	t.Helper()
	c, err := Parse(catalogJSON(t, ops))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func TestParseEmpty(t *testing.T) {
	empty := Digest(nil)
	if empty != emptyDigest || empty != sha256Text("[]") {
		t.Fatalf("empty digest %s", empty)
	}
	for _, raw := range []string{"", "null", " null "} {
		c, err := Parse(json.RawMessage(raw))
		if err != nil || c.Len() != 0 || c.Digest() != empty {
			t.Fatalf("Parse(%q) = %v, %v", raw, c, err)
		}
		if tools := c.Tools(); len(tools) != 2 || tools[0].Name != FinishTool || tools[1].Name != BlockTool {
			t.Fatalf("empty catalog tools %+v", tools)
		}
	}
	c, err := Parse(withDigest(t, nil, empty))
	if err != nil || c.Len() != 0 {
		t.Fatalf("explicit empty: %v", err)
	}
}

// TestParseRefuses is tools.md §9 scenario 1's catalog half: each bad catalog
// is refused with a message that names the problem, never the tool text.
func TestParseRefuses(t *testing.T) {
	good := op("tasks.get", taskSchema)
	many := make([]Operation, MaxOperations+1)
	for i := range many {
		many[i] = op(fmt.Sprintf("op%d", i), `{}`)
	}
	secretDesc := op("leaky", `{"type":"object"}`)
	secretDesc.Description = "TOPSECRET-DESCRIPTION"
	cases := []struct {
		name string
		raw  json.RawMessage
		want string
	}{
		{"not object", json.RawMessage(`[1]`), "not a JSON object"},
		{"bad schema name", json.RawMessage(`{"schema":"x","schemaVersion":1,"catalogDigest":"` + Digest(nil) + `","operations":[]}`), "schema is not"},
		{"bad version", json.RawMessage(`{"schema":"` + Schema + `","schemaVersion":2,"catalogDigest":"` + Digest(nil) + `","operations":[]}`), "schemaVersion"},
		{"no digest", json.RawMessage(`{"schema":"` + Schema + `","schemaVersion":1,"operations":[]}`), "catalogDigest is not"},
		{"bad digest", withDigest(t, []Operation{secretDesc}, Digest([]Operation{good})), "does not match"},
		{"257 ops", catalogJSON(t, many), "257 operations"},
		{"bad id", catalogJSON(t, []Operation{op("-bad", `{}`)}), "operation 0 has no valid operationId"},
		{"id with space", catalogJSON(t, []Operation{op("a b", `{}`)}), "no valid operationId"},
		{"long id", catalogJSON(t, []Operation{op(strings.Repeat("a", maxOperationIDLen+1), `{}`)}), "no valid operationId"},
		{"duplicate", catalogJSON(t, []Operation{good, good}), `"tasks.get" appears twice`},
		{"op version", catalogJSON(t, []Operation{{OperationID: "x", Version: 2, Description: "d", InputSchema: json.RawMessage(`{}`), ResponseSchema: json.RawMessage(`{}`)}}), `"x": version is not 1`},
		{"empty description", catalogJSON(t, []Operation{{OperationID: "x", Version: 1, InputSchema: json.RawMessage(`{}`), ResponseSchema: json.RawMessage(`{}`)}}), "description is empty"},
		{"long description", catalogJSON(t, []Operation{{OperationID: "x", Version: 1, Description: strings.Repeat("é", maxDescription/2+1), InputSchema: json.RawMessage(`{}`), ResponseSchema: json.RawMessage(`{}`)}}), "description is longer"},
		{"schema not object", catalogJSON(t, []Operation{op("x", `true`)}), `"x": inputSchema is not a JSON object`},
		{"schema not compiling", catalogJSON(t, []Operation{op("x", `{"type":"TOPSECRET"}`)}), `"x": inputSchema does not compile: it is not valid against its metaschema`},
		{"bad pattern", catalogJSON(t, []Operation{op("x", `{"type":"string","pattern":"(TOPSECRET"}`)}), `"x": inputSchema does not compile`},
		{"external ref", catalogJSON(t, []Operation{op("x", `{"$ref":"https://example.com/TOPSECRET.json"}`)}), "refers outside its own document"},
		{"file ref", catalogJSON(t, []Operation{op("x", `{"$ref":"file:///etc/passwd"}`)}), "refers outside its own document"},
		{"other op ref", catalogJSON(t, []Operation{op("a", `{}`), op("x", `{"$ref":"urn:paperclip:op:a:input"}`)}), "refers outside its own document"},
		{"unknown $schema", catalogJSON(t, []Operation{op("x", `{"$schema":"https://example.com/TOPSECRET"}`)}), `"x": inputSchema does not compile`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.raw)
			if err == nil {
				t.Fatal("Parse accepted a bad catalog")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "TOPSECRET") || strings.Contains(err.Error(), "passwd") {
				t.Fatalf("error quotes tool text: %q", err)
			}
		})
	}
}

func TestParseDigestMismatchNamesBoth(t *testing.T) {
	ops := []Operation{op("b", `{}`), op("a", `{}`)}
	other := Digest([]Operation{op("c", `{}`)})
	_, err := Parse(withDigest(t, ops, other))
	if err == nil || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), Digest(ops)) {
		t.Fatalf("error %v should name %s and %s", err, other, Digest(ops))
	}
}

// TestDigestIsOrderFreeAndCanonical: the digest sorts the operations by id
// and hashes canonical JSON, so key order, whitespace and number spelling in
// the schemas do not change it, while any field does.
func TestDigestIsOrderFreeAndCanonical(t *testing.T) {
	a := op("a", `{"type":"object","properties":{"n":{"maximum":1.50}}}`)
	a2 := op("a", ` { "properties" : {"n":{"maximum":15e-1}}, "type":"object"}`)
	b := op("b", `{}`)
	if Digest([]Operation{a, b}) != Digest([]Operation{b, a2}) {
		t.Fatal("digest depends on order or spelling")
	}
	changed := b
	changed.Description += "!"
	if Digest([]Operation{a, b}) == Digest([]Operation{a, changed}) {
		t.Fatal("digest ignores the description")
	}
	// The hashed text, spelled out: sorted keys, sorted operations.
	want := Digest(nil)
	_ = want
}

func TestDigestVector(t *testing.T) {
	// Recomputed independently: sha256 over the canonical text below.
	ops := []Operation{op("z.op", `{"b":1,"a":"é\u2028"}`), op("a:op", `{}`)}
	text := `[{"description":"Do a:op.","inputSchema":{},"operationId":"a:op","responseSchema":{"type":"object"},"version":1},` +
		`{"description":"Do z.op.","inputSchema":{"a":"é` + "\u2028" + `","b":1},"operationId":"z.op","responseSchema":{"type":"object"},"version":1}]`
	if got, want := Digest(ops), sha256Text(text); got != want {
		t.Fatalf("Digest = %s, want %s", got, want)
	}
}

func TestReservedNamesDroppedButDigested(t *testing.T) {
	ops := []Operation{op("tasks.get", taskSchema), op(FinishTool, `{"type":"object"}`), op("finish", `{}`)}
	c := mustParse(t, ops)
	if c.Len() != 2 {
		t.Fatalf("Len = %d, want 2", c.Len())
	}
	if c.Digest() != Digest(ops) {
		t.Fatal("digest should cover the reserved operation as sent")
	}
	var names []string
	for _, tl := range c.Tools() {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); got != "finish,tasks.get,paperclip_finish,paperclip_block" {
		t.Fatalf("tools %s", got)
	}
	if id, ok := c.Resolve(FinishTool); !ok || id != FinishTool {
		t.Fatalf("Resolve(paperclip_finish) = %q, %v; a catalog op 'finish' must not shadow it", id, ok)
	}
}

func TestResolve(t *testing.T) {
	c := mustParse(t, []Operation{op("tasks.get", taskSchema), op("x", `{}`)})
	cases := map[string]string{
		"tasks.get":               "tasks.get",
		"paperclip__tasks.get":    "tasks.get",
		"paperclip_tasks.get":     "tasks.get",
		"paperclip.tasks.get":     "tasks.get",
		"paperclip__x":            "x",
		"paperclip_block":         BlockTool,
		"paperclip_finish":        FinishTool,
		"paperclip__paperclip_x":  "",
		"paperclip__paperclip__x": "",
		"tasks.get\x00":           "",
		"tasks\nget":              "",
		"tasks.get\u0085":         "",
		"nope":                    "",
		"":                        "",
		"\xff":                    "",
	}
	for name, want := range cases {
		got, ok := c.Resolve(name)
		if ok != (want != "") || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

func TestToolsCutsDescription(t *testing.T) {
	long := op("long", `{ "type" : "object" }`)
	long.Description = strings.Repeat("a", listedDescription-1) + "😀tail"
	c := mustParse(t, []Operation{long})
	tl := c.Tools()[0]
	if tl.Description != strings.Repeat("a", listedDescription-1) {
		t.Fatalf("cut description has %d bytes", len(tl.Description))
	}
	if string(tl.InputSchema) != `{"type":"object"}` {
		t.Fatalf("listed schema %s", tl.InputSchema)
	}
	fin := c.Tools()[1]
	if fin.Name != FinishTool || fin.Description != finishDescription {
		t.Fatalf("finish tool %+v", fin)
	}
	if c.Tools()[2].Description != blockDescription {
		t.Fatal("block description")
	}
}

func TestValidateInput(t *testing.T) {
	c := mustParse(t, []Operation{op("tasks.get", taskSchema), op("u", `{"type":"string","pattern":"^(?:\\u{1F600}|.)$"}`),
		op("d7", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"when":{"type":"string","format":"date-time"},"id":{"type":"string","pattern":"^(?<n>[a-z]+)\\k<n>$"}},"definitions":{"x":{"type":"integer"}},"additionalProperties":{"$ref":"#/definitions/x"}}`)})
	cases := []struct {
		op, args, want string
	}{
		{"tasks.get", `{"taskId":"T-12"}`, ""},
		{"tasks.get", ``, `at the root: missing property "taskId"`},
		{"tasks.get", `{"taskId":"SECRETVALUE"}`, `at "/taskId": value does not match the pattern`},
		{"tasks.get", `{"taskId":"T-1","body":"SECRETVALUE-SECRETVALUE"}`, `at "/body": length must be <= 20`},
		{"tasks.get", `{"taskId":"T-1","extra":1}`, `at the root: additional property "extra" not allowed`},
		{"tasks.get", `{"taskId":7}`, `at "/taskId": got number, want string`},
		{"tasks.get", `[`, "the value is not JSON"},
		{"tasks.get", `{"taskId":"T-1"} {}`, "the value is not JSON"},
		{"d7", `{"when":"not a date"}`, ""}, // formats are not asserted, as Ajv without ajv-formats
		{"d7", `{"id":"abab"}`, ""},         // ECMAScript named backreference
		{"u", `"😀"`, ""},                    // the u flag: \u{...} and one astral character for "."
		{"u", `"😀😀"`, `at the root: value does not match the pattern`},
		{"d7", `{"id":"abcd"}`, `at "/id": value does not match the pattern`},
		{"d7", `{"n":1.5}`, `at "/n": got number, want integer`},
		{"nope", `{}`, `unknown operation "nope"`},
		{FinishTool, `{}`, `unknown operation "paperclip_finish"`},
	}
	for _, tc := range cases {
		err := c.ValidateInput(tc.op, json.RawMessage(tc.args))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("ValidateInput(%s, %s) = %q, want %q", tc.op, tc.args, got, tc.want)
		}
		if strings.Contains(got, "SECRETVALUE") {
			t.Errorf("error quotes the value: %q", got)
		}
	}
}

// TestValidateInputFirstErrorIsStable: several failing properties give the
// same first error every time (the library visits properties in map order).
func TestValidateInputFirstErrorIsStable(t *testing.T) {
	c := mustParse(t, []Operation{op("m", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"},"d":{"type":"string"}}}`)})
	for range 50 {
		err := c.ValidateInput("m", json.RawMessage(`{"d":1,"c":1,"b":1,"a":1}`))
		if err == nil || err.Error() != `at "/a": got number, want string` {
			t.Fatalf("first error %v", err)
		}
	}
}

func TestPatternTimeout(t *testing.T) {
	c := mustParse(t, []Operation{op("slow", `{"type":"string","pattern":"^(a+)+$"}`)})
	err := c.ValidateInput("slow", json.RawMessage(`"`+strings.Repeat("a", 40)+`!"`))
	if err == nil || !strings.Contains(err.Error(), "does not match the pattern") {
		t.Fatalf("catastrophic pattern: %v", err)
	}
}

func TestValidateResult(t *testing.T) {
	o := op("t", `{}`)
	o.ResponseSchema = json.RawMessage(`{"type":"object","required":["id"]}`)
	c := mustParse(t, []Operation{o})
	cases := []struct{ result, want string }{
		{`{"id":1}`, ""},
		{`{"x":1}`, `the result does not match the responseSchema: at the root: missing property "id"`},
		{`{"ok":true,"operationId":"t","callId":"c1","result":{"id":1}}`, ""},
		{`{"ok":true,"operationId":"t","callId":"c1","value":{"id":1}}`, ""},
		{`{"ok":true,"operationId":"t","callId":"c1","result":{}}`, `the result does not match the responseSchema: at the root: missing property "id"`},
		{`{"ok":true,"operationId":"t","callId":"c1"}`, "the successful result envelope has no result or value"},
		{`{"ok":false,"operationId":"t","callId":"c1","denial":{"reason":"no"}}`, ""},
		{`{"ok":false,"operationId":"t","callId":"c1"}`, "the failed result envelope has no denial or error"},
		{`{"ok":true,"operationId":"other","callId":"c1","result":{"id":1}}`, "the result envelope's operationId is not the call's"},
		{`{"ok":true,"id":1}`, ""}, // no operationId/callId: not an envelope
	}
	for _, tc := range cases {
		err := c.ValidateResult("t", json.RawMessage(tc.result))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("ValidateResult(%s) = %q, want %q", tc.result, got, tc.want)
		}
	}
	if err := c.validateCallResult("t", "c2", json.RawMessage(`{"ok":true,"operationId":"t","callId":"c1","result":{"id":1}}`)); err == nil {
		t.Error("ValidateCallResult accepted another call's envelope")
	}
}

// TestCatalogConcurrentUse: a parsed catalog is shared by every bridge
// request; validation from many goroutines is race-free (run with -race).
func TestCatalogConcurrentUse(t *testing.T) {
	c := mustParse(t, []Operation{op("tasks.get", taskSchema)})
	done := make(chan error, 8)
	for i := range 8 {
		go func() {
			var err error
			for range 200 {
				ok := c.ValidateInput("tasks.get", json.RawMessage(`{"taskId":"T-1"}`))
				bad := c.ValidateInput("tasks.get", json.RawMessage(`{"taskId":"x"}`))
				if ok != nil || bad == nil {
					err = fmt.Errorf("goroutine %d: %v, %v", i, ok, bad)
				}
				_ = c.Tools()
				_, _ = c.Resolve("paperclip__tasks.get")
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestParseToleratesUnknownFields: fields the spec does not name, at the top
// and in an operation, are ignored by validation but hashed as sent only
// through the five digest fields.
func TestParseToleratesUnknownFields(t *testing.T) {
	ops := []Operation{op("a", `{}`)}
	raw := json.RawMessage(`{"schema":"` + Schema + `","schemaVersion":1,"future":true,"catalogDigest":"` + Digest(ops) +
		`","operations":[{"operationId":"a","version":1,"description":"Do a.","inputSchema":{},"responseSchema":{"type":"object"},"annotations":{"x":1}}]}`)
	c, err := Parse(raw)
	if err != nil || c.Len() != 1 {
		t.Fatalf("Parse: %v", err)
	}
}

// TestParseHonoursSchemaDialects: generated schemas name their dialect in
// $schema (draft-07 most often); each compiles under its own rules.
func TestParseHonoursSchemaDialects(t *testing.T) {
	for _, dialect := range []string{
		"http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-07/schema",
		"http://json-schema.org/draft-06/schema#", "http://json-schema.org/draft-04/schema#",
		"https://json-schema.org/draft/2019-09/schema", "https://json-schema.org/draft/2020-12/schema",
	} {
		// exclusiveMinimum is a boolean in draft-04 and a number after it.
		excl := `0`
		if strings.Contains(dialect, "draft-04") {
			excl = `true,"minimum":0`
		}
		s := `{"$schema":"` + dialect + `","type":"object","properties":{"n":{"type":"number","exclusiveMinimum":` + excl + `}}}`
		c, err := Parse(catalogJSON(t, []Operation{op("x", s)}))
		if err != nil {
			t.Errorf("%s: %v", dialect, err)
			continue
		}
		if err := c.ValidateInput("x", json.RawMessage(`{"n":0}`)); err == nil {
			t.Errorf("%s: exclusiveMinimum not applied", dialect)
		}
		if err := c.ValidateInput("x", json.RawMessage(`{"n":1}`)); err != nil {
			t.Errorf("%s: %v", dialect, err)
		}
	}
	// Draft-07 ignores keywords it does not know, such as 2020-12's
	// prefixItems; 2020-12 applies them.
	for dialect, wantErr := range map[string]bool{"http://json-schema.org/draft-07/schema#": false, "": true} {
		s := `{"type":"array","prefixItems":[{"type":"string"}]}`
		if dialect != "" {
			s = `{"$schema":"` + dialect + `","type":"array","prefixItems":[{"type":"string"}]}`
		}
		c := mustParse(t, []Operation{op("x", s)})
		if err := c.ValidateInput("x", json.RawMessage(`[1]`)); (err != nil) != wantErr {
			t.Errorf("dialect %q: prefixItems error %v, want error %v", dialect, err, wantErr)
		}
	}
}

// TestDigestMatchesIndependentVector: testdata/catalog-vector.json carries a
// catalogDigest computed outside Go (node: JSON.stringify over keys sorted
// with Array.prototype.sort, operations sorted by id, sha256): UTF-16 key
// order, JavaScript number spelling (1.0, -0, 1e21, 1e-7, 0.000001),
// U+2028, control escapes, unknown fields left out.
func TestDigestMatchesIndependentVector(t *testing.T) {
	raw, err := os.ReadFile("testdata/catalog-vector.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(raw)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	const want = "sha256:b6776a04d2e60e84b74f969f68d91fb519bc5230422c8bb602da194042caf8ed"
	if c.Digest() != want {
		t.Fatalf("digest %s, want %s", c.Digest(), want)
	}
}

// TestFlatNames: a model API that allows only [A-Za-z0-9_-] in tool names
// (Codex's dynamicTools refuse "issue.comment") gets the flat name, which
// Resolve maps back; an ambiguous flat name maps to nothing.
func TestFlatNames(t *testing.T) {
	var ops []Operation
	for _, id := range []string{"issue.comment", "task:update", "a.b", "a_b", "x.y", "x:y"} {
		ops = append(ops, op(id, `{"type":"object"}`))
	}
	c := mustParse(t, ops)
	for id, flat := range map[string]string{"issue.comment": "issue_comment", "task:update": "task_update", "a_b": "a_b"} {
		got, ok := c.FlatNameOf(id)
		require.True(t, ok, id)
		require.Equal(t, flat, got)
		back, ok := c.Resolve(flat)
		require.True(t, ok, flat)
		require.Equal(t, id, back)
	}
	_, ok := c.FlatNameOf("a.b") // "a_b" is an operation of its own
	require.False(t, ok)
	_, ok = c.FlatNameOf("x.y") // x.y and x:y both flatten to x_y
	require.False(t, ok)
	_, ok = c.Resolve("x_y")
	require.False(t, ok)
}
