package workspace

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

const codexTurnDiff = `diff --git a/old name.go b/new name.go
similarity index 90%
rename from old name.go
rename to new name.go
index 1111111..2222222 100644
--- a/old name.go
+++ b/new name.go
@@ -1,3 +1,3 @@
 package x
--- not a header: a removed line starting with two dashes
+++ not a header: an added line starting with two pluses
 keep
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
diff --git a/logo.png b/logo.png
new file mode 100644
index 0000000..3333333
Binary files /dev/null and b/logo.png differ
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 4444444..0000000
--- a/gone.txt
+++ /dev/null
@@ -1,2 +0,0 @@
-a
-b
diff --git a/made.txt b/made.txt
new file mode 100644
--- /dev/null
+++ b/made.txt
@@ -0,0 +1 @@
+hello
`

// TestWorkspace28_CodexTurnDiff: Codex's turn/diff/updated text with a
// rename (rename from/to), a mode change (old/new mode), a binary
// (Binary files … differ), a delete and a create → rename with
// previousPath, mode_change, binary with stats and diff null; counts only
// from hunk lines (a removed "--- …" line and an added "+++ …" line count).
func TestWorkspace28_CodexTurnDiff(t *testing.T) {
	files := ParseGitDiff(codexTurnDiff)
	byPath := map[string]FileChange{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	require.Len(t, byPath, 5)

	r := byPath["new name.go"]
	require.Equal(t, OpRename, r.Operation)
	require.Equal(t, "old name.go", *r.PreviousPath)
	require.Equal(t, 1, *r.Additions)
	require.Equal(t, 1, *r.Deletions)
	require.Contains(t, *r.Diff, "rename from old name.go")

	m := byPath["run.sh"]
	require.Equal(t, OpModeChange, m.Operation)
	require.Equal(t, 0, *m.Additions)
	require.Nil(t, m.Diff)

	b := byPath["logo.png"]
	require.True(t, b.Binary)
	require.Equal(t, OpCreate, b.Operation)
	require.Nil(t, b.Additions)
	require.Nil(t, b.Deletions)
	require.Nil(t, b.Diff)

	g := byPath["gone.txt"]
	require.Equal(t, OpDelete, g.Operation)
	require.Equal(t, 0, *g.Additions)
	require.Equal(t, 2, *g.Deletions)

	c := byPath["made.txt"]
	require.Equal(t, OpCreate, c.Operation)
	require.Equal(t, 1, *c.Additions)

	cs := NewChangeSet("t:workspace", 1, SourceHarness, false, files)
	require.Nil(t, cs.Totals.Additions, "a binary entry's null stats make the totals null")
}

// TestCodexTurnDiffReplaces: each turn/diff/updated is the whole turn's
// diff, so it replaces the harness set rather than adding to it; an entry
// whose path or previous path the root refuses is left out; diff text is
// scrubbed.
func TestCodexTurnDiffReplaces(t *testing.T) {
	h := NewHarness("t", budget(), func(s string) string {
		if s == "" {
			return s
		}
		return s + "scrubbed\n"
	})
	local := func(p string) (string, bool) { return p, filepath.IsLocal(p) }
	h.ReplaceGit(codexTurnDiff, local)
	require.Len(t, h.Snapshot().Files, 5)
	h.ReplaceGit("diff --git a/made.txt b/made.txt\nnew file mode 100644\n--- /dev/null\n+++ b/made.txt\n@@ -0,0 +1,2 @@\n+hello\n+again\n"+
		"diff --git a/../x b/../x\nold mode 100644\nnew mode 100755\n"+
		"diff --git a/x b/y\nrename from /etc/passwd\nrename to y\n", local)
	cs := h.Snapshot()
	require.Len(t, cs.Files, 1)
	require.Equal(t, 2, *cs.Files[0].Additions)
	require.Contains(t, *cs.Files[0].Diff, "scrubbed")
	require.Equal(t, 2, cs.Revision)
}

// TestParseGitDiffBounds: garbage and text outside sections give no entry;
// more than MaxFiles sections keep MaxFiles.
func TestParseGitDiffBounds(t *testing.T) {
	require.Empty(t, ParseGitDiff("not a diff\n+++ b/x\n@@ -1 +1 @@\n+y\n"))
	require.Empty(t, ParseGitDiff("diff --git nonsense\n"))
	var s []byte
	for i := range MaxFiles + 5 {
		s = append(s, []byte("diff --git a/f"+strconv.Itoa(i)+" b/f"+strconv.Itoa(i)+"\nold mode 100644\nnew mode 100755\n")...)
	}
	require.Len(t, ParseGitDiff(string(s)), MaxFiles)
}
