package workspace

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"
)

// Diff bounds (workspace.md §3.4, §4.4).
const (
	// MaxDiffChars bounds one file's diff text, in characters; past it the
	// text is cut on a character boundary and TruncationMarker follows.
	MaxDiffChars = 131072
	// TruncationMarker is WD's line after a cut diff.
	TruncationMarker = "… diff truncated by runner …"
	// WorkspaceDiffBudget is the time all diff computation of one turn
	// shares; past it files keep null stats and diff (§4.4).
	WorkspaceDiffBudget = 2 * time.Second
	// diffContext is the unified diff's context lines.
	diffContext = 3
	// maxMatcherLines bounds the lines (both sides together, after the
	// common prefix and suffix are trimmed) given to the line matcher;
	// a larger change becomes one hunk of the trimmed middle (WD's form),
	// which keeps a pathological file from spending the whole budget.
	maxMatcherLines = 20000
)

// Change operations (workspace-diff.schema.json).
const (
	OpCreate     = "create"
	OpModify     = "modify"
	OpDelete     = "delete"
	OpRename     = "rename"
	OpModeChange = "mode_change"
)

// devNull is the unified diff's side of a created or deleted file.
const devNull = "/dev/null"

// Unified is the git-style unified diff of one file from a to b (nil a: a
// created file; nil b: a deleted file), with its exact added and removed
// line counts. The text is not cut (see Cut).
func Unified(path string, a, b []byte) (text string, additions, deletions int) {
	from, to := "a/"+path, "b/"+path
	if a == nil {
		from = devNull
	}
	if b == nil {
		to = devNull
	}
	al, bl := lines(a), lines(b)
	var sb strings.Builder
	fmt.Fprintf(&sb, "diff --git a/%s b/%s\n--- %s\n+++ %s\n", path, path, from, to)
	for _, g := range groups(al, bl) {
		first, last := g[0], g[len(g)-1]
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(first.I1, last.I2), hunkRange(first.J1, last.J2))
		for _, c := range g {
			switch c.Tag {
			case 'e':
				writeLines(&sb, ' ', al[c.I1:c.I2])
			case 'r', 'd':
				writeLines(&sb, '-', al[c.I1:c.I2])
				deletions += c.I2 - c.I1
			}
			if c.Tag == 'r' || c.Tag == 'i' {
				writeLines(&sb, '+', bl[c.J1:c.J2])
				additions += c.J2 - c.J1
			}
		}
	}
	return sb.String(), additions, deletions
}

// groups are the hunks of al → bl as grouped opcodes: the matcher's when
// the changed middle is small enough, else one replace hunk of it.
func groups(al, bl []string) [][]difflib.OpCode {
	p := 0
	for p < len(al) && p < len(bl) && al[p] == bl[p] {
		p++
	}
	s := 0
	for s < len(al)-p && s < len(bl)-p && al[len(al)-1-s] == bl[len(bl)-1-s] {
		s++
	}
	if p == len(al) && p == len(bl) {
		return nil
	}
	if (len(al)-p-s)+(len(bl)-p-s) <= maxMatcherLines {
		return difflib.NewMatcher(al, bl).GetGroupedOpCodes(diffContext)
	}
	lo, ahi, bhi := max(0, p-diffContext), len(al)-max(0, s-diffContext), len(bl)-max(0, s-diffContext)
	var g []difflib.OpCode
	if lo < p {
		g = append(g, difflib.OpCode{Tag: 'e', I1: lo, I2: p, J1: lo, J2: p})
	}
	g = append(g, difflib.OpCode{Tag: 'r', I1: p, I2: len(al) - s, J1: p, J2: len(bl) - s})
	if e := len(al) - s; e < ahi {
		g = append(g, difflib.OpCode{Tag: 'e', I1: e, I2: ahi, J1: len(bl) - s, J2: bhi})
	}
	return [][]difflib.OpCode{g}
}

// lines splits content after each '\n'; the last line may lack one.
func lines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	ls := strings.SplitAfter(string(b), "\n")
	if ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	}
	return ls
}

// writeLines writes each line with its prefix; a last line without a
// newline gets git's marker.
func writeLines(sb *strings.Builder, prefix byte, ls []string) {
	for _, l := range ls {
		sb.WriteByte(prefix)
		sb.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			sb.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

// hunkRange is a unified diff range for lines [start, stop).
func hunkRange(start, stop int) string {
	n := stop - start
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// Cut bounds a diff text to MaxDiffChars characters, cut on a character
// boundary and followed by the TruncationMarker line (§3.4).
func Cut(text string) string {
	if utf8.RuneCountInString(text) <= MaxDiffChars {
		return text
	}
	n, i := 0, 0
	for i < len(text) && n < MaxDiffChars {
		_, w := utf8.DecodeRuneInString(text[i:])
		i += w
		n++
	}
	cut := text[:i]
	if !strings.HasSuffix(cut, "\n") {
		cut += "\n"
	}
	return cut + TruncationMarker + "\n"
}
