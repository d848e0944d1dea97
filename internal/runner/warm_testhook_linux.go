//go:build testhooks

package runner

import (
	"os"
	"syscall"
)

// In test-hook builds, PCRUNNER_TESTHOOK_WARM_KILL=<point> makes runnerd
// SIGKILL itself at that warm kill point (warm.go), so the crash matrix
// kills it exactly at a phase boundary rather than at a guessed moment.
func init() {
	point := os.Getenv("PCRUNNER_TESTHOOK_WARM_KILL")
	if point == "" {
		return
	}
	warmKillPoint = func(p string) {
		if p == point {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way; nothing more may happen
		}
	}
}
