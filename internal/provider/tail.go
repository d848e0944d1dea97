package provider

import (
	"strings"
)

// StderrTail keeps the agent's stderr only as a redacted tail
// (stderrTailLines lines, stderrTailBytes bytes; acp.md §3.3): every known
// secret is scrubbed before a line is kept, so the tail may be logged or
// attached to a diagnostic.
type StderrTail struct {
	Redactor *Redactor
	lines    []string
	partial  string
}

// Write appends stderr bytes; it never fails.
func (t *StderrTail) Write(p []byte) (int, error) {
	s := t.partial + string(p)
	t.partial = ""
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			break
		}
		t.add(s[:i])
		s = s[i+1:]
	}
	if len(s) > stderrTailBytes {
		t.add(s) // an endless line is kept as what it is so far
		s = ""
	}
	t.partial = s
	return len(p), nil
}

func (t *StderrTail) add(line string) {
	t.lines = append(t.lines, truncateUTF8(t.Redactor.String(line), stderrTailBytes))
	if len(t.lines) > stderrTailLines {
		t.lines = t.lines[len(t.lines)-stderrTailLines:]
	}
	for total := t.size(); total > stderrTailBytes && len(t.lines) > 1; total = t.size() {
		t.lines = t.lines[1:]
	}
}

func (t *StderrTail) size() int {
	n := 0
	for _, l := range t.lines {
		n += len(l) + 1
	}
	return n
}

// String returns the kept lines (plus a redacted partial line).
func (t *StderrTail) String() string {
	out := strings.Join(t.lines, "\n")
	if t.partial != "" {
		if out != "" {
			out += "\n"
		}
		out += t.Redactor.String(t.partial)
	}
	return out
}

// StderrTail bounds the redacted stderr tail (reference runner).
const (
	stderrTailLines = 32
	stderrTailBytes = 8 << 10
)
