package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// openDiagnosticsFiles creates dir (0700) when missing, opens it without
// following a symlink, checks that only its owner can access it, and opens
// runnerd.stdout.log and runnerd.stderr.log relative to the held directory
// fd (O_NOFOLLOW, 0600, truncated), so a path swap cannot redirect them.
func openDiagnosticsFiles(dir string) ([2]*os.File, error) {
	var files [2]*os.File
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return files, fmt.Errorf("mkdir: %w", err)
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return files, errors.New("the path is a symlink or not a directory")
		}
		return files, fmt.Errorf("open: %w", err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return files, fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&0o077 != 0 {
		return files, errors.New("the directory is accessible by group or other users (want 0700)")
	}
	for i, name := range []string{DiagnosticsStdoutName, DiagnosticsStderrName} {
		fd, err := unix.Openat(dfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == nil {
			if err = unix.Fstat(fd, &st); err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
				err = errors.New("not a regular file")
			}
			if err == nil {
				err = unix.Fchmod(fd, 0o600)
			}
			if err != nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			for _, f := range files[:i] {
				f.Close()
			}
			if errors.Is(err, unix.ELOOP) {
				err = errors.New("is a symlink")
			}
			return [2]*os.File{}, fmt.Errorf("open %s: %w", name, err)
		}
		files[i] = os.NewFile(uintptr(fd), name)
	}
	return files, nil
}
