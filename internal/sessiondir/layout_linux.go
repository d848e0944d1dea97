package sessiondir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxCommandFileBytes bounds a staged command.b64 (§2.3). The host stages
// payloads above 64 KiB of base64; 16 MiB is far above any real launch
// env and keeps a hostile file from exhausting memory.
const maxCommandFileBytes = 16 << 20

// dirMode is the mode of directories pcwrap creates (spec §4: 0700).
const dirMode = 0o700

// Dir is an open session directory: the session dir, stdin/ and (events
// mode) events/ held as fds for the process lifetime (spec §4 step 2).
// Every control file is opened relative to these fds, never re-resolved.
type Dir struct {
	Path      string
	StdinPath string
	Session   *os.File
	Stdin     *os.File
	Events    *os.File // nil in stdout mode
	lock      *os.File
}

// ErrLocked: another live pcwrap holds the session's .pcwrap.lock.
var ErrLocked = errors.New("another pcwrap holds the process session lock")

// Open creates the session directory if missing (mkdir -p, 0700), opens it
// without following a final symlink, creates and opens stdin/ (and events/
// when events is true) relative to it, and takes the .pcwrap.lock flock.
// A symlink is ErrSymlink and a non-directory ErrNotDir, so nothing is ever
// created through a link. path must be absolute.
func Open(path string, events bool) (d *Dir, err error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("open session dir: path is not absolute")
	}
	path = filepath.Clean(path)
	d = &Dir{Path: path, StdinPath: filepath.Join(path, StdinDir)}
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	var st unix.Stat_t
	if unix.Lstat(path, &st) == unix.ENOENT {
		if err := os.MkdirAll(path, dirMode); err != nil {
			return d, fmt.Errorf("create session dir: %w", err)
		}
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return d, classify(unix.AT_FDCWD, path, err)
	}
	d.Session = os.NewFile(uintptr(fd), path)
	if d.Stdin, err = openSub(d.Session, StdinDir); err != nil {
		return d, err
	}
	if events {
		if d.Events, err = openSub(d.Session, EventsDir); err != nil {
			return d, err
		}
	}
	if d.lock, err = lock(d.Session); err != nil {
		return d, err
	}
	return d, nil
}

