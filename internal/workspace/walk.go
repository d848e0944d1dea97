package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Why a walk is incomplete (Snapshot.Incomplete).
const (
	IncompleteFiles      = "file cap"
	IncompleteDirs       = "directory cap"
	IncompleteRetained   = "retained content cap"
	IncompleteDirEntries = "directory entry cap"
	IncompleteTime       = "time bound"
	IncompleteUnreadable = "unreadable path"
	IncompleteRoot       = "root unreadable"
)

// readChunk is the read size of the streaming hash.
const readChunk = 64 << 10

// Entry is one regular file of a snapshot.
type Entry struct {
	Size         int64
	Mtime, Ctime int64 // nanoseconds since the epoch
	Ino, Dev     uint64
	// Hash is the SHA-256 of the content; Hashed is false for a file over
	// MaxHashBytes, which is known by its identity only.
	Hash   [sha256.Size]byte
	Hashed bool
	// Content is the retained content (nil when not retained); Binary is
	// a NUL in the first BinarySniffBytes or content not retained.
	Content []byte
	Binary  bool
}

// sameIdentity reports whether two entries have the same stat identity.
func (e *Entry) sameIdentity(o *Entry) bool {
	return e.Size == o.Size && e.Mtime == o.Mtime && e.Ctime == o.Ctime && e.Ino == o.Ino && e.Dev == o.Dev
}

// sameStat reports whether st has e's stat identity.
func (e *Entry) sameStat(st *unix.Stat_t) bool {
	return e.Size == st.Size && e.Mtime == st.Mtim.Nano() && e.Ctime == st.Ctim.Nano() && e.Ino == st.Ino && e.Dev == st.Dev
}

// sameContent reports whether two entries hold the same content: equal
// hashes, or equal identities when either is unhashed.
func (e *Entry) sameContent(o *Entry) bool {
	if e.Hashed && o.Hashed {
		return e.Hash == o.Hash
	}
	return e.sameIdentity(o)
}

// Snapshot is the state of a root at one walk.
type Snapshot struct {
	// Started is when the walk began (the stat cache's reference time).
	Started time.Time
	// Files are the regular files by wire path.
	Files map[string]*Entry
	// Dirs is how many directories below the root were entered.
	Dirs int
	// Retained is the content kept, in bytes.
	Retained int64
	// Read counts the files whose content this walk read (a stat-cache hit
	// is not read).
	Read int
	// Incomplete is why the walk stopped early or skipped a path it could
	// not read ("" for a complete walk); Path names that path when known.
	Incomplete string
	Path       string
}

// Complete reports whether the walk saw the whole root.
func (s *Snapshot) Complete() bool { return s != nil && s.Incomplete == "" }

// errStop ends a walk early; the snapshot says why.
var errStop = errors.New("walk stopped")

// walker is one walk's state.
type walker struct {
	ctx      context.Context
	root     *Root
	prev     *Snapshot
	snap     *Snapshot
	buf      []byte
	dents    []byte
	reusable time.Time // cached entries modified before this are reused unread
}

// Walk snapshots the root (§4.2, §4.3). prev, the baseline of an
// after-walk or nil, is the stat cache: a file whose identity is unchanged
// and whose mtime lies before RecentWindow ahead of prev's start is not
// read again. The walk stops when ctx ends (Incomplete = IncompleteTime)
// or at a cap; it never blocks on a FIFO or device and never follows a
// symlink.
func (r *Root) Walk(ctx context.Context, prev *Snapshot) *Snapshot {
	hint := 0
	if prev != nil {
		hint = len(prev.Files)
	}
	w := &walker{ctx: ctx, root: r, prev: prev,
		snap: &Snapshot{Started: time.Now(), Files: make(map[string]*Entry, hint)}}
	if prev != nil {
		w.reusable = prev.Started.Add(-RecentWindow)
	}
	fd, err := unix.Open(r.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		w.snap.Incomplete = IncompleteRoot
		return w.snap
	}
	_ = w.dir(fd, "")
	return w.snap
}

// stop marks the snapshot incomplete and ends the walk.
func (w *walker) stop(why, path string) error {
	w.snap.Incomplete, w.snap.Path = why, path
	return errStop
}

// dir walks the directory open as fd (which it closes) at wire path rel
// ("" for the root), its entries in byte order of names. Entries are
// opened relative to fd, never by re-resolving the directory's path.
func (w *walker) dir(fd int, rel string) error {
	defer unix.Close(fd)
	names, err := w.readNames(fd)
	if errors.Is(err, errTooManyEntries) {
		return w.stop(IncompleteDirEntries, rel)
	}
	if err != nil {
		return w.stop(IncompleteUnreadable, rel)
	}
	for _, name := range names {
		if err := w.entry(fd, rel, name); err != nil {
			return err
		}
	}
	return nil
}

// errTooManyEntries is a directory past MaxDirEntries.
var errTooManyEntries = errors.New("too many directory entries")

// direntBufBytes is the getdents buffer of a walk.
const direntBufBytes = 32 << 10

