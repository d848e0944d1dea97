package pcrunner_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/catalog"
)

// TestDemoCatalogParses: scripts/demo's catalog passes run.prepare's checks
// (its catalogDigest is the one runnerd computes, tools.md §1), so editing
// it without its digest fails here rather than in the demo.
func TestDemoCatalogParses(t *testing.T) {
	raw, err := os.ReadFile("scripts/demo-catalog.json")
	require.NoError(t, err)
	cat, err := catalog.Parse(raw)
	require.NoError(t, err)
	require.Equal(t, 1, cat.Len())
}
