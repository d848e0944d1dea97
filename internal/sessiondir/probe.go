package sessiondir

import "fmt"

// Reasons of a failed birth-time probe (spec §5.2), part of the contract.
const (
	reasonBtimeUnreadable = "its reported creation time could not be read"
	reasonNotExclusive    = "its probe file could not be created exclusively (the path may already exist)"
	reasonProbeFstat      = "its own probe file's identity could not be read from the open file descriptor"
	reasonBtimeChanged    = "its reported creation time changed after a probe write"
)

// Labels of the two probed control paths (spec §5.1).
const (
	labelSessionDir = "sessionDir"
	labelStdinDir   = "stdinDir"
)

// ProbeError is a failed birth-time probe; its Error is the exact stderr
// line of spec §5.1 step 1.
type ProbeError struct {
	Label, Path, Reason string
}

func (e *ProbeError) Error() string {
	return fmt.Sprintf("Refusing to trust the process session control path %s (%s): %s. This filesystem or kernel gives no usable creation time. Terminating.", e.Label, e.Path, e.Reason)
}
