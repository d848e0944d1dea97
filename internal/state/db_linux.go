package state

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

const (
	// dbLockTimeout bounds the wait for the store's lock: another live
	// runnerd on the same directory holds it.
	dbLockTimeout = time.Second
	// dbMetaBytes is what a snapshot reads of the store's two meta pages:
	// bbolt's page size is the OS page size, at most 64 KiB.
	dbMetaBytes = 2 * 64 * 1024
)

// errStoreLocked: another process holds the store open for writing.
var errStoreLocked = errors.New("the state store is held by another runnerd")

// statName reports whether name exists in the directory as a regular file
// of this user; a symlink or anything else is unsafe.
func (d *dirHandle) statName(name string) (exists bool, size int64, err error) {
	var st unix.Stat_t
	err = unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("stat %s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, 0, fmt.Errorf("open %s: %w: not a regular file", name, errUnsafePath)
	}
	if int(st.Uid) != os.Geteuid() {
		return false, 0, fmt.Errorf("open %s: %w: owned by another user", name, errUnsafePath)
	}
	return true, st.Size, nil
}

// openDBFile opens name in the directory without following a symlink,
// refuses a file that is not this user's regular file, and pins its mode
// to 0600 (bbolt's OpenFile hook).
func (d *dirHandle) openDBFile(name string, flag int) (*os.File, error) {
	fd, err := unix.Openat(d.fd, name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, fileMode)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("open %s: %w: symlink", name, errUnsafePath)
	case err != nil:
		return nil, fmt.Errorf("openat %s: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("fstat %s: %w", name, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("open %s: %w: not a regular file", name, errUnsafePath)
	case int(st.Uid) != os.Geteuid():
		err = fmt.Errorf("open %s: %w: owned by another user", name, errUnsafePath)
	case flag&(unix.O_WRONLY|unix.O_RDWR) != 0 && st.Mode&0o777 != fileMode:
		if e := unix.Fchmod(fd, fileMode); e != nil {
			err = fmt.Errorf("fchmod %s: %w", name, e)
		}
	}
	if err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.path, name)), nil
}

// checkDB checks an existing store file before bbolt opens it for
// writing (checkStoreFile); a missing one is left to openDB to create.
func (d *dirHandle) checkDB(name string) error {
	f, err := d.openDBFile(name, unix.O_RDONLY)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat state store: %w", err)
	}
	return checkStoreFile(f, fi.Size())
}

// openDB opens (creating when absent) the store file name for writing. An
// existing file is checked first, and a panic of bbolt's is an error: a
// damaged file gives errStoreDamaged, never a crash.
func (d *dirHandle) openDB(name string) (db *bolt.DB, err error) {
	if err := d.checkDB(name); err != nil {
		return nil, err
	}
	err = guardStore(func() (err error) { db, err = d.openBolt(name); return err })
	return db, err
}

func (d *dirHandle) openBolt(name string) (*bolt.DB, error) {
	db, err := bolt.Open(name, fileMode, &bolt.Options{
		Timeout: dbLockTimeout,
		// The free list is rebuilt by a scan on open instead of being
		// written by every commit: one page less to write and sync per
		// step.
		NoFreelistSync: true,
		NoSync:         skipStepSyncs,
		FreelistType:   bolt.FreelistMapType,
		OpenFile:       func(n string, flag int, _ os.FileMode) (*os.File, error) { return d.openDBFile(n, flag) },
	})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("open state store: %w", errStoreLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("open state store: %w", err)
	}
	return db, nil
}

// renameSync renames from to to in the directory and syncs the directory.
func (d *dirHandle) renameSync(from, to string) error {
	if err := d.injected("rename " + from); err != nil {
		return fmt.Errorf("rename %s: %w", from, err)
	}
	if err := unix.Renameat(d.fd, from, d.fd, to); err != nil {
		return fmt.Errorf("rename %s: %w", from, err)
	}
	if err := unix.Fsync(d.fd); err != nil {
		return fmt.Errorf("fsync state dir: %w", err)
	}
	return nil
}