// readNames reads a directory's names ("." and ".." excluded), sorted,
// at most MaxDirEntries.
func (w *walker) readNames(fd int) ([]string, error) {
	if w.dents == nil {
		w.dents = make([]byte, direntBufBytes)
	}
	var names []string
	for {
		n, err := unix.Getdents(fd, w.dents)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			slices.Sort(names)
			return names, nil
		}
		_, _, names = unix.ParseDirent(w.dents[:n], -1, names)
		if len(names) > MaxDirEntries {
			return nil, errTooManyEntries
		}
	}
}

// entry visits one name of the directory dfd at wire path parent.
func (w *walker) entry(dfd int, parent, name string) error {
	if err := w.ctx.Err(); err != nil {
		return w.stop(IncompleteTime, parent)
	}
	rel := name
	if parent != "" {
		rel = parent + "/" + name
	}
	// The parent's path is valid and a name holds no '/' or NUL and is
	// never "." or "..": only the name's text and the length remain.
	if !utf8.ValidString(name) || strings.ContainsAny(name, "\n\r") ||
		(len(rel) > MaxPathChars && utf8.RuneCountInString(rel) > MaxPathChars) {
		return nil // dropped: no wire path can name it (§2)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // gone since the listing
		}
		return w.stop(IncompleteUnreadable, rel)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if skippedDirs[name] || w.root.excluded[rel] {
			return nil
		}
		w.snap.Dirs++
		if w.snap.Dirs > MaxDirs {
			return w.stop(IncompleteDirs, rel)
		}
		fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return w.stop(IncompleteUnreadable, rel)
		}
		return w.dir(fd, rel)
	case unix.S_IFREG:
		if len(w.snap.Files) >= MaxFiles {
			return w.stop(IncompleteFiles, rel)
		}
		return w.file(dfd, rel, name, &st)
	}
	return nil // symlink, FIFO, device, socket: never a workspace file (§4.2)
}

// identity is an entry with st's stat identity.
func identity(st *unix.Stat_t) *Entry {
	return &Entry{Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Ino: st.Ino, Dev: st.Dev}
}

// file records the regular file name of dfd (at wire path rel).
func (w *walker) file(dfd int, rel, name string, st *unix.Stat_t) error {
	if w.prev != nil {
		if old := w.prev.Files[rel]; old != nil && old.sameStat(st) &&
			time.Unix(0, old.Mtime).Before(w.reusable) {
			return w.keep(rel, old)
		}
	}
	if st.Size > MaxHashBytes {
		e := identity(st)
		e.Binary = true
		w.snap.Files[rel] = e
		return nil
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
			return nil // replaced by a symlink or gone since the stat
		}
		return w.stop(IncompleteUnreadable, rel)
	}
	defer unix.Close(fd)
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		return w.stop(IncompleteUnreadable, rel)
	}
	if fst.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil // swapped for a FIFO or device since the stat: never read
	}
	e := identity(&fst)
	if fst.Size > MaxHashBytes {
		e.Binary = true
		w.snap.Files[rel] = e
		return nil
	}
	retain := fst.Size <= MaxFileRetainBytes
	if retain && w.snap.Retained+fst.Size > MaxRetainedBytes {
		return w.stop(IncompleteRetained, rel)
	}
	if err := w.read(fd, e, retain); err != nil {
		return err
	}
	w.snap.Read++
	return w.keep(rel, e)
}

// keep adds an entry, counting its retained content.
func (w *walker) keep(rel string, e *Entry) error {
	if w.snap.Retained+int64(len(e.Content)) > MaxRetainedBytes {
		return w.stop(IncompleteRetained, rel)
	}
	w.snap.Retained += int64(len(e.Content))
	w.snap.Files[rel] = e
	return nil
}

// read hashes fd's content while streaming it, at most e.Size bytes (a
// file growing during the walk is read as far as its size at the fstat),
// keeping it when retain is set.
func (w *walker) read(fd int, e *Entry, retain bool) error {
	if w.buf == nil {
		w.buf = make([]byte, readChunk)
	}
	h := sha256.New()
	var content []byte
	if retain {
		content = make([]byte, 0, e.Size)
	}
	var head []byte
	for left := e.Size; left > 0; {
		if err := w.ctx.Err(); err != nil {
			return w.stop(IncompleteTime, "")
		}
		n, err := unix.Read(fd, w.buf[:min(int64(len(w.buf)), left)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return w.stop(IncompleteUnreadable, "")
		}
		if n == 0 {
			break // shrank during the walk
		}
		chunk := w.buf[:n]
		h.Write(chunk)
		if len(head) < BinarySniffBytes {
			head = append(head, chunk[:min(n, BinarySniffBytes-len(head))]...)
		}
		if retain {
			content = append(content, chunk...)
		}
		left -= int64(n)
	}
	h.Sum(e.Hash[:0])
	e.Hashed = true
	e.Binary = !retain || bytes.IndexByte(head, 0) >= 0
	if retain {
		e.Content = content
	}
	return nil
}
