//go:build testhooks

package agent

// Test hooks of the agent's durability step, compiled only with
// -tags testhooks, so a crash test can SIGKILL runnerd at an exact
// point. Each is driven by one environment variable:
//
//	PCRUNNER_TEST_PAUSE_BEFORE_PUBLISH_MS=<ms>
//	    sleep <ms> after the write that records a staged prompt and before
//	    the prompt is published (prp.md §7.2 item 8's window), with a line
//	    on stderr as the pause begins and another as it ends, so the test
//	    kills inside the window and knows whether it did.

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// hookBeforePublish opens the window between a prompt's reservation and
// its rename.
func hookBeforePublish() {
	if ms, err := strconv.Atoi(os.Getenv("PCRUNNER_TEST_PAUSE_BEFORE_PUBLISH_MS")); err == nil && ms > 0 {
		fmt.Fprintln(os.Stderr, "testhook: paused before publish")
		time.Sleep(time.Duration(ms) * time.Millisecond)
		fmt.Fprintln(os.Stderr, "testhook: publishing")
	}
}
