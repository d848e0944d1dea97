//go:build testhooks

package stdinpoll

// Test hooks, compiled only with -tags testhooks:
//
//	PCWRAP_TEST_NO_INOTIFY=1
//	    no inotify watch: tick scans alone drive the queue (scenario 58).
//	PCWRAP_TEST_INOTIFY_OVERFLOW=1
//	    every inotify event is lost as in a queue overflow, and the
//	    overflow is reported instead, so only the full rescan that an
//	    overflow triggers delivers the files (scenario 60).

import "os"

func hookNoInotify() bool { return os.Getenv("PCWRAP_TEST_NO_INOTIFY") == "1" }

// hookLoseEvent loses the event; the caller reports an overflow instead,
// which wakes a full rescan exactly as after IN_Q_OVERFLOW.
func hookLoseEvent() bool {
	return os.Getenv("PCWRAP_TEST_INOTIFY_OVERFLOW") == "1"
}
