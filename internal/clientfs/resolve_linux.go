package clientfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// useOpenat2 is cleared the first time openat2 is unavailable (ENOSYS on
// kernels before 5.6, EPERM under a seccomp filter that denies it): from
// then on Go's os.Root resolves, which walks components with O_NOFOLLOW
// and is as strict, only slower.
var useOpenat2 atomic.Bool

func init() { useOpenat2.Store(true) }

// openat2 is unix.Openat2; tests replace it to play a kernel without it.
var openat2 = unix.Openat2

// maxResolveAttempts bounds the retries of openat2's EAGAIN, which it
// returns when a concurrent rename could have let `..` escape (openat2(2)).
const maxResolveAttempts = 16

// testHookBeforeRename, set by tests only, runs between a write's
// resolution and its rename (to move the directory away deterministically).
var testHookBeforeRename func()

// maxTempAttempts bounds the names tried for a write's temporary file.
const maxTempAttempts = 8

// resolveFlags confine a resolution to the root: no `..` above it, no
// absolute symlink, no symlink out, no /proc magic link (tools.md §8).
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY

// openFile opens rel beneath root for reading. O_NONBLOCK keeps the open of
// a FIFO from blocking; the caller then refuses anything not regular.
func openFile(root, rel string) (*os.File, error) {
	return openBeneath(root, rel, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK)
}

// openBeneath opens rel (clean, relative, no leading `..`) beneath root.
func openBeneath(root, rel string, flags int) (*os.File, error) {
	if useOpenat2.Load() {
		f, err := openat2Beneath(root, rel, flags)
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
			return f, classify(err)
		}
		useOpenat2.Store(false)
	}
	return rootBeneath(root, rel, flags)
}

func openat2Beneath(root, rel string, flags int) (*os.File, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root: %w", err)
	}
	defer unix.Close(rfd)
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolveFlags}
	for range maxResolveAttempts {
		fd, err := openat2(rfd, rel, &how)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("openat2: %w", err)
		}
		return os.NewFile(uintptr(fd), rel), nil
	}
	return nil, errRace
}

// osRootEscape is the text of os.Root's unexported escape error
// (os/file.go errPathEscapes); TestEscapesRefused pins it on both paths.
const osRootEscape = "path escapes from parent"

func rootBeneath(root, rel string, flags int) (*os.File, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, classify(fmt.Errorf("open root: %w", err))
	}
	defer r.Close()
	f, err := r.OpenFile(rel, flags, 0)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == osRootEscape {
			return nil, fmt.Errorf("%w: %w", errEscape, err)
		}
		return nil, classify(err)
	}
	return f, nil
}

// classify wraps a syscall failure in the failure it means.
func classify(err error) error {
	var kind error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EXDEV):
		kind = errEscape
	case errors.Is(err, unix.ELOOP):
		kind = errLoop
	case errors.Is(err, unix.ENOENT):
		kind = errNotFound
	case errors.Is(err, unix.ENOTDIR):
		kind = errNotDir
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		kind = errDenied
	case errors.Is(err, unix.EISDIR):
		kind = errIsDir
	default:
		return err
	}
	return fmt.Errorf("%w: %w", kind, err)
}

// writeFile replaces rel beneath root with content atomically: every step
// after the directory's resolution works on the directory's fd, so a
// concurrent rename or symlink swap of a path component cannot redirect it.
func writeFile(root, rel string, content []byte) error {
	dirRel, base := path.Dir(rel), path.Base(rel)
	d, err := mkdirBeneath(root, dirRel)
	if err != nil {
		return err
	}
	defer d.Close()
	dfd := int(d.Fd())
	mode, err := existingMode(dfd, base)
	if err != nil {
		return err
	}
	tmp, ino, err := writeTemp(dfd, base, content, mode)
	if err != nil {
		return err
	}
	if testHookBeforeRename != nil {
		testHookBeforeRename()
	}
	if err := unix.Renameat(dfd, tmp, dfd, base); err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return classify(fmt.Errorf("renameat: %w", err))
	}
	if err := unix.Fsync(dfd); err != nil {
		return classify(fmt.Errorf("fsync directory: %w", err))
	}
	return checkStillBeneath(root, dirRel, d, base, ino)
}

