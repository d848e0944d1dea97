//go:build !linux

package config

import (
	"errors"
	"os"
)

// openDiagnosticsFiles is Linux-only: runnerd ships for Linux sandboxes.
func openDiagnosticsFiles(string) ([2]*os.File, error) {
	return [2]*os.File{}, errors.New("--diagnostics-directory is supported on Linux only")
}
