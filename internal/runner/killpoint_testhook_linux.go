//go:build testhooks

package runner

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// In test-hook builds, PCRUNNER_TESTHOOK_KILL_AFTER selects a durable write
// after which runnerd SIGKILLs itself:
//
//	<eventType>         the first write that enqueues an event of that type
//	<commandType>#<k>   the k-th durable write (k ≥ 1) made once a command of
//	                    that type was received (the writes of other routines
//	                    in that window count too, so tests keep them idle)
func init() {
	sel := os.Getenv("PCRUNNER_TESTHOOK_KILL_AFTER")
	if sel == "" {
		return
	}
	cmdType, kStr, counted := strings.Cut(sel, "#")
	k, _ := strconv.ParseInt(kStr, 10, 64)
	var armed atomic.Bool
	var writes atomic.Int64
	hookCommandReceived = func(commandType string) {
		if counted && commandType == cmdType {
			armed.Store(true)
		}
	}
	hookDurableWrite = func(eventTypes []string) {
		hit := false
		if counted {
			hit = armed.Load() && writes.Add(1) == k
		} else {
			for _, t := range eventTypes {
				hit = hit || t == sel
			}
		}
		if hit {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way; nothing more may happen
		}
	}
}
