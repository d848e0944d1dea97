package workspace

import (
	"strings"
)

// MaxLinks bounds the Markdown links read from one message; a message
// holds at most MaxReferences references anyway, and invalid links are
// cheap, so this only keeps a hostile message's cost linear and small.
const MaxLinks = 1024

// Link is one Markdown link: its label and its raw target (angle
// brackets and title removed).
type Link struct {
	Label, Target string
}

// Links extracts the inline links `[label](target "title")` of a
// Markdown text in order, at most MaxLinks, ignoring fenced code blocks
// and inline code spans (§5.1). An image `![alt](src)` counts as a link.
func Links(md string) []Link {
	var out []Link
	inFence, fence := false, ""
	for line := range strings.Lines(md) {
		trimmed := strings.TrimLeft(line, " ")
		if len(line)-len(trimmed) <= 3 {
			if f := fenceOf(trimmed); f != "" {
				switch {
				case !inFence:
					inFence, fence = true, f
					continue
				case strings.HasPrefix(f, fence[:1]) && len(f) >= len(fence) &&
					strings.TrimSpace(strings.TrimLeft(trimmed, f[:1])) == "":
					inFence = false
					continue
				}
			}
		}
		if inFence {
			continue
		}
		out = lineLinks(line, out)
		if len(out) >= MaxLinks {
			return out[:MaxLinks]
		}
	}
	return out
}

// fenceOf returns the run of three or more backticks or tildes opening
// s, or "".
func fenceOf(s string) string {
	if s == "" || (s[0] != '`' && s[0] != '~') {
		return ""
	}
	n := 0
	for n < len(s) && s[n] == s[0] {
		n++
	}
	if n < 3 {
		return ""
	}
	return s[:n]
}

// lineLinks appends the links of one line outside code spans.
func lineLinks(s string, out []Link) []Link {
	for i := 0; i < len(s) && len(out) < MaxLinks; {
		switch s[i] {
		case '`':
			n := run(s, i, '`')
			// A code span ends at the next run of exactly n backticks;
			// without one the backticks are literal.
			if end := closingRun(s, i+n, n); end >= 0 {
				i = end + n
			} else {
				i += n
			}
		case '\\':
			i += 2
		case '[':
			l, next, ok := link(s, i)
			if ok {
				out = append(out, l)
				i = next
			} else {
				i++
			}
		default:
			i++
		}
	}
	return out
}

// run is the length of the run of c at s[i:].
func run(s string, i int, c byte) int {
	n := 0
	for i+n < len(s) && s[i+n] == c {
		n++
	}
	return n
}

// closingRun finds a run of exactly n backticks at or after i.
func closingRun(s string, i, n int) int {
	for i < len(s) {
		j := strings.IndexByte(s[i:], '`')
		if j < 0 {
			return -1
		}
		i += j
		m := run(s, i, '`')
		if m == n {
			return i
		}
		i += m
	}
	return -1
}

// link parses `[label](target "title")` at s[i] == '['.
func link(s string, i int) (Link, int, bool) {
	depth, j := 0, i
	for ; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
			continue
		case '[':
			depth++
		case ']':
			depth--
		}
		if depth == 0 {
			break
		}
	}
	if j >= len(s) || j+1 >= len(s) || s[j+1] != '(' {
		return Link{}, 0, false
	}
	label := s[i+1 : j]
	k := j + 2
	for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
		k++
	}
	var target string
	if k < len(s) && s[k] == '<' {
		end := strings.IndexAny(s[k+1:], ">\n")
		if end < 0 || s[k+1+end] != '>' {
			return Link{}, 0, false
		}
		target = s[k+1 : k+1+end]
		k += end + 2
	} else {
		start, par := k, 0
		for ; k < len(s); k++ {
			c := s[k]
			if c == ' ' || c == '\t' || c == '\n' || c < 0x20 {
				break
			}
			if c == '\\' && k+1 < len(s) {
				k++
				continue
			}
			if c == '(' {
				par++
			}
			if c == ')' {
				if par == 0 {
					break
				}
				par--
			}
		}
		target = s[start:k]
	}
	for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
		k++
	}
	if k < len(s) && (s[k] == '"' || s[k] == '\'') {
		end := strings.IndexByte(s[k+1:], s[k])
		if end < 0 {
			return Link{}, 0, false
		}
		k += end + 2
		for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
			k++
		}
	}
	if k >= len(s) || s[k] != ')' {
		return Link{}, 0, false
	}
	return Link{Label: label, Target: target}, k + 1, true
}
