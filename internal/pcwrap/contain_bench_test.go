package pcwrap

import (
	"io"
	"log/slog"
	"testing"
)

// BenchmarkContainmentSetup: what the containment adds before each
// spawn (subreaper, a cgroup where writable, the oom_score_adj and
// RLIMIT_NPROC changes and their restores), to compare with the start time of BenchmarkStartTime.
func BenchmarkContainmentSetup(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for b.Loop() {
		c := newContainment(log)
		restore := oomPolicy(DefaultOOMScoreAdj, log)
		restoreNproc := nprocPolicy(log)
		restoreNproc()
		restore()
		if c.cg != nil {
			_ = c.cg.Remove()
		}
		c.close()
	}
}
