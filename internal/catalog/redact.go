package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// The server redactor's rules (tools.md §3 item 2; the reference's
// src/semantic-tools/redaction.ts, containsProtectedSemanticData). The
// reference's patterns are JavaScript regular expressions with the i flag and
// no u flag; here they run on ASCII-lowered text (JavaScript's
// non-Unicode case folding maps only ASCII letters onto ASCII letters), with
// JavaScript's \s spelled out (Go's is ASCII only) and JavaScript's "."
// spelled out (no line terminators, no astral character: those are two
// UTF-16 units in JavaScript). \b is ASCII in both.
const (
	jsSpace = `\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}`
	jsDot   = `[^\n\r\x{2028}\x{2029}\x{10000}-\x{10ffff}]`
)

var (
	sensitiveKey = regexp.MustCompile(`authorization|cookie|credential|password|passwd|private` + jsDot +
		`?key|secret|token|api` + jsDot + `?key|connection` + jsDot + `?string`)
	secretRules = []struct {
		name string
		re   *regexp.Regexp
	}{
		{"bearer token", regexp.MustCompile(`\bbearer[` + jsSpace + `]+[a-z0-9._~+/-]+`)},
		{"api token (sk_, pk_, pcgw_, ghp_, github_pat_)", regexp.MustCompile(`\b(?:sk|pk|pcgw|ghp|github_pat)_[a-z0-9_-]{8,}`)},
		{"JWT", regexp.MustCompile(`\beyj[a-z0-9_-]{8,}\.[a-z0-9_-]{8,}\.[a-z0-9_-]{8,}`)},
		{"URL query secret (code, key, secret, state, token, api_key, access_token)",
			regexp.MustCompile(`[?&](?:code|key|secret|state|token|api[_-]?key|access[_-]?token)=[^&#` + jsSpace + `]`)},
	}
)

// maxInputText bounds the arguments' text before parsing (4 x maxInputBytes,
// above mcpbridge's 1 MiB body bound).
const maxInputText = 4 * maxInputBytes

// asciiLower lowers ASCII letters only, keeping every byte offset.
func asciiLower(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// CheckInput applies §3 item 2 to a tool call's arguments: the encoded JSON
// (canonical, as the server measures and digests it) over maxInputBytes, a
// value the server's canonical JSON refuses, or anything the server's
// redactor would flag (a sensitive key name, a Bearer token, an
// sk_/pk_/pcgw_/ghp_/github_pat_ token, a JWT-shaped string, a URL query
// secret) is an error. The error names the key path (a JSON pointer) and
// the rule, never the value. Absent args are {}.
func CheckInput(args json.RawMessage) error {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	// Text this large is refused before it is parsed; only whitespace could
	// make its canonical form fit, and the bridge's body bound is below it.
	if len(args) > maxInputText {
		return fmt.Errorf("input is larger than %d bytes of JSON", maxInputBytes)
	}
	canon, err := prp.Canonical(args)
	switch {
	case errors.Is(err, prp.ErrCanonicalTooLarge):
		return fmt.Errorf("input is nested deeper than %d levels or holds more than %d values", prp.MaxCanonicalDepth, prp.MaxCanonicalNodes)
	case err != nil:
		return errors.New("input is not valid JSON")
	case len(canon) > maxInputBytes:
		return fmt.Errorf("input is larger than %d bytes of JSON", maxInputBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return errors.New("input is not valid JSON")
	}
	return protected(v, nil, "")
}

// protected walks v as containsProtectedSemanticData does: a key is tested
// before its value, array items have no key; object keys are visited in
// sorted order so the error is stable.
func protected(v any, path []string, key string) error {
	if sensitiveKey.MatchString(asciiLower(key)) {
		return fmt.Errorf("input at %s has a sensitive key name (authorization, cookie, credential, password, private key, secret, token, api key, connection string)", pointer(path))
	}
	switch t := v.(type) {
	case string:
		s := asciiLower(t)
		for _, r := range secretRules {
			if r.re.MatchString(s) {
				return fmt.Errorf("input at %s holds a %s", pointer(path), r.name)
			}
		}
	case []any:
		for i, it := range t {
			if err := protected(it, append(path, strconv.Itoa(i)), ""); err != nil {
				return err
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if err := protected(t[k], append(path, k), k); err != nil {
				return err
			}
		}
	}
	return nil
}

// pointer is the quoted JSON pointer of path, bounded.
func pointer(path []string) string {
	if len(path) == 0 {
		return "the root"
	}
	var b strings.Builder
	esc := strings.NewReplacer("~", "~0", "/", "~1")
	for _, p := range path {
		b.WriteByte('/')
		b.WriteString(esc.Replace(p))
	}
	s := b.String()
	if len(s) > maxErrorPath {
		s = cutUTF16(s, maxErrorPath) + "…"
	}
	return strconv.Quote(s)
}
