package state

// skipStepSyncs makes a step's syncs no-ops: the store commit's (bbolt's
// NoSync) and the projection's data and directory syncs. Only a test-hook
// build sets it (stepsync_testhooks.go), so that a benchmark can measure
// what runnerd's work per message costs without them, on the same machine
// in the same run: the least any durable design could cost there. A
// production build never sets it.
var skipStepSyncs bool

// stepSync runs sync on fd unless skipStepSyncs.
func stepSync(sync func(fd int) error, fd int) error {
	if skipStepSyncs {
		return nil
	}
	return sync(fd)
}
