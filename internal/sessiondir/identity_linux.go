package sessiondir

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// statIdentity returns the identity of a control directory path without
// following a final symlink: statx(AT_SYMLINK_NOFOLLOW,
// STATX_BASIC_STATS|STATX_BTIME). A symlink is ErrSymlink, anything but a
// directory ErrNotDir; btime is 0 when STATX_BTIME is not returned.
func statIdentity(path string) (identity, error) {
	var st unix.Statx_t
	if err := statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, &st); err != nil {
		return identity{}, fmt.Errorf("statx: %w", err)
	}
	return identityOf(path, &st)
}

// rawStatIdentity is statIdentity for the 50 ms verification path: the
// path is pre-encoded (no allocation) and statx is issued as a raw
// syscall. A regular syscall wakes the Go runtime's sysmon from its deep
// sleep and resets it to 20 µs polling, about fifty extra wake-ups per
// tick, which alone would blow the idle CPU budget (5 s < 10 ms). statx of
// a directory does not block for long; the reference's own check is a
// synchronous lstat on its only thread.
func rawStatIdentity(path string, cpath []byte) (identity, error) {
	var st unix.Statx_t
	cwd := unix.AT_FDCWD // a variable: the negative constant does not convert
	for {
		_, _, e := unix.RawSyscall6(unix.SYS_STATX, uintptr(cwd), uintptr(unsafe.Pointer(&cpath[0])),
			uintptr(unix.AT_SYMLINK_NOFOLLOW), uintptr(unix.STATX_BASIC_STATS|unix.STATX_BTIME), uintptr(unsafe.Pointer(&st)), 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return identity{}, fmt.Errorf("statx: %w", e)
		}
		break
	}
	return identityOf(path, &st)
}

// identityOf is the identity of a statx result for path: a directory's
// (dev, ino, btime), or ErrSymlink / ErrNotDir.
func identityOf(path string, st *unix.Statx_t) (identity, error) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return identity{}, ErrSymlink
	case unix.S_IFDIR:
	default:
		return identity{}, ErrNotDir
	}
	return identity{
		Dev:   unix.Mkdev(st.Dev_major, st.Dev_minor),
		Ino:   st.Ino,
		Btime: btimeOf(path, st),
	}, nil
}

// cString returns path NUL-terminated for a raw syscall.
func cString(path string) []byte {
	b := make([]byte, len(path)+1)
	copy(b, path)
	return b
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
