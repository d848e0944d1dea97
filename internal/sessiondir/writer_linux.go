package sessiondir

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openControlDir opens sessionDir, then sub inside it through the held
// descriptor (sub "" returns sessionDir itself), never following a symlink
// on either step (spec §4, §10: control paths refuse symlinks).
func openControlDir(sessionDir, sub string) (*os.File, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Open(sessionDir, flags, 0)
	if err != nil {
		return nil, controlPathError(sessionDir, symlinkCause(unix.AT_FDCWD, sessionDir, err))
	}
	if sub == "" {
		return os.NewFile(uintptr(fd), sessionDir), nil
	}
	subfd, err := unix.Openat(fd, sub, flags, 0)
	if err != nil {
		err = symlinkCause(fd, sub, err)
	}
	unix.Close(fd)
	if err != nil {
		return nil, controlPathError(sessionDir+"/"+sub, err)
	}
	return os.NewFile(uintptr(subfd), sessionDir+"/"+sub), nil
}

// symlinkCause refines the ENOTDIR that O_DIRECTORY|O_NOFOLLOW reports for
// a symlink into ELOOP, so the refusal names the symlink.
func symlinkCause(dirfd int, name string, err error) error {
	if !errors.Is(err, unix.ENOTDIR) {
		return err
	}
	var st unix.Stat_t
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return unix.ELOOP
	}
	return err
}

// controlPathError maps the errors the spec names to the client sentinels;
// every message names the path once, and the caller adds no second name.
func controlPathError(path string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%s: %w", path, errClientSymlink)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s: %w", path, errClientNotDir)
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("no directory at %s: %w", path, err)
	}
	return fmt.Errorf("open %s: %w", path, err)
}

// publish writes body to a fresh temporary sibling of final inside dir and
// renames it to final without replacing an existing file.
func publish(dir *os.File, final string, body []byte) error {
	tmp, err := stage(dir, final, body)
	if err != nil {
		return err
	}
	if err := renameNoReplace(int(dir.Fd()), tmp, final); err != nil {
		_ = unix.Unlinkat(int(dir.Fd()), tmp, 0)
		return err
	}
	return nil
}

// stage writes body completely to a fresh temporary sibling of final
// inside dir and returns its name; the reader never lists it.
func stage(dir *os.File, final string, body []byte) (tmp string, err error) {
	tmp, err = tmpName(final)
	if err != nil {
		return "", err
	}
	if err := stageAs(dir, tmp, body); err != nil {
		return "", err
	}
	return tmp, nil
}

// stageAs writes body completely to the new temporary file tmp inside dir.
func stageAs(dir *os.File, tmp string, body []byte) (err error) {
	dfd := int(dir.Fd())
	switch err := createFilled(dfd, tmp, body, stdinFileMode); {
	case err == nil:
		return nil
	case errors.Is(err, unix.EEXIST):
		return fmt.Errorf("link temp file: %w", err) // as O_EXCL would
	}
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, stdinFileMode)
	if err != nil {
		return fmt.Errorf("openat temp file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	werr := writeAll(fd, body)
	cerr := unix.Close(fd)
	if werr != nil {
		return fmt.Errorf("write temp file: %w", werr)
	}
	if cerr != nil {
		return fmt.Errorf("close temp file: %w", cerr)
	}
	return nil
}

// rename publishes a staged temp file under final.
func rename(dir *os.File, tmp, final string) error {
	return renameNoReplace(int(dir.Fd()), tmp, final)
}

// removeStaged deletes a staged temp file; absent is fine.
func removeStaged(dir *os.File, tmp string) error {
	if err := unix.Unlinkat(int(dir.Fd()), tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unlinkat temp file: %w", err)
	}
	return nil
}

// present reports whether name exists in dir (not following a symlink).
func present(dir *os.File, name string) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("fstatat %s: %w", name, err)
}

// renameNoReplace renames old to new inside one directory and fails with
// errSeqTaken if new exists. Filesystems without RENAME_NOREPLACE get the
// equivalent link+unlink, which is just as exclusive.
func renameNoReplace(dfd int, old, new string) error {
	err := unix.Renameat2(dfd, old, dfd, new, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		err = unix.Linkat(dfd, old, dfd, new, 0)
		if err == nil {
			_ = unix.Unlinkat(dfd, old, 0)
			return nil
		}
		if errors.Is(err, unix.EEXIST) {
			return errSeqTaken
		}
		return fmt.Errorf("linkat: %w", err)
	}
	if errors.Is(err, unix.EEXIST) {
		return errSeqTaken
	}
	if err != nil {
		return fmt.Errorf("renameat2: %w", err)
	}
	return nil
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
