package sessiondir

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// openCounter opens the counter file relative to the held session dir,
// refusing a planted symlink.
func openCounter(dir *os.File) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), SeqFile, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, stdinFileMode)
	if err != nil {
		return nil, controlPathError("open "+SeqFile, err)
	}
	return os.NewFile(uintptr(fd), SeqFile), nil
}

// tryFlock takes an exclusive flock without blocking; false means another
// holder has it.
func tryFlock(f *os.File) (bool, error) {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EWOULDBLOCK), errors.Is(err, unix.EINTR):
		return false, nil
	}
	return false, fmt.Errorf("flock: %w", err)
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }
