package sessiondir

import (
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// probeCounter numbers probe files process-wide, from 1 (spec §5.2).
var probeCounter atomic.Int64

// ProbeName returns the probe file name for pcwrap's pid and counter n.
func ProbeName(pid int, n int64) string {
	return ProbePrefix + strconv.Itoa(pid) + "-" + strconv.FormatInt(n, 10)
}

// probe runs the birth-time probe of spec §5.2 on the directory held by
// dirfd (path is only for messages and test hooks). It rejects a birth
// time that moves when the directory is written, i.e. one copied from
// ctime. The probe file is created exclusively without following links,
// its identity is taken from the open fd, and it is removed only if a
// final lstat still shows that identity: a peer's replacement stays.
func probe(dirfd int, label, path string) error {
	n := probeCounter.Add(1)
	fail := func(reason string) error { return &ProbeError{Label: label, Path: path, Reason: reason} }

	before, err := dirBtime(dirfd, path)
	if err != nil {
		return fail(reasonBtimeUnreadable)
	}
	name := ProbeName(os.Getpid(), n)
	hookBeforeProbe(n)
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fail(reasonNotExclusive)
	}
	var own unix.Stat_t
	err = hookProbeFstat(n, fd, &own)
	unix.Close(fd)
	if err != nil {
		return fail(reasonProbeFstat) // left in place: nothing verified to remove
	}
	hookProbeLastCheck(n, dirfd, name)
	var now unix.Stat_t
	if unix.Fstatat(dirfd, name, &now, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		now.Dev == own.Dev && now.Ino == own.Ino && now.Ctim == own.Ctim {
		_ = unix.Unlinkat(dirfd, name, 0)
	}
	after, err := dirBtime(dirfd, path)
	if err != nil {
		return fail(reasonBtimeUnreadable)
	}
	if before != after {
		return fail(reasonBtimeChanged)
	}
	return nil
}

// dirBtime reads the birth time of the directory held by dirfd.
func dirBtime(dirfd int, path string) (int64, error) {
	var st unix.Statx_t
	if err := statx(dirfd, "", unix.AT_EMPTY_PATH, &st); err != nil {
		return 0, err
	}
	return btimeOf(path, &st), nil
}
