package sessiondir

import (
	"errors"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Queue and event files are created filled: the body goes into an unnamed
// O_TMPFILE inode of the directory, which is then linked under the
// temporary name the file would have been created with, so the names and
// renames on disk are the ones the spec gives (§6.4, §7.2), and the
// temporary name even appears complete. The point is the directory lock.
// A named create holds the directory's lock while the filesystem
// allocates the inode, and on an ext4 without a journal that allocation
// scans past every inode deleted in the last minute or more (its
// recently_deleted check), so the reader's unlink of the previous file
// spun on the lock all that time: about a quarter of pcwrap's CPU in the
// round trip behind the writer's creates, and as much of the events
// consumer's behind pcwrap's. Here the allocation runs outside the lock,
// and the link takes it only to add the name. The link goes through
// /proc/self/fd, since AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH.

// errNoTmpfile: the file was not created filled; the caller creates it
// by name, which also reports any real failure (no space, no
// permission) the way it always did.
var errNoTmpfile = errors.New("no unnamed temporary file")

// noTmpfile remembers that this system has no O_TMPFILE for the
// directory, or no /proc to link one through, so later files go the
// named way at once.
var noTmpfile atomic.Bool

// createFilled writes body to an unnamed inode of dirfd (mode perm) and
// links it as name. It fails with unix.EEXIST when name exists (nothing
// is replaced, a symlink is not followed), and with errNoTmpfile on any
// other failure: the named create is the fallback and the judge.
func createFilled(dirfd int, name string, body []byte, perm uint32) error {
	fd, err := openUnnamed(dirfd, perm)
	if err != nil {
		return err
	}
	// An inode never linked goes away with its last descriptor.
	defer unix.Close(fd)
	if writeAll(fd, body) != nil {
		return errNoTmpfile
	}
	return linkUnnamed(dirfd, fd, name)
}

// openUnnamed opens a new unnamed inode of dirfd for writing (mode perm),
// or fails with errNoTmpfile.
func openUnnamed(dirfd int, perm uint32) (int, error) {
	if noTmpfile.Load() {
		return -1, errNoTmpfile
	}
	fd, err := unix.Openat(dirfd, ".", unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, perm)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			noTmpfile.Store(true) // the filesystem or kernel has none
		}
		return -1, errNoTmpfile
	}
	return fd, nil
}

// linkUnnamed gives the unnamed inode fd the name name in dirfd. It fails
// with unix.EEXIST when name exists, and with errNoTmpfile otherwise.
func linkUnnamed(dirfd, fd int, name string) error {
	err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirfd, name, unix.AT_SYMLINK_FOLLOW)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EEXIST):
		return unix.EEXIST
	case !procSelfFD():
		noTmpfile.Store(true) // no /proc to link through
	}
	return errNoTmpfile
}

// procSelfFD reports whether /proc/self/fd can be used (a mounted /proc).
func procSelfFD() bool {
	var st unix.Stat_t
	return unix.Stat("/proc/self/fd", &st) == nil
}