// removeName removes name if present.
func (d *dirHandle) removeName(name string) error {
	if err := unix.Unlinkat(d.fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return nil
}

// openDBSnapshot opens a private copy of the store for reading, so that a
// reader never waits for (or blocks) the runnerd that holds the store's
// lock: the file is copied into an anonymous memory file and opened
// there. A copy is kept only if at most one commit landed while it was
// taken, judged by the two meta pages before and after: bbolt frees a
// page of the tree a meta page describes only in the next commit and
// reuses it in the one after, so every page the older meta names is
// intact in the copy; the copy gets the meta pages read before. Otherwise
// the copy is redone, at most inspectAttempts times. The caller closes
// the returned store. os.ErrNotExist when there is no store.
func (d *dirHandle) openDBSnapshot(limit int64) (*bolt.DB, int64, error) {
	ok, _, err := d.statName(DBName)
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		return nil, 0, os.ErrNotExist
	}
	src, err := d.openDBFile(DBName, unix.O_RDONLY)
	if err != nil {
		return nil, 0, err
	}
	defer src.Close()
	for range inspectAttempts {
		mem, size, ok, err := copyStable(src, limit)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			continue
		}
		if err := checkStoreFile(mem, size); err != nil {
			mem.Close()
			return nil, 0, err
		}
		var db *bolt.DB
		err = guardStore(func() (err error) {
			db, err = bolt.Open(DBName, fileMode, &bolt.Options{
				ReadOnly: true, Timeout: dbLockTimeout,
				OpenFile: func(string, int, os.FileMode) (*os.File, error) { return mem, nil },
			})
			return err
		})
		if err != nil {
			mem.Close()
			if errors.Is(err, errStoreDamaged) {
				return nil, 0, err
			}
			return nil, 0, fmt.Errorf("open state store copy: %w: %w", errStoreDamaged, err)
		}
		return db, size, nil
	}
	return nil, 0, fmt.Errorf("read state store: %w (%d attempts)", errStateChanging, inspectAttempts)
}

// copyStable copies src into a memory file (see openDBSnapshot); ok is
// false when more than one commit landed during the copy.
func copyStable(src *os.File, limit int64) (mem *os.File, size int64, ok bool, err error) {
	metas := func() ([]byte, error) {
		b := make([]byte, dbMetaBytes)
		n, err := src.ReadAt(b, 0)
		if errors.Is(err, io.EOF) && n == 0 {
			return nil, damaged("the file is empty")
		}
		if err != nil && n == 0 {
			return nil, fmt.Errorf("read state store: %w", err)
		}
		return b[:n], nil
	}
	before, err := metas()
	if err != nil {
		return nil, 0, false, err
	}
	fi, err := src.Stat()
	if err != nil {
		return nil, 0, false, fmt.Errorf("stat state store: %w", err)
	}
	if fi.Size() > limit {
		return nil, 0, false, fmt.Errorf("read state store: %w", errStateTooLarge)
	}
	fd, err := unix.MemfdCreate("runner-state-copy", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, 0, false, fmt.Errorf("copy state store: %w", err)
	}
	mem = os.NewFile(uintptr(fd), DBName)
	fail := func(err error) (*os.File, int64, bool, error) { mem.Close(); return nil, 0, false, err }
	buf := make([]byte, 1<<20)
	for off := int64(0); off < fi.Size(); {
		n, err := src.ReadAt(buf[:min(int64(len(buf)), fi.Size()-off)], off)
		if n > 0 {
			if _, werr := mem.WriteAt(buf[:n], off); werr != nil {
				return fail(fmt.Errorf("copy state store: %w", werr))
			}
			off += int64(n)
		}
		if err != nil && off < fi.Size() {
			return fail(fmt.Errorf("read state store: %w", err))
		}
	}
	after, err := metas()
	if err != nil {
		return fail(err)
	}
	page := unix.Getpagesize()
	if len(before) < 2*page || len(after) < 2*page {
		return fail(damaged("shorter than its meta pages"))
	}
	if !bytes.Equal(before[:page], after[:page]) && !bytes.Equal(before[page:2*page], after[page:2*page]) {
		mem.Close()
		return nil, 0, false, nil
	}
	if _, err := mem.WriteAt(before[:2*page], 0); err != nil {
		return fail(fmt.Errorf("copy state store: %w", err))
	}
	return mem, fi.Size(), true, nil
}
