package stdinpoll

import (
	"errors"
	"fmt"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// read opens name relative to the held fd without following links, reads
// it whole (bounded), parses it, and deletes it before returning success:
// a file that cannot be deleted is not acted on (it would come back).
func (r *Reader) read(name string) (frame.Message, error) {
	dfd := int(r.cfg.Dir.Fd())
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return frame.Message{}, fmt.Errorf("open: %s", errText(err))
	}
	b, err := sessiondir.ReadRegular(fd, maxFileBytes, r.filebuf)
	unix.Close(fd)
	if cap(b) <= keepFileBuf {
		r.filebuf = b[:0] // reuse: ParseMessage copies what it keeps
	}
	if errors.Is(err, sessiondir.ErrTooLarge) {
		return frame.Message{}, fmt.Errorf("stdin file exceeds the %d-byte limit", maxFileBytes)
	}
	if err != nil {
		return frame.Message{}, err
	}
	if r.spare == nil && r.cfg.Buffer != nil {
		r.spare = r.cfg.Buffer()
	}
	msg, err := frame.ParseMessageInto(b, r.spare)
	if err != nil {
		return frame.Message{}, err
	}
	if err := r.unlink(dfd, name); err != nil && err != unix.ENOENT {
		return frame.Message{}, fmt.Errorf("unlink: %s", errText(err))
	}
	return msg, nil
}

// errText names an errno ("ELOOP") when it can, for messages without paths.
func errText(err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
	}
	return err.Error()
}

// list returns the names in stdin/ ending in ".json", sorted
// lexicographically, read through the held fd. It reuses its buffers, so
// an idle tick allocates nothing but the names it finds.
func (r *Reader) list() ([]string, error) {
	// Raw syscalls, like the identity check (sessiondir.Verifier.Verify):
	// this runs on every tick even when idle, and a regular syscall wakes
	// the runtime's sysmon from deep sleep into 20 µs polling.
	dfd := r.cfg.Dir.Fd()
	if _, _, e := unix.RawSyscall(unix.SYS_LSEEK, dfd, 0, 0); e != 0 {
		return nil, fmt.Errorf("lseek: %w", e)
	}
	r.names = r.names[:0]
	for {
		n, _, e := unix.RawSyscall(unix.SYS_GETDENTS64, dfd, uintptr(unsafe.Pointer(&r.dirbuf[0])), uintptr(len(r.dirbuf)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return nil, fmt.Errorf("getdents: %w", e)
		}
		if n == 0 {
			break
		}
		r.names = appendJSONNames(r.names, r.dirbuf[:n], int(dfd))
	}
	// A deleted directory lists empty rather than failing through the fd;
	// the identity check (by path) catches that.
	sort.Strings(r.names)
	return r.names, nil
}

// appendJSONNames parses linux_dirent64 records and appends the name of
// every regular file ending in ".json". Anything else (a directory, a
// symlink, a fifo) is not a queue file, as for the events reader
// (sessiondir.DirFS.List): a directory named 000000000001.json can
// neither be read nor removed, and listing it jammed the queue.
// DT_UNKNOWN (file systems without d_type) asks fstatat, not following
// links, relative to the held fd dfd.
func appendJSONNames(names []string, buf []byte, dfd int) []string {
	for len(buf) >= 19 {
		reclen := int(buf[16]) | int(buf[17])<<8
		if reclen < 19 || reclen > len(buf) {
			break
		}
		name := buf[19:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		typ := buf[18]
		if len(name) > len(sessiondir.JSONSuffix) && string(name[len(name)-len(sessiondir.JSONSuffix):]) == sessiondir.JSONSuffix &&
			(typ == unix.DT_REG || typ == unix.DT_UNKNOWN && isRegularAt(dfd, string(name))) {
			names = append(names, string(name))
		}
		buf = buf[reclen:]
	}
	return names
}

// isRegularAt reports whether name inside dfd is a regular file (a link is
// not followed).
func isRegularAt(dfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}
