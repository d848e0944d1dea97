//go:build testhooks

package state

import "os"

// In test-hook builds, PCRUNNER_TESTHOOK_SKIP_STEP_SYNCS=1 sets
// skipStepSyncs, for the benchmark of runnerd's cost per message without
// its syncs (BenchmarkAgentMessageOnWire).
func init() { skipStepSyncs = os.Getenv("PCRUNNER_TESTHOOK_SKIP_STEP_SYNCS") == "1" }