// OpenEvents opens events/ of a session whose Open failed at stdin/, so a
// refusal there can still be reported as an event (spec §2.5).
func OpenEvents(path string) (*os.File, error) {
	fd, err := unix.Open(filepath.Clean(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	sess := os.NewFile(uintptr(fd), path)
	defer sess.Close()
	return openSub(sess, EventsDir)
}

// OpenEventsBehindLink opens the events/ directory that already exists in
// the directory path resolves to, following a refused symlinked session
// dir and creating nothing, so that refusal still reaches the host as an
// event, as the reference does (spec §2.5). events/ itself is not
// followed.
func OpenEventsBehindLink(path string) (*os.File, error) {
	fd, err := unix.Open(filepath.Clean(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open session dir: %w", err)
	}
	defer unix.Close(fd)
	efd, err := unix.Openat(fd, EventsDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", EventsDir, err)
	}
	return os.NewFile(uintptr(efd), filepath.Join(path, EventsDir)), nil
}

// openSub creates (if missing) and opens a subdirectory relative to dir.
func openSub(dir *os.File, name string) (*os.File, error) {
	dfd := int(dir.Fd())
	if err := unix.Mkdirat(dfd, name, dirMode); err != nil && err != unix.EEXIST {
		return nil, classify(dfd, name, err)
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, classify(dfd, name, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name)), nil
}

// classify maps an open/mkdir failure of a control path to ErrSymlink or
// ErrNotDir when lstat shows why; else it wraps the errno.
func classify(dirfd int, name string, err error) error {
	var st unix.Stat_t
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return ErrSymlink
		case unix.S_IFDIR:
		default:
			return ErrNotDir
		}
	}
	switch err {
	case unix.ELOOP:
		return ErrSymlink
	case unix.ENOTDIR:
		return ErrNotDir
	}
	return fmt.Errorf("open control path: %w", err)
}

// Close releases the held fds and the lock.
func (d *Dir) Close() {
	for _, f := range []*os.File{d.lock, d.Events, d.Stdin, d.Session} {
		if f != nil {
			f.Close()
		}
	}
}

// Capture runs the birth-time probe on the session dir then stdin/ and
// captures both identities (spec §5.1). The error's text is the exact
// message: a *ProbeError's own line, else the identity error.
func (d *Dir) Capture() (*Verifier, error) {
	if err := probe(int(d.Session.Fd()), labelSessionDir, d.Path); err != nil {
		return nil, err
	}
	if err := probe(int(d.Stdin.Fd()), labelStdinDir, d.StdinPath); err != nil {
		return nil, err
	}
	v := &Verifier{SessionPath: d.Path, StdinPath: d.StdinPath}
	var err error
	if v.Session, err = statIdentity(d.Path); err != nil {
		return nil, identityErr(err)
	}
	if v.Stdin, err = statIdentity(d.StdinPath); err != nil {
		return nil, identityErr(err)
	}
	return v, nil
}

// identityErr keeps the protocol sentinels as they are (their text is the
// message) and gives any other stat failure a plain message.
func identityErr(err error) error {
	if errors.Is(err, ErrSymlink) || errors.Is(err, ErrNotDir) {
		return err
	}
	return fmt.Errorf("capture identity: %w", err)
}

// ReadCommandFile reads the staged payload command.b64 relative to the
// held fd with O_NOFOLLOW (spec §2.3) and always deletes it, even when the
// read failed after open, so credentials never outlive the launch. found
// is false when no such file exists.
func (d *Dir) ReadCommandFile() (b []byte, found bool, err error) {
	dfd := int(d.Session.Fd())
	defer func() {
		if found {
			_ = unix.Unlinkat(dfd, CommandFile, 0)
		}
	}()
	fd, err := unix.Openat(dfd, CommandFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err == unix.ENOENT {
		return nil, false, fmt.Errorf("open %s: %w", CommandFile, err)
	}
	found = true
	if err != nil {
		return nil, true, fmt.Errorf("open %s: %w", CommandFile, err)
	}
	f := os.NewFile(uintptr(fd), CommandFile)
	defer f.Close()
	b, err = ReadRegular(int(f.Fd()), maxCommandFileBytes, nil)
	return b, true, err
}

// ErrTooLarge: a control file is above its size cap.
var ErrTooLarge = errors.New("file exceeds its size limit")

// errNotRegular: a control file is not a regular file.
var errNotRegular = errors.New("not a regular file")

// ReadRegular reads all of the open descriptor fd, which must be a
// regular file of at most max bytes (errNotRegular, ErrTooLarge
// otherwise), and leaves it open. It reads into buf's storage when that
// is large enough (the result aliases buf then), else into a new buffer.
// It is the one bounded control-file read: it takes a raw descriptor
// because the stdin reader opens every queue file this way (an *os.File
// would cost a fcntl and a failing epoll_ctl per file for nothing, since
// regular files are never polled); an *os.File caller passes
// int(f.Fd()) and keeps f open meanwhile.
func ReadRegular(fd int, max int64, buf []byte) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errNotRegular
	}
	if st.Size > max {
		return nil, ErrTooLarge
	}
	if int64(cap(buf)) < st.Size+1 {
		buf = make([]byte, st.Size+1) // +1 sees growth without a second read
	}
	buf = buf[:cap(buf)]
	n := 0
	for {
		if n == len(buf) {
			if int64(n) > max {
				return nil, ErrTooLarge
			}
			buf = append(buf, 0)[:n] // the file grew while read: room for more
			buf = buf[:cap(buf)]
		}
		// Never read more than one byte past max.
		want := min(len(buf), int(max+1)) - n
		m, err := unix.Read(fd, buf[n:n+want])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		if m == 0 {
			break
		}
		n += m
		// A short read that ends where fstat put the end is the end: the
		// read of 0 bytes that would confirm it is one syscall per queue
		// file for nothing. A file still growing fills the room instead
		// and is read on.
		if m < want && int64(n) == st.Size {
			break
		}
	}
	if int64(n) > max {
		return nil, ErrTooLarge
	}
	return buf[:n], nil
}

// ChildRecord is the body of .pcwrap.child (spec §2.4).
type ChildRecord struct {
	Pgid      int
	StartTime uint64
	// Cgroup is the child's cgroup directory (§8.3), "" without one.
	Cgroup string
}

// WriteChild writes .pcwrap.child (temp + rename via the held fd, 0600).
func (d *Dir) WriteChild(rec ChildRecord) error {
	body := fmt.Appendf(nil, `{"pgid":%d,"startTime":%d`, rec.Pgid, rec.StartTime)
	if rec.Cgroup != "" {
		q, err := json.Marshal(rec.Cgroup)
		if err != nil {
			return fmt.Errorf("encode child record: %w", err)
		}
		body = append(append(body, `,"cgroup":`...), q...)
	}
	body = append(body, '}')
	return writeAtomic(int(d.Session.Fd()), ChildFile, ChildFile+TmpSuffix, body)
}

// writeAtomic writes body to tmp (O_NOFOLLOW, 0600) and renames it to
// name, both relative to dirfd, so name only ever appears complete.
func writeAtomic(dirfd int, name, tmp string, body []byte) error {
	// Created filled under tmp (tmpfile_linux.go); a stale tmp left by a
	// crash is overwritten by name.
	if createFilled(dirfd, tmp, body, 0o600) == nil {
		return publishTmp(dirfd, tmp, name)
	}
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("openat %s: %w", tmp, err)
	}
	if err := writeAll(fd, body); err != nil {
		unix.Close(fd)
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := unix.Close(fd); err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	return publishTmp(dirfd, tmp, name)
}

// publishTmp renames the complete file tmp to name in dirfd; a failure
// removes tmp.
func publishTmp(dirfd int, tmp, name string) error {
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("renameat %s: %w", name, err)
	}
	return nil
}
