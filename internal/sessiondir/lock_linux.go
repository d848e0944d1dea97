package sessiondir

import (
	"fmt"
	"os"

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

// WrapperGone reports whether the session's pcwrap has ended: its
// .pcwrap.lock exists and can be locked, so no process holds it. A
// missing lock file is not an end (pcwrap takes the lock last when it
// starts), so WrapperGone is false for a session that is still starting.
// The probe takes a shared, non-blocking flock and drops it at once.
func WrapperGone(sessionDir string) (bool, error) {
	root, err := openControlDir(sessionDir, "")
	if err != nil {
		return false, err
	}
	defer root.Close()
	fd, err := unix.Openat(int(root.Fd()), LockFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return false, nil
	}
	if err != nil {
		return false, classifyFile(err)
	}
	defer unix.Close(fd)
	for {
		err = unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	switch err {
	case nil:
		_ = unix.Flock(fd, unix.LOCK_UN)
		return true, nil
	case unix.EWOULDBLOCK:
		return false, nil
	}
	return false, fmt.Errorf("flock %s: %w", LockFile, err)
}
