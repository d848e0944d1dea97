package catalog

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCheckInput is §3 item 2 (and §9 scenario 4's "apiKey" and 500 KiB
// inputs): what the server's redactor would flag is refused with the key
// path and the rule, never the value; harmless look-alikes pass.
func TestCheckInput(t *testing.T) {
	refused := []struct{ args, path, rule string }{
		{`{"apiKey":"x"}`, `"/apiKey"`, "sensitive key"},
		{`{"a":{"API_KEY":1}}`, `"/a/API_KEY"`, "sensitive key"},
		{`{"private key":null}`, `"/private key"`, "sensitive key"},
		{`{"privatekey":[]}`, `"/privatekey"`, "sensitive key"},
		{`{"Authorization":"x"}`, `"/Authorization"`, "sensitive key"},
		{`{"maxTokens":5}`, `"/maxTokens"`, "sensitive key"}, // the reference flags any key holding "token"
		{`{"x":{"Set-Cookie":"a"}}`, `"/x/Set-Cookie"`, "sensitive key"},
		{`{"dbConnectionString":"a"}`, `"/dbConnectionString"`, "sensitive key"},
		{`{"passwd":"a"}`, `"/passwd"`, "sensitive key"},
		{`{"credentials":{}}`, `"/credentials"`, "sensitive key"},
		{`{"h":"Bearer abc.def"}`, `"/h"`, "bearer token"},
		{`{"h":"bearer\u00a0abc"}`, `"/h"`, "bearer token"},
		{`{"h":["x","BEARER\tz"]}`, `"/h/1"`, "bearer token"},
		{`{"k":"sk_live12345678"}`, `"/k"`, "api token"},
		{`{"k":"use PK_ABCDEFGH now"}`, `"/k"`, "api token"},
		{`{"k":"pcgw_abcdefgh"}`, `"/k"`, "api token"},
		{`{"k":"ghp_0123456789abcdef"}`, `"/k"`, "api token"},
		{`{"k":"github_pat_11AAAAAAA"}`, `"/k"`, "api token"},
		{`{"k":"eyJhbGciOiJI.eyJzdWIiOiIx.SflKxwRJSMeK"}`, `"/k"`, "JWT"},
		{`{"u":"https://x.test/cb?code=abc"}`, `"/u"`, "URL query secret"},
		{`{"u":"https://x.test/?a=1&STATE=z"}`, `"/u"`, "URL query secret"},
		{`{"u":"?access-token=q"}`, `"/u"`, "URL query secret"},
		{`{"u":"?api_key=q"}`, `"/u"`, "URL query secret"},
		{`["a",{"b/c~":"?key=1"}]`, `"/1/b~1c~0"`, "URL query secret"},
		{`"Bearer tok"`, `the root`, "bearer token"},
	}
	for _, tc := range refused {
		err := CheckInput(json.RawMessage(tc.args))
		if err == nil {
			t.Errorf("CheckInput(%s) accepted", tc.args)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "input at "+tc.path+" ") || !strings.Contains(msg, tc.rule) {
			t.Errorf("CheckInput(%s) = %q, want path %s and rule %q", tc.args, msg, tc.path, tc.rule)
		}
		for _, secret := range []string{"abc", "live1234", "ABCDEFGH", "abcdefgh", "0123456789", "11AAAA", "SflKx", "=z", "=q"} {
			if strings.Contains(msg, secret) {
				t.Errorf("CheckInput(%s) error quotes the value: %q", tc.args, msg)
			}
		}
	}
	accepted := []string{
		``, `{}`, `null`, `[1,2]`,
		`{"key":"x"}`, `{"monkey":1}`, `{"tok":"a","pass":"b","secre":"c"}`,
		`{"note":"Bearer"}`, `{"note":"Bearer "}`, `{"note":"a bearer-token policy"}`,
		`{"task":"task_abcdefghij"}`, `{"plan":"risk_management_plan"}`, `{"k":"sk_short"}`, `{"k":"xsk_abcdefghij"}`,
		`{"k":"eyJshort.abcdefghij.abcdefghij"}`, `{"k":"1.2.3"}`,
		`{"u":"https://x.test/?barcode=1"}`, `{"u":"https://x.test/?keyword=a"}`, `{"u":"?code="}`, `{"u":"?code= x"}`, `{"u":"?code=#x"}`,
		`{"k":"ſk_abcdefghij"}`, // JavaScript's i flag does not fold ſ onto s
		`{"privat\u212aey":1}`,  // nor the Kelvin sign onto k
		`{"private😀key":1}`,     // "." is one UTF-16 unit; an astral character is two
		`{"private\nkey":1}`,    // "." never matches a line terminator
		`{"u":"?code=\u3000"}`,  // JavaScript's \s holds U+3000
		`{"h":"Bearer\u2028"}`,
	}
	for _, a := range accepted {
		if err := CheckInput(json.RawMessage(a)); err != nil {
			t.Errorf("CheckInput(%s) = %v, want accepted", a, err)
		}
	}
}

func TestCheckInputSize(t *testing.T) {
	pad := maxInputBytes - len(`{"s":""}`)
	at := `{"s":"` + strings.Repeat("a", pad) + `"}`
	if err := CheckInput(json.RawMessage(at)); err != nil {
		t.Fatalf("input of exactly %d bytes: %v", maxInputBytes, err)
	}
	over := `{"s":"` + strings.Repeat("a", pad+1) + `"}`
	if err := CheckInput(json.RawMessage(over)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("input over the bound: %v", err)
	}
	// Measured on the canonical form: whitespace does not count.
	spaced := `{"s" :   "` + strings.Repeat("a", pad) + `"}`
	if err := CheckInput(json.RawMessage(spaced)); err != nil {
		t.Fatalf("whitespace counted: %v", err)
	}
	if err := CheckInput(json.RawMessage(`{"a":`)); err == nil {
		t.Fatal("invalid JSON accepted")
	}
	deep := strings.Repeat("[", 70) + strings.Repeat("]", 70)
	if err := CheckInput(json.RawMessage(deep)); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("deep input: %v", err)
	}
}
