package prpschema

import "testing"

// TestLookaheadPatternsAreChecked: the reference path patterns use
// lookahead, which RE2 refuses; the ECMAScript engine must still reject
// what they forbid rather than accept everything.
func TestLookaheadPatternsAreChecked(t *testing.T) {
	for _, pattern := range []string{
		`^(?!/)(?!.*(?:^|/)\.\.(?:/|$)).*$`,
		`^(?!/)(?!.*(?:^|/)\.\.(?:/|$)).+$`,
	} {
		re, err := regexpEngine(pattern)
		if err != nil {
			t.Fatalf("compile %s: %v", pattern, err)
		}
		for path, want := range map[string]bool{
			"src/main.go": true, "a/..b/c": true, "/etc/passwd": false,
			"../x": false, "a/../b": false, "a/..": false,
		} {
			if got := re.MatchString(path); got != want {
				t.Errorf("%s matches %q = %v, want %v", pattern, path, got, want)
			}
		}
	}
}
