package workspace

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWorkspace05_HarnessRevisions: an ACP diff edit → revision 1 with
// counts; a second edit of the same file → revision 2, both hunks in one
// entry, counts added; the id is the turn's; schema-valid.
func TestWorkspace05_HarnessRevisions(t *testing.T) {
	h := NewHarness("pt-7", budget(), noRedact)
	old := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"
	mid := strings.Replace(old, "2\n", "two\n", 1)
	h.AddDiff("a.txt", &old, mid)
	require.True(t, h.Dirty())
	s1 := h.Snapshot()
	require.Equal(t, "pt-7:workspace", s1.ChangeSetID)
	require.Equal(t, 1, s1.Revision)
	require.Equal(t, SourceHarness, s1.Source)
	require.False(t, s1.Complete)
	require.Equal(t, [2]int{1, 1}, [2]int{*s1.Files[0].Additions, *s1.Files[0].Deletions})
	h.AddDiff("a.txt", &mid, strings.Replace(mid, "9\n", "nine\nnine\n", 1))
	s2 := h.Snapshot()
	require.Equal(t, 2, s2.Revision)
	require.Len(t, s2.Files, 1)
	require.Equal(t, 2, strings.Count(*s2.Files[0].Diff, "\n@@ "))
	require.Equal(t, [2]int{3, 2}, [2]int{*s2.Files[0].Additions, *s2.Files[0].Deletions})
	require.Equal(t, 1, strings.Count(*s2.Files[0].Diff, "diff --git"))
	require.Equal(t, 1, *s1.Files[0].Additions, "an earlier snapshot is not changed by later edits")
	h.AddDiff("n.ts", nil, "x\n")
	s3 := h.Snapshot()
	require.Equal(t, OpCreate, byPath(s3.Files)["n.ts"].Operation)
	last, ok := h.Last()
	require.True(t, ok)
	require.Equal(t, 3, last.Revision)
	for _, cs := range []ChangeSet{s1, s2, s3} {
		p := cs.Payload()
		require.NotContains(t, p, "itemId")
		require.NotContains(t, p, "providerTurnId")
	}
	requireValid(t, []ChangeSet{s1, s2, s3}, nil)
}

// TestWorkspace06_HarnessLocations: a delete tool with only a location →
// a delete entry with null stats and diff; a plain edit location →
// modify.
func TestWorkspace06_HarnessLocations(t *testing.T) {
	h := NewHarness("pt", budget(), noRedact)
	h.AddLocation("gone.txt", "delete")
	h.AddLocation("edited.txt", "edit")
	cs := h.Snapshot()
	m := byPath(cs.Files)
	require.Equal(t, OpDelete, m["gone.txt"].Operation)
	require.Nil(t, m["gone.txt"].Additions)
	require.Nil(t, m["gone.txt"].Diff)
	require.Equal(t, OpModify, m["edited.txt"].Operation)
	require.Nil(t, cs.Totals.Additions)
	requireValid(t, []ChangeSet{cs}, nil)
}
