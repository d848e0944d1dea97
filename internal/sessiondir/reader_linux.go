package sessiondir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// DirFS is the EventFS of a real events/ directory, reached through a held
// descriptor so a swapped path component cannot redirect reads or removals;
// files are opened with O_NOFOLLOW.
type DirFS struct {
	mu   sync.Mutex // serializes the seek+readdir of List
	dir  *os.File
	path string
	dev  uint64 // identity of the held directory, to notice removal
	ino  uint64
}

// OpenEventsDir opens <sessionDir>/events without following symlinks.
func OpenEventsDir(sessionDir string) (*DirFS, error) {
	dir, err := openControlDir(sessionDir, EventsDir)
	if err != nil {
		return nil, err // it names the path
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		dir.Close()
		return nil, fmt.Errorf("open events dir: fstat: %w", err)
	}
	return &DirFS{dir: dir, path: sessionDir + "/" + EventsDir, dev: st.Dev, ino: st.Ino}, nil
}

// Close releases the directory descriptor.
func (d *DirFS) Close() error { return d.dir.Close() }

// List implements EventFS. It fails with ErrSessionGone once the path no
// longer names the held directory: reading a removed directory through its
// descriptor would otherwise just look empty forever.
func (d *DirFS) List() ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var st unix.Stat_t
	err := unix.Lstat(d.path, &st)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return nil, ErrSessionGone
	case err != nil:
		return nil, fmt.Errorf("lstat events dir: %w", err)
	case st.Dev != d.dev || st.Ino != d.ino:
		return nil, ErrSessionGone
	}
	if _, err := d.dir.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("lseek: %w", err)
	}
	ents, err := d.dir.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("getdents: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), JSONSuffix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Read implements EventFS.
func (d *DirFS) Read(name string) ([]byte, error) {
	return readAt(d.dir, name, maxEventFileBytes, nil)
}

// ReadInto implements eventReadIntoFS.
func (d *DirFS) ReadInto(name string, buf []byte) ([]byte, error) {
	return readAt(d.dir, name, maxEventFileBytes, buf)
}

// Remove implements EventFS.
func (d *DirFS) Remove(name string) error {
	err := unix.Unlinkat(int(d.dir.Fd()), name, 0)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unlinkat: %w", err)
	}
	return nil
}

// readAt reads the regular file name inside dir, refusing a symlink,
// anything else than a regular file and anything larger than limit. The
// buffer is sized from fstat, not grown from 512 bytes as io.ReadAll
// would for a ~87 KiB data frame.
func readAt(dir *os.File, name string, limit int64, buf []byte) ([]byte, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("openat: %w", err)
	}
	defer unix.Close(fd)
	b, err := ReadRegular(fd, limit, buf)
	if errors.Is(err, ErrTooLarge) {
		return nil, errEventFileTooLarge
	}
	return b, err
}
