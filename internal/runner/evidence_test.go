package runner

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// TestEvidenceTableCoversEveryCommand: every command type of the catalogue
// has a row with at least one durable step, each saying what it holds and
// what a crash right after it reports; a one-write row has no write of a
// bare pending marker (prp.md §7.2 item 8).
func TestEvidenceTableCoversEveryCommand(t *testing.T) {
	require.Equal(t, prp.CommandTypes(), slices.Sorted(maps.Keys(evidenceTable)))
	for typ, row := range evidenceTable {
		require.NotZero(t, row.recovery, typ)
		require.NotEmpty(t, row.steps, typ)
		for _, s := range row.steps {
			require.NotEmpty(t, s.write, typ)
			require.NotEmpty(t, s.reports, typ)
		}
		if row.recovery == recoverNotDone {
			require.NotEmpty(t, row.code, typ)
			require.NotEmpty(t, row.message, typ)
		}
		if row.recovery == recoverOneWrite {
			require.NotEqual(t, stepPending, row.steps[0].write, "%s: journaled with its result", typ)
		}
	}
}

// TestEvidenceStepsMatchesTable: the exported step counts are the rows'.
func TestEvidenceStepsMatchesTable(t *testing.T) {
	steps := EvidenceSteps()
	require.Len(t, steps, len(evidenceTable))
	for typ, row := range evidenceTable {
		require.Equal(t, len(row.steps), steps[typ], typ)
	}
}
