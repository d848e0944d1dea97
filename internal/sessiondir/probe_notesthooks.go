//go:build !testhooks

package sessiondir

import "golang.org/x/sys/unix"

// Production build: every test hook is a no-op (see probe_testhooks.go).

func btimeOf(_ string, st *unix.Statx_t) int64 { return rawBtime(st) }

func hookBeforeProbe(int64) {}

func hookProbeFstat(_ int64, fd int, st *unix.Stat_t) error { return unix.Fstat(fd, st) }

func hookProbeLastCheck(int64, int, string) {}

// testHooks reports whether this build honours the test-hook env vars.
const testHooks = false
