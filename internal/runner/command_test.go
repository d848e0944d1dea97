package runner

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// TestCommandHandlersCoverCatalogue: the loop's dispatch table has exactly
// one entry per type of prp's command catalogue, each with one way to run.
func TestCommandHandlersCoverCatalogue(t *testing.T) {
	require.Equal(t, prp.CommandTypes(), slices.Sorted(maps.Keys(commandHandlers)))
	for typ, h := range commandHandlers {
		require.True(t, (h.execute == nil) != (h.begin == nil), "%s needs exactly one of execute and begin", typ)
	}
}

// TestExecutorServesOnlyProviderCommands: every type the ACP executor
// serves is a catalogue type the loop does not own.
func TestExecutorServesOnlyProviderCommands(t *testing.T) {
	for typ := range (&agentExec{}).allHandlers() {
		h, ok := commandHandlers[typ]
		require.True(t, ok, "%s is not in the catalogue", typ)
		require.False(t, h.owned, "%s is the loop's own", typ)
	}
}
