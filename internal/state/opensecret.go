package state

import (
	"regexp"
	"strings"
)

// A streamed text (an agent's message arrives as many deltas, each its own
// event) is sanitised one event at a time, so a credential split across
// two deltas would pass the sanitiser as two harmless-looking halves.
// OpenSecretStart tells a streamer where the text may still be the
// beginning of a credential that later text completes: it holds the text
// from there until the next delta (or the end of the item) decides.

// secretPrefix is a literal that starts one of secretPattern's
// alternatives, one byte set per position, and the run that continues a
// match after it.
type secretPrefix struct {
	lit []string
	// run is the set of bytes that continue the match after lit.
	run string
	// space: whitespace separates lit from the run (bearer).
	space bool
	// maxRun: a run longer than this makes a whole match (0: no bound).
	maxRun int
}

const (
	alnum      = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	upperDigit = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
)

// secretPrefixes mirror secretPattern's token alternatives
// (TestOpenSecretStartSplitsNoMatch and FuzzOpenSecretStart hold them
// together); the private key block is handled apart (openKeyBlock).
var secretPrefixes = []secretPrefix{
	{lit: []string{"bB", "eE", "aA", "rR", "eE", "rR"}, run: alnum + "._~+/=-", space: true},
	{lit: []string{"s", "k", "-"}, run: alnum + "_-"},
	{lit: []string{"g", "h", "pousr", "_"}, run: alnum},
	{lit: []string{"g", "i", "t", "h", "u", "b", "_", "p", "a", "t", "_"}, run: alnum + "_"},
	{lit: []string{"A", "K", "I", "A"}, run: upperDigit, maxRun: 15},
	{lit: []string{"x", "o", "x", "abprs", "-"}, run: alnum + "-"},
}

// OpenSecretStart returns the least index from which s may be the start
// of a credential the sanitiser would mask once more text follows, or
// len(s) when none can be open at the end of s. s[:i] can be sanitised
// and sent on its own: no match of the sanitiser in s and what follows it
// crosses i.
func OpenSecretStart(s string) int {
	open := openKeyBlock(s)
	for _, p := range secretPrefixes {
		open = min(open, p.openStart(s))
	}
	if open == len(s) || !mayHoldSecret(s) {
		return open
	}
	// A literal cut short may begin inside a whole match (the dashes of a
	// key block's end marker, the last letters of an AKIA key): hold
	// that match too, so it leaves in one piece.
	for _, m := range secretPattern.FindAllStringIndex(s, -1) {
		if m[0] < open && open < m[1] {
			return m[0]
		}
	}
	return open
}

// openStart is the least index where p's literal begins (whole or cut
// short by the end of s) and everything after it continues a match that
// the end of s leaves open.
func (p secretPrefix) openStart(s string) int {
	n := len(p.lit)
	// r: where the run that reaches the end of s begins.
	r := len(s)
	for r > 0 && strings.IndexByte(p.run, s[r-1]) >= 0 {
		r--
	}
	if p.space {
		// The literal, whitespace, the run to the end of s; or the
		// literal right at the end, its whitespace still to come.
		w := r
		for w > 0 && isSpace(s[w-1]) {
			w--
		}
		if w < r && w >= n && p.litAt(s, w-n, n) {
			return w - n
		}
		if len(s) >= n && p.litAt(s, len(s)-n, n) {
			return len(s) - n
		}
	} else {
		// The literal, then only the run (which may hold the literal's
		// own bytes) to the end of s, shorter than a whole match.
		for j := max(0, r-n); j+n <= len(s); j++ {
			if p.litAt(s, j, n) && (p.maxRun == 0 || len(s)-j-n <= p.maxRun) {
				return j
			}
		}
	}
	// The literal cut short by the end of s.
	for k := min(n-1, len(s)); k > 0; k-- {
		if p.litAt(s, len(s)-k, k) {
			return len(s) - k
		}
	}
	return len(s)
}

// litAt reports whether the first k positions of p's literal match s at j.
func (p secretPrefix) litAt(s string, j, k int) bool {
	for i := range k {
		if strings.IndexByte(p.lit[i], s[j+i]) < 0 {
			return false
		}
	}
	return true
}

// The private key alternative: a block from its header to its first end
// marker, or to the end of the text when none follows.
var (
	keyHead    = regexp.MustCompile(`^-----BEGIN [A-Z ]*PRIVATE KEY-----`)
	keyHeadCut = regexp.MustCompile(`^-----BEGIN [A-Z ]*-{0,4}$`)
	keyEnd     = regexp.MustCompile(`-----END [A-Z ]*PRIVATE KEY-----`)
)

// keyBegin starts every key block header.
const keyBegin = "-----BEGIN "

// openKeyBlock is the index of the first private key block that no end
// marker closes yet or whose header the end of s cuts short, or of
// keyBegin itself cut short; len(s) otherwise. Blocks are taken in order,
// each from its header to its first end marker, as the pattern matches.
func openKeyBlock(s string) int {
	for i := 0; ; {
		k := strings.Index(s[i:], keyBegin)
		if k < 0 {
			break
		}
		i += k
		rest := s[i:]
		if keyHeadCut.MatchString(rest) {
			return i
		}
		if head := keyHead.FindStringIndex(rest); head != nil {
			end := keyEnd.FindStringIndex(rest[head[1]:])
			if end == nil {
				return i
			}
			i += head[1] + end[1]
			continue
		}
		i += len(keyBegin)
	}
	for k := min(len(keyBegin)-1, len(s)); k > 0; k-- {
		if strings.HasSuffix(s, keyBegin[:k]) {
			return len(s) - k
		}
	}
	return len(s)
}

// isSpace is RE2's \s: tab, newline, form feed, carriage return, space.
func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\f' || b == '\r'
}
