package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRelativeStateDirBecomesAbsolute: runnerd refuses a relative
// --state-dir, so prpctl resolves its own against its working directory.
func TestRelativeStateDirBecomesAbsolute(t *testing.T) {
	o, err := parseOptions([]string{"--mode", "dial", "--state-dir", "rel/state"}, io.Discard)
	require.NoError(t, err)
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.Equal(t, filepath.Join(wd, "rel/state"), o.stateDir)
}
