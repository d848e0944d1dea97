package sessiondir

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// StatIdentity returns the identity of a control directory path without
// following a final symlink: statx(AT_SYMLINK_NOFOLLOW,
// STATX_BASIC_STATS|STATX_BTIME). A symlink is ErrSymlink, anything but a
// directory ErrNotDir; btime is 0 when STATX_BTIME is not returned.
func StatIdentity(path string) (Identity, error) {
	var st unix.Statx_t
	if err := statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, &st); err != nil {
		return Identity{}, fmt.Errorf("statx: %w", err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return Identity{}, ErrSymlink
	case unix.S_IFDIR:
	default:
		return Identity{}, ErrNotDir
	}
	return Identity{
		Dev:   unix.Mkdev(st.Dev_major, st.Dev_minor),
		Ino:   st.Ino,
		Btime: btimeOf(path, &st),
	}, nil
}

// statx wraps unix.Statx with an EINTR retry.
func statx(dirfd int, path string, flags int, st *unix.Statx_t) error {
	for {
		err := unix.Statx(dirfd, path, flags, unix.STATX_BASIC_STATS|unix.STATX_BTIME, st)
		if err != unix.EINTR {
			return err
		}
	}
}

// rawBtime is the birth time in ns, 0 when the kernel did not return it.
func rawBtime(st *unix.Statx_t) int64 {
	if st.Mask&unix.STATX_BTIME == 0 {
		return 0
	}
	return st.Btime.Sec*1e9 + int64(st.Btime.Nsec)
}

// errnoName is the symbolic name of an errno ("EACCES"), "" if unknown.
func errnoName(e syscall.Errno) string { return unix.ErrnoName(e) }
