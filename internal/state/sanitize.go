package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// Redacted replaces a credential-shaped value.
const Redacted = "[REDACTED]"

// secretKeys are object keys whose values are always redacted (compared
// lower-case with '-' and '_' removed); keys ending in one of secretSuffixes
// are redacted too.
var (
	secretKeys = map[string]bool{
		"authorization": true, "cookie": true, "setcookie": true, "credential": true,
		"credentials": true, "privatekey": true, "ticket": true, "bootstrapticket": true,
	}
	secretSuffixes = []string{"token", "secret", "password", "passwd", "apikey"}
)

// secretPattern matches credential-shaped text inside strings.
var secretPattern = regexp.MustCompile(
	`(?i:bearer)\s+[A-Za-z0-9._~+/=-]{8,}` +
		`|sk-(?:ant-)?[A-Za-z0-9_-]{16,}` +
		`|gh[pousr]_[A-Za-z0-9]{20,}` +
		`|github_pat_[A-Za-z0-9_]{20,}` +
		`|AKIA[0-9A-Z]{16}` +
		`|xox[abprs]-[A-Za-z0-9-]{10,}` +
		`|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)`)

// redactSecrets is secretPattern.ReplaceAllString(s, Redacted) with a
// prefilter: every alternative of the pattern starts with a literal, and
// text holding none of them is returned as it is without running the
// pattern (most of the cost of sanitising a delta).
func redactSecrets(s string) string {
	if !mayHoldSecret(s) {
		return s
	}
	return secretPattern.ReplaceAllString(s, Redacted)
}

// RedactSecrets is the sanitiser's text rule (credential-shaped
// substrings become Redacted), for callers that must know beforehand
// whether the outbox would change a text (a file preview is withheld
// rather than rewritten).
func RedactSecrets(s string) string { return redactSecrets(s) }

// secretLiterals start alternatives of secretPattern (gh[pousr]_ and
// (?i:bearer) are checked apart).
var secretLiterals = []string{"sk-", "github_pat_", "AKIA", "xox", "-----BEGIN "}

// mayHoldSecret reports whether s contains a literal that starts one of
// secretPattern's alternatives (TestMayHoldSecretCoversThePattern and
// FuzzMayHoldSecret hold the two together).
func mayHoldSecret(s string) bool {
	for _, lit := range secretLiterals {
		if strings.Contains(s, lit) {
			return true
		}
	}
	for i := strings.Index(s, "gh"); i >= 0 && i+3 < len(s); {
		if strings.IndexByte("pousr", s[i+2]) >= 0 && s[i+3] == '_' {
			return true
		}
		j := strings.Index(s[i+1:], "gh")
		if j < 0 {
			break
		}
		i += 1 + j
	}
	// (?i:bearer): b, e, a and r fold only with their ASCII capitals.
	for i := 0; i+6 <= len(s); i++ {
		if s[i]|0x20 == 'b' && strings.EqualFold(s[i:i+6], "bearer") {
			return true
		}
	}
	return false
}

// keySeparators are dropped before a key is compared with the secret
// names (one replacer: building one per key would be most of the cost of
// sanitising an event).
var keySeparators = strings.NewReplacer("-", "", "_", "")

func isSecretKey(k string) bool {
	n := strings.ToLower(keySeparators.Replace(k))
	if secretKeys[n] {
		return true
	}
	for _, s := range secretSuffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

// isIdentityKey names fields whose value must never change by redaction:
// identities and tool inputs (prp.md §8.1).
func isIdentityKey(k string) bool {
	return strings.HasSuffix(k, "Id") || strings.HasSuffix(k, "ID") || k == "id" ||
		k == "input" || k == "inputDigest" || k == "arguments"
}

// redactText masks credential-shaped substrings and bounds the length.
func redactText(s string) string {
	s = redactSecrets(s)
	if len(s) > maxDiagnosticChars {
		cut := maxDiagnosticChars
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// sanitizeJSON returns raw with credential-shaped values redacted, compact.
// It fails with errSensitiveIdentity when redaction would touch an identity
// or a tool input, and with errInvalidEvent when raw is not a JSON object.
func sanitizeJSON(raw []byte) (json.RawMessage, error) {
	b, _, err := sanitizeJSONChanged(raw)
	return b, err
}

// sanitizeJSONChanged is sanitizeJSON that also reports whether redaction
// changed anything.
func sanitizeJSONChanged(raw []byte) (json.RawMessage, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false, fmt.Errorf("decode payload: %w", errInvalidEvent)
	}
	if dec.More() {
		return nil, false, fmt.Errorf("decode payload: %w: trailing data", errInvalidEvent)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, false, fmt.Errorf("decode payload: %w: not an object", errInvalidEvent)
	}
	changed := false
	out, err := sanitizeValue(v, false, &changed)
	if err != nil {
		return nil, false, err
	}
	if !changed {
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return nil, false, fmt.Errorf("compact payload: %w", errInvalidEvent)
		}
		return buf.Bytes(), false, nil
	}
	b, err := jsonenc.Marshal(out)
	if err != nil {
		return nil, false, fmt.Errorf("encode payload: %w", err)
	}
	return b, true, nil
}

func sanitizeValue(v any, protected bool, changed *bool) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(t)) {
			// A credential-shaped key is renamed; a suffix keeps keys unique.
			if r := redactSecrets(k); r != k {
				if protected {
					return nil, errSensitiveIdentity
				}
				e := t[k]
				delete(t, k)
				nk := r
				for n := 2; hasKey(t, nk); n++ {
					nk = fmt.Sprintf("%s#%d", r, n)
				}
				t[nk] = e
				*changed = true
			}
		}
		for k, e := range t {
			p := protected || isIdentityKey(k)
			if isSecretKey(k) && e != nil && e != Redacted {
				if _, isObj := e.(map[string]any); !isObj {
					if p {
						return nil, errSensitiveIdentity
					}
					t[k] = Redacted
					*changed = true
					continue
				}
			}
			n, err := sanitizeValue(e, p, changed)
			if err != nil {
				return nil, err
			}
			t[k] = n
		}
		return t, nil
	case []any:
		for i, e := range t {
			n, err := sanitizeValue(e, protected, changed)
			if err != nil {
				return nil, err
			}
			t[i] = n
		}
		return t, nil
	case string:
		r := redactSecrets(t)
		if r != t {
			if protected {
				return nil, errSensitiveIdentity
			}
			*changed = true
		}
		return r, nil
	}
	return v, nil
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}
