package config

import (
	"encoding/json"
	"runtime/debug"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// buildMetadataSchema names the --build-metadata document (prp.md §13).
const buildMetadataSchema = "paperclip-runner/runnerd-build-metadata/v1"

// Transport modes runnerd implements (prp.md §1.1), in the reference's order.
const (
	transportDialWSLoopback = "dial_ws_loopback"
	transportDialWSS        = "dial_wss"
	transportListenWS       = "listen_ws"
)

// Values of the build metadata. The spec names the fields but not every
// value; these were checked against the reference (read, not copied):
//   - binaryName "paperclip-runnerd", packageName "@paperclipai/paperclip-runner"
//     (R-bin build_metadata).
//   - binaryContractVersion 2, nativeExecutionVersion 1, harnessDriverVersion 1:
//     the newest server rejects any other value ("Incompatible daemon …") and
//     refuses a preinstalled runner with contract 1
//     (runner_remote_artifact_contract_incompatible).
//   - prp.name "paperclip.runner" (the PRP protocol name, prp.md §0);
//     minimumVersion 1, maximumVersion 2: runnerd speaks v1..v2 (prp.md §2.5),
//     and the newest server requires maximumVersion >= 2.
//   - durableSessionCapabilities: the server requires both
//     "unlimited_runtime" (a 0 lifetime is accepted: --max-lifetime-ms 0)
//     and "connection_lease_renewal" (lease_renew, prp.md §5) before it
//     reuses a preinstalled runner.
//   - capabilities: the reference lists Codex-specific features
//     ("codex.warm-attachment.passive-notices.v1"), which runnerd does not
//     claim; it lists "history.output_bodies.v1" (beyond, workspace.md
//     §7.1): long texts travel as output bodies on v2 leases. Always an
//     array, never null.
const (
	metadataBinaryName             = "paperclip-runnerd"
	metadataPackageName            = "@paperclipai/paperclip-runner"
	metadataBinaryContractVersion  = 2
	metadataNativeExecutionVersion = 1
	metadataHarnessDriverVersion   = 1
	metadataPRPName                = "paperclip.runner"
	metadataPRPMinimumVersion      = 1
	metadataPRPMaximumVersion      = 2
)

// Version is runnerd's package version, reported as packageVersion. Release
// builds set it with -ldflags "-X github.com/pcrunner/pcrunner/internal/runner/config.Version=…";
// otherwise it is the module version from the build info, else devVersion.
var Version = ""

// devVersion is packageVersion for a build without a version (the server
// only requires a non-empty string).
const devVersion = "0.0.0-dev"

// buildMetadata is the JSON --build-metadata prints. Field order follows
// prp.md §13.
type buildMetadata struct {
	Schema                     string      `json:"schema"`
	BinaryName                 string      `json:"binaryName"`
	PackageName                string      `json:"packageName"`
	PackageVersion             string      `json:"packageVersion"`
	BinaryContractVersion      int         `json:"binaryContractVersion"`
	NativeExecutionVersion     int         `json:"nativeExecutionVersion"`
	HarnessDriverVersion       int         `json:"harnessDriverVersion"`
	PRP                        metadataPRP `json:"prp"`
	PRPTransportModes          []string    `json:"prpTransportModes"`
	Capabilities               []string    `json:"capabilities"`
	DurableSessionCapabilities []string    `json:"durableSessionCapabilities"`
}

// metadataPRP is the "prp" member of buildMetadata.
type metadataPRP struct {
	Name           string `json:"name"`
	MinimumVersion int    `json:"minimumVersion"`
	MaximumVersion int    `json:"maximumVersion"`
}

// metadata returns this build's metadata.
func metadata() buildMetadata {
	return buildMetadata{
		Schema:                 buildMetadataSchema,
		BinaryName:             metadataBinaryName,
		PackageName:            metadataPackageName,
		PackageVersion:         packageVersion(),
		BinaryContractVersion:  metadataBinaryContractVersion,
		NativeExecutionVersion: metadataNativeExecutionVersion,
		HarnessDriverVersion:   metadataHarnessDriverVersion,
		PRP: metadataPRP{
			Name:           metadataPRPName,
			MinimumVersion: metadataPRPMinimumVersion,
			MaximumVersion: metadataPRPMaximumVersion,
		},
		PRPTransportModes:          []string{transportDialWSLoopback, transportDialWSS, transportListenWS},
		Capabilities:               []string{prp.OutputBodiesCapability},
		DurableSessionCapabilities: []string{"unlimited_runtime", "connection_lease_renewal"},
	}
}

// MarshalMetadata returns the metadata as one line of JSON plus a newline,
// exactly what --build-metadata prints on stdout.
func MarshalMetadata() []byte {
	b, err := json.Marshal(metadata())
	if err != nil {
		// Only fixed strings and ints: Marshal cannot fail.
		panic("marshal build metadata: " + err.Error())
	}
	return append(b, '\n')
}

func packageVersion() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return devVersion
}
