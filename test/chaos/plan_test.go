package chaos

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// maxCells keeps the matrix small enough that a CI wave of 90 runs (one
// per cell first, then random ones) fills every cell within a minute or so.
const maxCells = 80

// TestWaveCoversEveryCellFirst: a wave's first len(Cells()) plans strike
// every cell once, whatever the seed; later plans hold one or two faults of
// different kinds at points their scenario has.
func TestWaveCoversEveryCellFirst(t *testing.T) {
	cells := Cells()
	require.LessOrEqual(t, len(cells), maxCells)
	for _, seed := range []uint64{0, 1, SeedOf("ci"), SeedOf("a")} {
		plans := Wave(seed, len(cells)+200)
		hit := map[Cell]bool{}
		for _, p := range plans[:len(cells)] {
			for _, c := range CellsOf(p) {
				hit[c] = true
			}
		}
		require.Len(t, hit, len(cells))
		for _, p := range plans {
			require.NotEmpty(t, p.Faults)
			require.LessOrEqual(t, len(p.Faults), maxFaults)
			if len(p.Faults) == 2 {
				require.NotEqual(t, p.Faults[0].Kind, p.Faults[1].Kind)
			}
			back, err := ParsePlan(p.String())
			require.NoError(t, err, p.String())
			require.Equal(t, p, back)
		}
	}
	require.Equal(t, Wave(5, 80), Wave(5, 80), "seeded: the same seed, the same wave")
}

// TestParsePlanRefusesBadInput: each bad plan gets a clear error.
func TestParsePlanRefusesBadInput(t *testing.T) {
	for _, bad := range []string{
		"",
		"seed=1;scenario=plain",
		"seed=x;scenario=plain;faults=drop@turn",
		"seed=1;scenario=nope;faults=drop@turn",
		"seed=1;scenario=plain;faults=drop@close",
		"seed=1;scenario=plain;faults=fire@turn",
		"seed=1;scenario=plain;faults=drop@turn+drop@turn+drop@turn",
		"seed=1;seed=2;scenario=plain;faults=",
		"faults=drop@turn;seed=1;scenario=plain",
	} {
		_, err := ParsePlan(bad)
		require.Error(t, err, bad)
	}
}

func FuzzParsePlan(f *testing.F) {
	f.Add("seed=1;scenario=tool;faults=runnerd-kill@semantic_tool.result#1+drop@tool")
	f.Add("seed=18446744073709551615;scenario=suspend;faults=")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePlan(s)
		if err != nil {
			return
		}
		back, err := ParsePlan(p.String())
		if err != nil {
			t.Fatalf("%q parsed, but its own form %q does not: %v", s, p.String(), err)
		}
		if back.String() != p.String() {
			t.Fatalf("round trip: %q became %q", p.String(), back.String())
		}
	})
}
