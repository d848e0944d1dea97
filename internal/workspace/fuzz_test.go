package workspace

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzLinks: any text yields at most MaxLinks links, each target free of
// line breaks, without a panic.
func FuzzLinks(f *testing.F) {
	for _, s := range []string{"[a](b)", "```\n[a](b)\n```", "`x` [a](<b c> \"t\")", "[[[[", "[a](b(c)d)", "\\[a](b)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		links := Links(s)
		if len(links) > MaxLinks {
			t.Fatalf("%d links", len(links))
		}
		for _, l := range links {
			if strings.Contains(l.Target, "\n") {
				t.Fatalf("target %q holds a line break", l.Target)
			}
		}
	})
}

// FuzzParseTarget: a decoded target is cleaned, NUL-free UTF-8 and its
// line within bounds.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"a.md#L2", "file:///x/y", "%00", "a:3", "../x", "https://e.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseTarget(s)
		if err != nil {
			return
		}
		if strings.IndexByte(tg.Path, 0) >= 0 || !utf8.ValidString(tg.Path) || tg.Line < 0 || tg.Line > MaxLine {
			t.Fatalf("bad target %+v", tg)
		}
	})
}

// FuzzUnified: the counts equal the diff's added and removed lines, and
// applying the hunks to a gives b.
func FuzzUnified(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), []byte("a\nB\nc\nd"))
	f.Add([]byte(""), []byte("x"))
	f.Add([]byte("x"), []byte("x\n"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		text, adds, dels := Unified("p", a, b)
		al := lines(a)
		var out strings.Builder
		gotA, gotD, pos := 0, 0, 0
		var last byte
		for _, l := range strings.SplitAfter(hunks(text), "\n") {
			if l == "" {
				continue
			}
			switch l[0] {
			case '@':
				start := atoiPrefix(strings.Fields(l)[1][1:])
				if !strings.HasSuffix(strings.Fields(l)[1], ",0") {
					start--
				}
				if start < pos || start > len(al) {
					t.Fatalf("hunk start %d at %d", start, pos)
				}
				out.WriteString(strings.Join(al[pos:start], ""))
				pos = start
			case '+':
				gotA++
				out.WriteString(l[1:])
			case '-':
				gotD++
				pos++
			case ' ':
				out.WriteString(l[1:])
				pos++
			case '\\':
				if last != '-' {
					s := out.String()
					out.Reset()
					out.WriteString(strings.TrimSuffix(s, "\n"))
				}
			}
			last = l[0]
		}
		if pos > len(al) {
			t.Fatalf("hunks consume %d of %d lines", pos, len(al))
		}
		out.WriteString(strings.Join(al[pos:], ""))
		if gotA != adds || gotD != dels {
			t.Fatalf("counts %d/%d, diff has %d/%d", adds, dels, gotA, gotD)
		}
		if out.String() != string(b) {
			t.Fatalf("patched a is %q, want %q\n%s", out.String(), b, text)
		}
	})
}

func atoiPrefix(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// FuzzParseGitDiff: any text parses within the bounds: at most MaxFiles
// entries, each with a path, one of the schema's operations, null stats
// exactly when binary, counts never negative and diff text within §3.4.
func FuzzParseGitDiff(f *testing.F) {
	f.Add(codexTurnDiff)
	for _, s := range []string{"diff --git a/x b/x\n@@\n+", "diff --git a/ b/\n", "diff --git a/a b b/a b\nrename to \n", "\xff"} {
		f.Add(s)
	}
	ops := map[string]bool{OpCreate: true, OpModify: true, OpDelete: true, OpRename: true, OpModeChange: true}
	f.Fuzz(func(t *testing.T, s string) {
		files := ParseGitDiff(s)
		if len(files) > MaxFiles {
			t.Fatalf("%d files", len(files))
		}
		for _, fc := range files {
			if fc.Path == "" || !ops[fc.Operation] || fc.Binary != (fc.Additions == nil) {
				t.Fatalf("bad entry %+v", fc)
			}
			if fc.Additions != nil && (*fc.Additions < 0 || *fc.Deletions < 0) {
				t.Fatalf("negative counts %+v", fc)
			}
			if fc.Diff != nil && utf8.RuneCountInString(*fc.Diff) > MaxDiffChars+1+utf8.RuneCountInString(TruncationMarker)+1 {
				t.Fatalf("diff of %d characters", utf8.RuneCountInString(*fc.Diff))
			}
		}
	})
}
