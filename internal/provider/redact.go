package provider

import (
	"regexp"
	"slices"
	"strings"
)

// minSecretLen is the shortest value scrubbed verbatim: shorter values
// would scrub ordinary words, and real credentials are far longer.
const minSecretLen = 6

// redacted replaces every scrubbed value.
const redacted = "[REDACTED]"

// credentialShapes are values redacted even when runnerd was not told them
// (prp.md §8.1 "credential-shaped values"): provider API keys, GitHub
// tokens, bearer tokens and AWS access key ids.
var credentialShapes = regexp.MustCompile(`\b(?:sk-[A-Za-z0-9_-]{16,}|sk-ant-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|xox[abp]-[A-Za-z0-9-]{10,})|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{16,}`)

// Redactor scrubs known secret values (the agent's env values) and
// credential-shaped strings from text before it enters a PRP payload or a
// log line.
type Redactor struct {
	secrets []string
}

// NewRedactor scrubs the given values; empty and short values are ignored.
func NewRedactor(secrets ...string) *Redactor {
	r := &Redactor{}
	for _, s := range secrets {
		if len(s) >= minSecretLen {
			r.secrets = append(r.secrets, s)
		}
	}
	// Longest first, so a secret containing another is scrubbed whole.
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

// String returns s with every secret replaced by [REDACTED].
func (r *Redactor) String(s string) string {
	if r != nil {
		for _, sec := range r.secrets {
			if strings.Contains(s, sec) {
				s = strings.ReplaceAll(s, sec, redacted)
			}
		}
	}
	return credentialShapes.ReplaceAllString(s, redacted)
}

// OpenStart returns the least index from which the end of s may be the
// start of a known secret value, cut short; len(s) when none is. A
// streamer holds s from there until more text decides, so a value split
// across two chunks is still scrubbed whole.
func (r *Redactor) OpenStart(s string) int {
	open := len(s)
	if r == nil {
		return open
	}
	for _, sec := range r.secrets {
		for j := max(0, len(s)-len(sec)+1); j < open; j++ {
			if s[j] == sec[0] && strings.HasPrefix(sec, s[j:]) {
				open = j
				break
			}
		}
	}
	return open
}
