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
