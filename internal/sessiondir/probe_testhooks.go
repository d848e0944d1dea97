//go:build testhooks

package sessiondir

// Test hooks for the identity and probe code, compiled only with
// -tags testhooks (spec §2.2 "test hook"). They stand in for the
// reference's Node preloads. Each is driven by one environment variable:
//
//	PCWRAP_TEST_FAKE_BTIME=<path>=zero|ctime[;<path>=…]
//	    statx of that directory path reports btime 0, or btime = ctime.
//	PCWRAP_TEST_PAUSE_BEFORE_PROBE=<n>:<ms>
//	    sleep <ms> before creating probe file n (a peer plants a path).
//	PCWRAP_TEST_PROBE_SWAP=<n>:file|dir|symlink
//	    just before the final lstat of probe n, replace the probe with a
//	    peer's regular file (content "peer"), directory, or symlink to
//	    <dir>/probe-swap-target.
//	PCWRAP_TEST_FSTAT_FAILURE_PROBE=<n>
//	    fstat of probe n's open fd fails with EIO.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// testHooks reports whether this build honours the test-hook env vars.
const testHooks = true

func btimeOf(path string, st *unix.Statx_t) int64 {
	for _, kv := range strings.Split(os.Getenv("PCWRAP_TEST_FAKE_BTIME"), ";") {
		p, mode, ok := strings.Cut(kv, "=")
		if !ok || filepath.Clean(p) != filepath.Clean(path) {
			continue
		}
		switch mode {
		case "zero":
			return 0
		case "ctime":
			return st.Ctime.Sec*1e9 + int64(st.Ctime.Nsec)
		}
	}
	return rawBtime(st)
}

// hookN parses "<n>:<rest>" from env var k and returns rest when n matches.
func hookN(k string, n int64) (string, bool) {
	ns, rest, _ := strings.Cut(os.Getenv(k), ":")
	if v, err := strconv.ParseInt(ns, 10, 64); err == nil && v == n {
		return rest, true
	}
	return "", false
}

func hookBeforeProbe(n int64) {
	if rest, ok := hookN("PCWRAP_TEST_PAUSE_BEFORE_PROBE", n); ok {
		if ms, err := strconv.Atoi(rest); err == nil && ms > 0 && ms <= 10000 {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
	}
}

func hookProbeFstat(n int64, fd int, st *unix.Stat_t) error {
	if v := os.Getenv("PCWRAP_TEST_FSTAT_FAILURE_PROBE"); v == strconv.FormatInt(n, 10) {
		return unix.EIO
	}
	return unix.Fstat(fd, st)
}

func hookProbeLastCheck(n int64, dirfd int, name string) {
	kind, ok := hookN("PCWRAP_TEST_PROBE_SWAP", n)
	if !ok {
		return
	}
	_ = unix.Unlinkat(dirfd, name, 0)
	switch kind {
	case "file":
		if fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600); err == nil {
			_, _ = unix.Write(fd, []byte("peer"))
			unix.Close(fd)
		}
	case "dir":
		_ = unix.Mkdirat(dirfd, name, 0o700)
	case "symlink":
		_ = unix.Symlinkat("probe-swap-target", dirfd, name)
	}
}
