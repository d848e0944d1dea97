package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestUnifiedFormat(t *testing.T) {
	text, adds, dels := Unified("a.txt", []byte("one\ntwo\nthree\n"), []byte("one\n2\nthree\nfour"))
	require.Equal(t, "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,4 @@\n one\n-two\n+2\n three\n+four\n\\ No newline at end of file\n", text)
	require.Equal(t, 2, adds)
	require.Equal(t, 1, dels)

	text, adds, dels = Unified("n.ts", nil, []byte("x\ny\n"))
	require.Equal(t, "diff --git a/n.ts b/n.ts\n--- /dev/null\n+++ b/n.ts\n@@ -0,0 +1,2 @@\n+x\n+y\n", text)
	require.Equal(t, [2]int{2, 0}, [2]int{adds, dels})

	text, adds, dels = Unified("g", []byte("x\n"), nil)
	require.Equal(t, "diff --git a/g b/g\n--- a/g\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n", text)
	require.Equal(t, [2]int{0, 1}, [2]int{adds, dels})
}

// TestUnifiedLargeChangeIsOneHunk: a change past the matcher's bound is
// one hunk of the trimmed middle, with exact counts.
func TestUnifiedLargeChangeIsOneHunk(t *testing.T) {
	var a, b strings.Builder
	a.WriteString("head\n")
	b.WriteString("head\n")
	for i := range maxMatcherLines {
		a.WriteString("a" + itoa(i) + "\n")
		b.WriteString("b" + itoa(i) + "\n")
	}
	a.WriteString("tail\n")
	b.WriteString("tail\n")
	text, adds, dels := Unified("f", []byte(a.String()), []byte(b.String()))
	require.Equal(t, maxMatcherLines, adds)
	require.Equal(t, maxMatcherLines, dels)
	require.Equal(t, 1, strings.Count(text, "\n@@ "))
	require.Contains(t, text, "@@ -1,20002 +1,20002 @@\n head\n-a0\n")
}

// TestWorkspace07_ShellChanges: create, modify, delete and rename by
// shell → the verified set in path order, schema-valid (§4.4).
func TestWorkspace07_ShellChanges(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "old.txt", "a\nb\nc\n")
	write(t, dir, "gone.txt", "bye\n")
	write(t, dir, "r.txt", "moving\n")
	r := openRoot(t, dir)
	before := walk(t, r, nil)
	write(t, dir, "new.ts", "export {}\n")
	write(t, dir, "old.txt", "a\nB\nc\nd\n")
	require.NoError(t, os.Remove(filepath.Join(dir, "gone.txt")))
	require.NoError(t, os.Rename(filepath.Join(dir, "r.txt"), filepath.Join(dir, "r2.txt")))
	after := walk(t, r, before)
	files := Compare(before, after, budget(), noRedact)
	require.Equal(t, []string{"gone.txt", "new.ts", "old.txt", "r2.txt"}, paths(files))
	m := byPath(files)
	require.Equal(t, OpDelete, m["gone.txt"].Operation)
	require.Equal(t, OpCreate, m["new.ts"].Operation)
	require.Equal(t, 1, *m["new.ts"].Additions)
	require.Equal(t, OpModify, m["old.txt"].Operation)
	require.Equal(t, [2]int{2, 1}, [2]int{*m["old.txt"].Additions, *m["old.txt"].Deletions})
	require.Equal(t, OpRename, m["r2.txt"].Operation)
	require.Equal(t, "r.txt", *m["r2.txt"].PreviousPath)
	require.Contains(t, *m["r2.txt"].Diff, "similarity index 100%\nrename from r.txt\nrename to r2.txt\n")
	cs := NewChangeSet(ChangeSetID("pt-1"), 3, SourceVerified, false, files)
	require.Equal(t, 4, cs.Totals.Files)
	require.Equal(t, 1+2+0+0, *cs.Totals.Additions)
	require.Equal(t, 1+1, *cs.Totals.Deletions)
	done := cs
	done.Complete = true
	requireValid(t, []ChangeSet{cs, done}, nil)
}