// checkStillBeneath undoes a write whose directory was moved out of the
// root between its resolution and the rename (another process renamed it):
// the file is removed again if it is still the one written, and the write
// fails. A directory moved within the root keeps the write.
func checkStillBeneath(root, dirRel string, d *os.File, base string, ino uint64) error {
	var held, now unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &held); err != nil {
		return classify(fmt.Errorf("fstat directory: %w", err))
	}
	again, err := openBeneath(root, dirRel, dirFlags)
	if err == nil {
		err = unix.Fstat(int(again.Fd()), &now)
		again.Close()
		if err == nil && now.Dev == held.Dev && now.Ino == held.Ino {
			return nil
		}
	}
	var st unix.Stat_t
	if unix.Fstatat(int(d.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Ino == ino && st.Dev == held.Dev {
		_ = unix.Unlinkat(int(d.Fd()), base, 0)
	}
	return errMoved
}

// mkdirBeneath opens dirRel beneath root, creating missing directories
// one component at a time; each mkdirat names one component in a
// directory already resolved beneath the root.
func mkdirBeneath(root, dirRel string) (*os.File, error) {
	d, err := openBeneath(root, dirRel, dirFlags)
	if err == nil || !errors.Is(err, errNotFound) || dirRel == "." {
		return d, err
	}
	cur, err := openBeneath(root, ".", dirFlags)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(dirRel, "/")
	for i, name := range parts {
		sub := strings.Join(parts[:i+1], "/")
		next, err := openBeneath(root, sub, dirFlags)
		if errors.Is(err, errNotFound) {
			if merr := unix.Mkdirat(int(cur.Fd()), name, newDirMode); merr != nil && merr != unix.EEXIST {
				cur.Close()
				return nil, classify(fmt.Errorf("mkdirat: %w", merr))
			}
			next, err = openBeneath(root, sub, dirFlags)
		}
		cur.Close()
		if err != nil {
			return nil, err
		}
		cur = next
	}
	return cur, nil
}

// existingMode is the permission bits to give the new file: the current
// file's, or newFileMode when there is none. The target must be a regular
// file: a rename over a symlink would replace the link, not write its
// target.
func existingMode(dfd int, base string) (uint32, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return newFileMode, nil
	case err != nil:
		return 0, classify(fmt.Errorf("fstatat: %w", err))
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return st.Mode & 0o7777, nil
	case unix.S_IFLNK:
		return 0, errSymlink
	case unix.S_IFDIR:
		return 0, errIsDir
	}
	return 0, errNotRegular
}

// writeTemp creates a fresh temporary file in the directory, writes and
// fsyncs content with mode, and returns its name and inode.
func writeTemp(dfd int, base string, content []byte, mode uint32) (string, uint64, error) {
	prefix := base
	if len(prefix) > 200 { // NAME_MAX 255 with room for the suffix
		prefix = prefix[:200]
	}
	for range maxTempAttempts {
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		name := "." + prefix + ".pcrunner-" + hex.EncodeToString(rnd[:]) + ".tmp"
		fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return "", 0, classify(fmt.Errorf("openat temp: %w", err))
		}
		ino, err := fill(fd, content, mode)
		if err != nil {
			_ = unix.Unlinkat(dfd, name, 0)
			return "", 0, err
		}
		return name, ino, nil
	}
	return "", 0, errors.New("create temp file: no free name")
}

// fill writes content to fd, sets mode (the umask does not apply), fsyncs
// and closes it.
func fill(fd int, content []byte, mode uint32) (uint64, error) {
	f := os.NewFile(uintptr(fd), "temp")
	defer f.Close()
	if _, err := f.Write(content); err != nil {
		return 0, classify(fmt.Errorf("write: %w", err))
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return 0, classify(fmt.Errorf("fchmod: %w", err))
	}
	if err := f.Sync(); err != nil {
		return 0, classify(fmt.Errorf("fsync: %w", err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, classify(fmt.Errorf("fstat: %w", err))
	}
	if err := f.Close(); err != nil {
		return 0, classify(fmt.Errorf("close: %w", err))
	}
	return st.Ino, nil
}
