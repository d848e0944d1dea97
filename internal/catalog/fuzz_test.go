package catalog

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// cleanError fails when an error message carries raw control bytes or is
// unbounded: messages go into command results and tool errors.
func cleanError(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if !utf8.ValidString(msg) || len(msg) > 2048 || strings.ContainsAny(msg, "\x00\n\r") {
		t.Fatalf("unclean error (%d bytes): %q", len(msg), msg)
	}
}

// FuzzParse: the catalog decoder never panics, its errors are clean, and an
// accepted catalog's digest is Digest of its operations, stable on reparse.
func FuzzParse(f *testing.F) {
	ops := []Operation{op("tasks.get", taskSchema), op(FinishTool, `{}`), op("d7", `{"$schema":"http://json-schema.org/draft-07/schema#","pattern":"^a"}`)}
	d := Digest(ops)
	good, _ := json.Marshal(map[string]any{"schema": Schema, "schemaVersion": 1, "catalogDigest": d, "operations": ops})
	f.Add(good)
	f.Add([]byte(`null`))
	f.Add([]byte(`{"schema":"` + Schema + `","schemaVersion":1,"catalogDigest":"` + Digest(nil) + `","operations":[]}`))
	f.Add([]byte(`{"schema":"` + Schema + `","schemaVersion":1,"catalogDigest":"sha256:00","operations":[{"operationId":"a\n"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			cleanError(t, err)
			return
		}
		c2, err := Parse(data)
		if err != nil || c2.Digest() != c.Digest() {
			t.Fatalf("reparse: %v, digest %s vs %s", err, c2.Digest(), c.Digest())
		}
		for _, tl := range c.Tools() {
			if id, ok := c.Resolve(tl.Name); !ok || id != tl.Name {
				t.Fatalf("listed tool %q does not resolve to itself (%q, %v)", tl.Name, id, ok)
			}
			if !json.Valid(tl.InputSchema) {
				t.Fatalf("listed schema of %q is not JSON", tl.Name)
			}
			if tl.Name != FinishTool && tl.Name != BlockTool {
				if err := c.ValidateInput(tl.Name, json.RawMessage(`{}`)); err != nil {
					cleanError(t, err)
				}
			}
		}
	})
}

// FuzzNormalizeResult: never panics; errors are clean; an accepted result is
// a fixed point, valid for our run result schema, and its disposition fits
// the tool.
func FuzzNormalizeResult(f *testing.F) {
	f.Add(FinishTool, []byte(finishBase))
	f.Add(BlockTool, []byte(blockBase))
	f.Add(FinishTool, []byte(`{"reportedWorkDisposition":"yielded"}`))
	f.Add(BlockTool, []byte(`[]`))
	f.Fuzz(func(t *testing.T, tool string, data []byte) {
		out, err := NormalizeResult(tool, data)
		if err != nil {
			cleanError(t, err)
			return
		}
		again, err := NormalizeResult(tool, out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not a fixed point: %v\n%s\n%s", err, out, again)
		}
		sch, _ := runResultOnce()
		if msg, ok := validate(sch, out); !ok {
			t.Fatalf("accepted result fails the run result schema: %s", msg)
		}
		var r struct{ ReportedWorkDisposition string }
		_ = json.Unmarshal(out, &r)
		if (tool == BlockTool) != (r.ReportedWorkDisposition == dispositionBlocked) {
			t.Fatalf("%s accepted disposition %q", tool, r.ReportedWorkDisposition)
		}
	})
}

// FuzzNormalizeResultAgreesWithShare: whatever NormalizeResult accepts, the
// share's result.schema.json accepts too.
func FuzzNormalizeResultAgreesWithShare(f *testing.F) {
	share := shareResultSchema(f)
	for _, v := range resultVariants() {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, data string) {
		ours, _ := runResultOnce()
		if o, s := validBy(ours, data), validBy(share, data); o != s {
			t.Fatalf("ours=%v share=%v for %q", o, s, data)
		}
		for _, tool := range []string{FinishTool, BlockTool} {
			if out, err := NormalizeResult(tool, json.RawMessage(data)); err == nil && !validBy(share, string(out)) {
				t.Fatalf("share refuses the normalised %s", out)
			}
		}
	})
}

// FuzzCheckInput: never panics; errors are clean and never quote a string
// value of the input longer than a few bytes.
func FuzzCheckInput(f *testing.F) {
	for _, s := range []string{`{"apiKey":"x"}`, `{"u":"https://a/?token=SECRETVALUE"}`, `{"h":"Bearer SECRETVALUE"}`, `["sk_SECRETVALUE"]`, `{"ok":1}`, `{"a":`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := CheckInput(data)
		if err == nil {
			return
		}
		cleanError(t, err)
		if strings.Contains(err.Error(), "SECRETVALUE") {
			t.Fatalf("error quotes a value: %q", err)
		}
	})
}

// FuzzServerFeedback: never panics; the text is valid UTF-8 and at most
// maxFeedback UTF-16 units.
func FuzzServerFeedback(f *testing.F) {
	f.Add([]byte(`{"success":false,"contentItems":[{"type":"inputText","text":"Add evidence."}]}`))
	f.Add([]byte(`{"success":false,"contentItems":[{"type":"inputText","text":"\ud83d\ude00"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := ServerFeedback(data)
		if !utf8.ValidString(s) || len(utf16.Encode([]rune(s))) > maxFeedback || s == "" {
			t.Fatalf("feedback %q", s)
		}
	})
}
