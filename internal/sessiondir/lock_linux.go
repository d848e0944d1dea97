package sessiondir

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// lock opens .pcwrap.lock relative to the held session fd (O_CREAT,
// O_NOFOLLOW, O_CLOEXEC) and takes an exclusive, non-blocking flock that
// lasts until the returned file is closed or the process dies. A consumer
// can tell whether a wrapper still runs with flock -n, without any pid.
func lock(dir *os.File) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), LockFile, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, classifyFile(err)
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err == unix.EWOULDBLOCK {
		unix.Close(fd)
		return nil, ErrLocked
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("flock %s: %w", LockFile, err)
	}
	return os.NewFile(uintptr(fd), LockFile), nil
}

// classifyFile maps ELOOP on a control file to ErrSymlink.
func classifyFile(err error) error {
	if err == unix.ELOOP {
		return ErrSymlink
	}
	return fmt.Errorf("open %s: %w", LockFile, err)
}

// lockSettle is how long WrapperGone waits before it looks at an
// unlocked .pcwrap.lock a second time: pcwrap creates the file a moment
// (microseconds) before it locks it, so one look could catch a starting
// wrapper in between.
const lockSettle = 50 * time.Millisecond

// maxProcLocksBytes bounds the read of /proc/locks (a line per lock held on
// the machine, about 60 bytes each).
const maxProcLocksBytes = 4 << 20

// WrapperGone reports whether the session's pcwrap has ended: its
// .pcwrap.lock exists and no process holds a flock on it, at two looks
// lockSettle apart. A missing lock file is not an end (pcwrap takes the lock
// last when it starts). The probe only reads /proc/locks: taking the lock,
// even shared and for an instant, could make a starting pcwrap's own
// non-blocking lock fail. Where /proc/locks cannot be read, it reports
// false: not known to have ended.
func WrapperGone(ctx context.Context, sessionDir string) (bool, error) {
	for look := 0; ; look++ {
		held, exists, err := lockHeld(sessionDir)
		if err != nil || !exists || held {
			return false, err
		}
		if look == 1 {
			return true, nil
		}
		t := time.NewTimer(lockSettle)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

// lockHeld reports whether sessionDir's .pcwrap.lock exists and whether
// /proc/locks lists a flock on it.
func lockHeld(sessionDir string) (held, exists bool, err error) {
	root, err := openControlDir(sessionDir, "")
	if err != nil {
		return false, false, err
	}
	defer root.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(root.Fd()), LockFile, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return false, false, nil
		}
		return false, false, fmt.Errorf("stat %s: %w", LockFile, err)
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return false, true, fmt.Errorf("read lock table: %w", err)
	}
	defer f.Close()
	// /proc/locks names a file as MAJOR:MINOR:INODE, the device numbers in
	// hex (fs/locks.c lock_get_status).
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	sc := bufio.NewScanner(io.LimitReader(f, maxProcLocksBytes))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if slices.Contains(fields, "FLOCK") && slices.Contains(fields, id) {
			return true, true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, true, fmt.Errorf("read lock table: %w", err)
	}
	return false, true, nil
}
