package config

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBuildMetadataShape checks every field prp.md §13 lists, with the values
// and JSON types the newest server verifies before it reuses a runner.
func TestBuildMetadataShape(t *testing.T) {
	raw := MarshalMetadata()
	require.True(t, bytes.HasSuffix(raw, []byte("}\n")))
	require.Equal(t, 1, bytes.Count(raw, []byte("\n")), "one line")

	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	require.ElementsMatch(t, []string{
		"schema", "binaryName", "packageName", "packageVersion", "binaryContractVersion",
		"nativeExecutionVersion", "harnessDriverVersion", "prp", "prpTransportModes",
		"capabilities", "durableSessionCapabilities",
	}, keys(m))
	require.Equal(t, "paperclip-runner/runnerd-build-metadata/v1", m["schema"])
	require.Equal(t, "paperclip-runnerd", m["binaryName"])
	require.Equal(t, "@paperclipai/paperclip-runner", m["packageName"])
	require.IsType(t, "", m["packageVersion"])
	require.NotEmpty(t, m["packageVersion"])
	require.EqualValues(t, 2, m["binaryContractVersion"])
	require.EqualValues(t, 1, m["nativeExecutionVersion"])
	require.EqualValues(t, 1, m["harnessDriverVersion"])
	require.Equal(t, map[string]any{"name": "paperclip.runner", "minimumVersion": float64(1), "maximumVersion": float64(2)}, m["prp"])
	require.Equal(t, []any{"dial_ws_loopback", "dial_wss", "listen_ws"}, m["prpTransportModes"])
	require.Equal(t, []any{"history.output_bodies.v1"}, m["capabilities"], "workspace.md §7.1")
	require.Subset(t, m["durableSessionCapabilities"], []any{"unlimited_runtime", "connection_lease_renewal"})
}

func TestPackageVersionOverride(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "1.2.3"
	require.Equal(t, "1.2.3", metadata().PackageVersion)
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
