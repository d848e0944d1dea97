package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// openDiagnosticsFiles creates dir (0700) when missing, opens it without
// following a symlink, checks that only its owner can access it, keeps the
// previous process's runnerd.stdout.log and runnerd.stderr.log as *.1, and
// opens fresh ones, all relative to the held directory fd (O_NOFOLLOW,
// 0600), so a path swap cannot redirect them.
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
		err := rotateDiagnosticsFile(dfd, name)
		if err != nil {
			for _, f := range files[:i] {
				f.Close()
			}
			return [2]*os.File{}, fmt.Errorf("keep previous %s: %w", name, err)
		}
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

// rotateDiagnosticsFile renames dir/name, the previous process's file, to
// name+DiagnosticsPreviousSuffix (replacing the one before it), so the log
// of a life that crashed survives the restart that follows. The kept file
// is made 0600 and cut to its newest half (behind droppedMarker) when it
// exceeds maxDiagnosticsLogBytes, which only a file runnerd did not write
// can. A symlink or other non-regular file at name is refused, as when
// opening it; a missing one is fine.
func rotateDiagnosticsFile(dfd int, name string) error {
	fd, err := unix.Openat(dfd, name, unix.O_RDWR|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ELOOP):
		return errors.New("is a symlink")
	case err != nil:
		return fmt.Errorf("openat: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("not a regular file")
	}
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return fmt.Errorf("fchmod: %w", err)
	}
	if st.Size > maxDiagnosticsLogBytes {
		l := &diagLog{f: f, size: st.Size}
		if err := l.dropOlderHalf(); err != nil {
			return fmt.Errorf("bound: %w", err)
		}
	}
	if err := unix.Renameat(dfd, name, dfd, name+DiagnosticsPreviousSuffix); err != nil {
		return fmt.Errorf("renameat: %w", err)
	}
	return nil
}
