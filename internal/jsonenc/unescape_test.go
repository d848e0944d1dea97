package jsonenc

import (
	"encoding/json"
	"testing"
	"unicode/utf16"
)

// FuzzUnescape: every escape Unescape accepts decodes as encoding/json
// decodes it, and every one it refuses, encoding/json refuses too.
func FuzzUnescape(f *testing.F) {
	for _, s := range []string{`\n`, `\"`, `\/`, `\u0041`, `\uD83D`, `\uzzzz`, `\u12`, `\x`, `\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		if len(s) == 0 || s[0] != '\\' {
			return
		}
		unit, n, ok := Unescape(s)
		if n < 0 || n > len(s) {
			t.Fatalf("Unescape(%q): n=%d out of range", s, n)
		}
		quoted := func(b []byte) []byte { return append(append([]byte{'"'}, b...), '"') }
		var dec string
		if !ok {
			// The text up to the offending byte is no valid string.
			if json.Unmarshal(quoted(s[:min(n+1, len(s))]), &dec) == nil {
				t.Fatalf("Unescape(%q) refused at %d; encoding/json accepts %q", s, n, dec)
			}
			return
		}
		if err := json.Unmarshal(quoted(s[:n]), &dec); err != nil {
			t.Fatalf("Unescape(%q) accepted %q; encoding/json: %v", s, s[:n], err)
		}
		r := rune(unit)
		if utf16.IsSurrogate(r) {
			r = '\uFFFD' // alone, encoding/json replaces it
		}
		if dec != string(r) {
			t.Fatalf("Unescape(%q) = %#x; encoding/json gives %q", s, unit, dec)
		}
	})
}
