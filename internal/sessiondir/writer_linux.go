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
		return nil, controlPathError("open session dir", symlinkCause(unix.AT_FDCWD, sessionDir, err))
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
		return nil, controlPathError("open "+sub+" dir", err)
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

// controlPathError maps the errors the spec names to the client sentinels.
func controlPathError(op string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%s: %w", op, ErrClientSymlink)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s: %w", op, ErrClientNotDir)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// publish writes body to a fresh temporary sibling of final inside dir and
// renames it to final without replacing an existing file.
func publish(dir *os.File, final string, body []byte) (err error) {
	tmp, err := tmpName(final)
	if err != nil {
		return err
	}
	dfd := int(dir.Fd())
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
	return renameNoReplace(dfd, tmp, final)
}

// renameNoReplace renames old to new inside one directory and fails with
// ErrSeqTaken if new exists. Filesystems without RENAME_NOREPLACE get the
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
			return ErrSeqTaken
		}
		return fmt.Errorf("linkat: %w", err)
	}
	if errors.Is(err, unix.EEXIST) {
		return ErrSeqTaken
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