// TestWorkspace09_BinaryAndTruncation: a 3 MiB text file modified and a
// NUL byte → binary, stats and diff null; a 200 KiB change → the diff is
// cut with the marker.
func TestWorkspace09_BinaryAndTruncation(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "big.txt", strings.Repeat("x\n", 3<<19))
	write(t, dir, "nul.txt", "text\n")
	write(t, dir, "wide.txt", "start\n")
	r := openRoot(t, dir)
	before := walk(t, r, nil)
	write(t, dir, "big.txt", strings.Repeat("y\n", 3<<19))
	write(t, dir, "nul.txt", "te\x00xt\n")
	write(t, dir, "wide.txt", strings.Repeat("0123456789abcdef\n", 200<<10/17))
	m := byPath(Compare(before, walk(t, r, before), budget(), noRedact))
	for _, p := range []string{"big.txt", "nul.txt"} {
		require.True(t, m[p].Binary, p)
		require.Nil(t, m[p].Additions, p)
		require.Nil(t, m[p].Diff, p)
	}
	d := *m["wide.txt"].Diff
	require.True(t, strings.HasSuffix(d, "\n"+TruncationMarker+"\n"))
	require.LessOrEqual(t, utf8.RuneCountInString(d), MaxDiffChars+2+utf8.RuneCountInString(TruncationMarker))
	require.Equal(t, 200<<10/17, *m["wide.txt"].Additions, "counts stay exact past the cut")
	requireValid(t, []ChangeSet{NewChangeSet("pt:workspace", 1, SourceVerified, false, Compare(before, walk(t, r, before), budget(), noRedact))}, nil)
}

// TestWorkspace10_NoChange: an unchanged workspace compares empty; a
// restored file too.
func TestWorkspace10_NoChange(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.txt", "same\n")
	r := openRoot(t, dir)
	before := walk(t, r, nil)
	write(t, dir, "a.txt", "changed\n")
	write(t, dir, "a.txt", "same\n")
	files := Compare(before, walk(t, r, before), budget(), noRedact)
	require.Empty(t, files)
	cs := NewChangeSet("pt:workspace", 2, SourceVerified, true, files)
	require.NotNil(t, cs.Files)
	require.Equal(t, 0, *cs.Totals.Additions)
	requireValid(t, []ChangeSet{cs}, nil)
}

// TestDiffBudgetSpent: past the budget entries keep null stats and diff.
func TestDiffBudgetSpent(t *testing.T) {
	dir := t.TempDir()
	r := openRoot(t, dir)
	before := walk(t, r, nil)
	write(t, dir, "a.txt", "a\n")
	spent := NewBudget(0, func() time.Time { return time.Unix(0, 0) })
	files := Compare(before, walk(t, r, before), spent, noRedact)
	require.Len(t, files, 1)
	require.Nil(t, files[0].Additions)
	require.Nil(t, files[0].Diff)
	require.False(t, files[0].Binary)
}

// TestWorkspace29_Bound: 8 files with 20 KiB diffs under a small payload
// bound → the last files lose their diff text, keep their stats.
func TestWorkspace29_Bound(t *testing.T) {
	var files []FileChange
	for i := range 8 {
		text, adds, dels := Unified("f"+itoa(i), nil, []byte(strings.Repeat("twenty kib of text\n", 20<<10/19)))
		files = append(files, FileChange{Path: "f" + itoa(i), Operation: OpCreate, Additions: &adds, Deletions: &dels, Diff: &text})
	}
	cs := NewChangeSet("pt:workspace", 1, SourceHarness, false, files)
	require.Len(t, cs.Files, 8)
	require.True(t, cs.Bound(64<<10))
	require.LessOrEqual(t, cs.Size(), 64<<10)
	require.NotNil(t, cs.Files[0].Diff)
	require.Nil(t, cs.Files[7].Diff)
	require.NotNil(t, cs.Files[7].Additions)
	require.False(t, cs.Bound(10))
}

// TestRedactedDiff: diff text passes the redactor; counts are kept.
func TestRedactedDiff(t *testing.T) {
	dir := t.TempDir()
	r := openRoot(t, dir)
	before := walk(t, r, nil)
	write(t, dir, "env.sh", "TOKEN=ghp_"+strings.Repeat("a", 36)+"\n")
	redact := func(s string) string { return strings.ReplaceAll(s, "ghp_"+strings.Repeat("a", 36), "[REDACTED]") }
	files := Compare(before, walk(t, r, before), budget(), redact)
	require.NotContains(t, *files[0].Diff, "ghp_")
	require.Equal(t, 1, *files[0].Additions)
}
