package state

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/clock"
)

// File discipline (prp.md §9.1).
const (
	// tempPrefix starts every sibling temp file name; stale ones are removed on open.
	tempPrefix = "." + FileName + ".tmp-"
	// tempAttempts bounds retries on a temp name collision (R-state TEMP_FILE_ATTEMPTS).
	tempAttempts = 32
	// writeAttempts bounds the tries of one state write that fails with a
	// transient error (EMFILE, ENFILE, EINTR, EAGAIN) before the store
	// poisons itself: a descriptor shortage from a burst of listener
	// connections clears as the listener sheds them.
	writeAttempts = 6
	// writeRetryBase is the first pause between attempts; it doubles, so
	// the pauses total 10+20+40+80+160 = 310 ms, inside the 2 s upgrade
	// bound after which a stray connection's descriptor is freed.
	writeRetryBase = 10 * time.Millisecond
	// maxSpares bounds the files holding older states that a state
	// directory keeps beside FileName (spares and unsynced together). A
	// write that need not sync the directory still needs a spare that is
	// surely not the state file on disk; once every older file may be, one
	// directory sync makes them all spares again. So with k of them, one
	// write in k that skips its own directory sync pays for one (measured
	// with 8: runnerd's CPU per agent message 7% lower, the line's p50
	// 0.19 ms lower than with a directory sync per write).
	maxSpares = 8
	// spareBytes bounds the bytes the older files hold together, for a
	// large state: a state of spareBytes or more keeps one, as many as fit
	// below that (sparesFor).
	spareBytes = 1 << 20
)

// sparesFor is how many older files a state of n bytes keeps: as many as
// fit in spareBytes, at least one, at most maxSpares.
func sparesFor(n int) int { return max(1, min(maxSpares, spareBytes/max(n, 1))) }

// spareFile is a sibling temp file that holds an older state.
type spareFile struct {
	name string
	fd   int // an open descriptor of it, or -1: open it by name
}

// dirHandle is the state directory, held open so that every file operation
// resolves relative to the same inode: swapping the path for a symlink after
// open cannot redirect a write (runc's openat discipline).
type dirHandle struct {
	fd   int
	path string
	// cur is an open descriptor of the file this handle last renamed into
	// place (-1: none). Holding it keeps that inode alive when the next
	// rename unlinks it, so the rename does not free the old file's blocks
	// inline (on ext4 that eviction made renameat ~10x slower); release
	// closes it off the write path. It is never written through.
	cur int
	// releases tracks the goroutines closing replaced files; close waits.
	releases sync.WaitGroup
	// spares are sibling temp files that hold older states and are surely
	// not the state file on disk: a write swapped each out of FileName
	// with RENAME_EXCHANGE before a directory sync that succeeded. A write
	// overwrites one in place and swaps it back, so a steady write
	// allocates no inode and frees no blocks (on this ext4 with online
	// discard, creating the temp file and freeing the replaced one cost
	// more than the two syncs). A file keeps its descriptor from the write
	// that swapped it in, so a steady write opens and closes nothing.
	// close removes them.
	spares []spareFile
	// unsynced are the files swapped out of FileName since the last
	// directory sync that succeeded: each may still be the state file on
	// disk, so none is written or removed until a directory sync succeeds
	// (syncDir), which makes them spares, up to keep, and removes
	// the rest. A write whose directory sync failed leaves its file here
	// too; a full disk retries many times, and each holds a copy of the
	// state until then.
	unsynced []spareFile
	// redo: the last attempt failed, so the next starts in a new temp
	// file (durability.md §6.2 item 1: a retry redoes the whole write).
	redo bool
	// keep is how many older files the last write's state keeps
	// (sparesFor its size).
	keep int
	// noExchange: the file system refused RENAME_EXCHANGE; every write
	// then creates a temp file and renames it over FileName.
	noExchange bool
	// clk times the pauses between write attempts; nil means the system clock.
	clk clock.Clock
	// fault, when set (tests), is consulted before each syscall of a write
	// with its name; a non-nil result stands in for that syscall's error.
	fault func(op string) error
}

// openDir creates the state directory if needed and opens it without
// following a final symlink. It refuses a directory that is not owned by
// this user and tightens its mode to 0700.
func openDir(path string) (*dirHandle, error) {
	if path == "" {
		return nil, fmt.Errorf("open state dir: %w: empty path", errUnsafePath)
	}
	path = filepath.Clean(path)
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
			return nil, fmt.Errorf("open state dir: %w: not a real directory", errUnsafePath)
		}
	} else if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(path, dirMode); err != nil {
			return nil, fmt.Errorf("create state dir: %w", err)
		}
	} else {
		return nil, fmt.Errorf("lstat state dir: %w", err)
	}
	d, mode, err := openOwnedDir(path)
	if err != nil {
		return nil, err
	}
	if mode&0o777 != dirMode {
		if err := unix.Fchmod(d.fd, dirMode); err != nil {
			d.close()
			return nil, fmt.Errorf("fchmod state dir: %w", err)
		}
	}
	return d, nil
}

// openOwnedDir opens the directory at path without following a final
// symlink and refuses one another user owns; it returns the directory's
// mode.
func openOwnedDir(path string) (*dirHandle, uint32, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		return nil, 0, fmt.Errorf("open state dir: %w: not a real directory", errUnsafePath)
	case err != nil:
		return nil, 0, fmt.Errorf("open state dir: %w", err)
	}
	d := &dirHandle{fd: fd, path: path, cur: -1}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		d.close()
		return nil, 0, fmt.Errorf("fstat state dir: %w", err)
	}
	if int(st.Uid) != os.Geteuid() {
		d.close()
		return nil, 0, fmt.Errorf("open state dir: %w: owned by another user", errUnsafePath)
	}
	return d, st.Mode, nil
}

// close releases the held file and the directory, and waits for every
// release in flight.
func (d *dirHandle) close() {
	d.release(d.cur)
	d.cur = -1
	if len(d.unsynced) > 0 && d.fd >= 0 {
		// FileName's last swap becomes durable, so a copy of the
		// directory taken now holds the last state; the older files
		// become spares.
		_ = d.syncDir()
	}
	d.dropSpares()
	for _, f := range d.unsynced {
		// Still possibly the state file on disk: kept (Open removes them).
		d.release(f.fd)
	}
	d.unsynced = nil
	d.releases.Wait()
	if d.fd >= 0 {
		_ = unix.Close(d.fd)
		d.fd = -1
	}
}

// openStateFile opens the state file for reading without following a
// symlink (or blocking on a FIFO put in its place); os.ErrNotExist when
// there is none.
func (d *dirHandle) openStateFile() (int, error) {
	fd, err := unix.Openat(d.fd, FileName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return -1, os.ErrNotExist
	case errors.Is(err, unix.ELOOP):
		return -1, fmt.Errorf("open state file: %w: symlink", errUnsafePath)
	case err != nil:
		return -1, fmt.Errorf("openat state file: %w", err)
	}
	return fd, nil
}

// read returns the state file's bytes, or os.ErrNotExist. It refuses a
// symlink, a non-regular file, a file of another user and a file above limit.
func (d *dirHandle) read(limit int64) ([]byte, error) {
	fd, err := d.openStateFile()
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), FileName)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat state file: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("open state file: %w: not a regular file", errUnsafePath)
	}
	if int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("open state file: %w: owned by another user", errUnsafePath)
	}
	if st.Size > limit {
		return nil, fmt.Errorf("read state file: %w", errStateTooLarge)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read state file: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("read state file: %w", errStateTooLarge)
	}
	return b, nil
}

// write replaces the state file atomically: the new bytes go into a
// sibling temp file that is surely not the state file on disk (a spare,
// overwritten in place, or else a new exclusive random one: 0600,
// O_EXCL|O_NOFOLLOW), fdatasync, swap it with FileName (renameat2
// RENAME_EXCHANGE; a plain rename over the old file when there is no old
// file or the file system refuses the exchange), and, when syncDir (or
// after a plain rename), fsync the directory. The old state file becomes
// a spare once a directory sync has followed its swap. A crash at any
// point leaves a complete file under FileName: a file is overwritten only
// after a directory sync that followed its move out of FileName, and
// FileName changes only by the swap, after the new bytes are durable. A
// failed write removes its temp file.
//
// When write returns nil the new contents are FileName's; with syncDir
// they are durable under it, else a power loss may leave an older state
// there (never a torn one) until a later directory sync. The store asks
// for one when a field the server acts on changes (crashVisibleChange). A
// write costs one data sync, and a directory sync when syncDir or when no
// spare is left (at most one write in maxSpares).
//
// The temp file is synced with fdatasync, not fsync. For this file that is
// the same guarantee: fdatasync(2) flushes the data and every piece of
// metadata needed to read it back, which for a file created and written
// here is its size and block allocation; it skips only timestamps, which
// nothing reads. The directory entry is made durable by the directory
// fsync after the rename (neither sync covers the other).
//
// A transient failure (transientWriteErr) is retried up to writeAttempts
// times with doubling pauses; each failed attempt has removed its temp
// file, and the previous state file is untouched until a rename succeeds.
// Any other failure (ENOSPC, EIO, ...) returns at once: the store decides
// whether a full disk is waited out (Store.commit).
func (d *dirHandle) write(b []byte, syncDir bool) error {
	pause := writeRetryBase
	for attempt := 1; ; attempt++ {
		err := d.writeOnce(b, syncDir)
		if err == nil || !transientWriteErr(err) {
			return err
		}
		if attempt == writeAttempts {
			return fmt.Errorf("retry state write: %d attempts: %w", writeAttempts, err)
		}
		t := clock.Or(d.clk).NewTimer(pause)
		<-t.C()
		pause *= 2
	}
}

// transientWriteErr reports an error that a later attempt may not meet:
// out of descriptors (process or system), an interrupted or would-block call.
func transientWriteErr(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) ||
		errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN)
}

// injected returns the test fault for op, if any.
func (d *dirHandle) injected(op string) error {
	if d.fault == nil {
		return nil
	}
	return d.fault(op)
}

// writeOnce is one attempt of write: into a spare if there is one, else
// into a new temp file, and always a new one after a failed attempt. When
// every older file may still be the state file on disk, a directory sync
// first makes them spares.
func (d *dirHandle) writeOnce(b []byte, syncDir bool) error {
	d.keep = sparesFor(len(b))
	for len(d.spares) > 0 && len(d.spares)+len(d.unsynced) > d.keep {
		d.dropSpare()
	}
	if !d.redo && len(d.spares) == 0 && len(d.unsynced) >= d.keep {
		if err := d.syncDir(); err != nil {
			d.redo = true
			return err
		}
	}
	var err error
	if !d.redo && len(d.spares) > 0 {
		err = d.writeSpare(b, syncDir)
	} else {
		fd, name, cerr := d.createTemp()
		if cerr != nil {
			d.redo = true
			return cerr
		}
		err = d.commitTemp(fd, name, b, 0, syncDir)
	}
	d.redo = err != nil
	return err
}

// dropSpares removes the spares.
func (d *dirHandle) dropSpares() {
	for len(d.spares) > 0 {
		d.dropSpare()
	}
}

// dropSpare removes the last spare: it is not the state file, so removing
// it needs no sync.
func (d *dirHandle) dropSpare() {
	last := len(d.spares) - 1
	d.release(d.spares[last].fd)
	if d.fd >= 0 {
		_ = unix.Unlinkat(d.fd, d.spares[last].name, 0)
	}
	d.spares = d.spares[:last]
}

// writeSpare overwrites a spare in place and swaps it in. Any failure
// before the swap removes it, since it is not the state file.
func (d *dirHandle) writeSpare(b []byte, syncDir bool) error {
	last := len(d.spares) - 1
	name, fd := d.spares[last].name, d.spares[last].fd
	d.spares = d.spares[:last]
	if fd < 0 {
		if err := d.injected("openat"); err != nil {
			_ = unix.Unlinkat(d.fd, name, 0)
			return fmt.Errorf("openat state spare file: %w", err)
		}
		var err error
		if fd, err = unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			_ = unix.Unlinkat(d.fd, name, 0)
			return fmt.Errorf("openat state spare file: %w", err)
		}
	}
	size := int64(-1)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil {
		size = st.Size
	}
	return d.commitTemp(fd, name, b, size, syncDir)
}

// padBlock is the granule of the state file's size: a write pads the JSON
// with trailing whitespace (valid JSON, RFC 8259 §2) up to the next
// multiple, so the spare it overwrites usually has that size already.
// An overwrite that keeps the size and the allocated blocks changes no
// metadata that fdatasync must flush: the data sync is one device flush,
// as a raw fsync of a block is, instead of a data flush plus an inode
// write (measured: 0.24 ms against 0.62 ms per sync when the size moved
// by a few bytes each write). 4 KiB is the page and block size.
const padBlock = 4096

// padded returns b followed by spaces and a newline up to the next
// multiple of padBlock (b itself when it is one already).
func padded(b []byte) []byte {
	n := (len(b) + padBlock - 1) / padBlock * padBlock
	if n == len(b) {
		return b
	}
	out := slices.Grow(b, n-len(b))[:n]
	for i := len(b); i < n-1; i++ {
		out[i] = ' '
	}
	out[n-1] = '\n'
	return out
}

// commitTemp writes b, padded to a multiple of padBlock, at offset 0 of the
// temp file fd (named name, not the state file), cuts the file to that
// length when its size differs, syncs it and swaps it in, then syncs the
// directory when syncDir or when the swap was a plain rename. size is the
// file's current size when known (0 for a new file), -1 otherwise. fd
// becomes the state file's descriptor, or is closed on failure.
func (d *dirHandle) commitTemp(fd int, name string, b []byte, size int64, syncDir bool) (err error) {
	b = padded(b)
	swapped := false
	defer func() {
		if !swapped {
			_ = unix.Close(fd)
			_ = unix.Unlinkat(d.fd, name, 0)
		}
	}()
	for off := 0; off < len(b); {
		if err := d.injected("write"); err != nil {
			return fmt.Errorf("write state temp file: %w", err)
		}
		n, err := unix.Pwrite(fd, b[off:], int64(off))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("write state temp file: %w", err)
		}
		off += n
	}
	if size != int64(len(b)) {
		if err := unix.Ftruncate(fd, int64(len(b))); err != nil {
			return fmt.Errorf("truncate state temp file: %w", err)
		}
	}
	if err := d.injected("fdatasync"); err != nil {
		return fmt.Errorf("fdatasync state temp file: %w", err)
	}
	if err := stepSync(unix.Fdatasync, fd); err != nil {
		return fmt.Errorf("fdatasync state temp file: %w", err)
	}
	exchanged, err := d.swap(name)
	if err != nil {
		return err
	}
	swapped = true
	if exchanged {
		// The old state file now sits under name; d.cur, when known, is
		// its descriptor. Its blocks stay allocated. fd is the state
		// file's now, kept for the write that reuses it.
		d.unsynced = append(d.unsynced, spareFile{name: name, fd: d.cur})
		d.cur = fd
		if !syncDir {
			return nil
		}
	} else {
		// The data is durable (fdatasync above), so the descriptor is
		// kept open instead of closed: it pins this inode until the next
		// write has replaced it, so that rename does not free its blocks
		// inline. The replaced file's descriptor is released now. The
		// rename unlinked the old file, so its directory entry must be
		// durable before anything else happens to it.
		d.release(d.cur)
		d.cur = fd
	}
	return d.syncDir()
}

// syncDir makes the directory's entries durable. The files swapped out of
// FileName before it are then surely not the state file on disk: they
// become spares, up to keep, and the rest are removed. A failed sync
// leaves them unsynced; the caller must not send what the write enables.
func (d *dirHandle) syncDir() error {
	err := d.injected("fsync dir")
	if err == nil {
		err = stepSync(unix.Fsync, d.fd)
	}
	if err != nil {
		return fmt.Errorf("fsync state dir: %w", err)
	}
	older := slices.Concat(d.spares, d.unsynced)
	d.spares, d.unsynced = nil, nil
	for _, f := range older {
		if len(d.spares) < d.keep {
			d.spares = append(d.spares, f)
			continue
		}
		d.release(f.fd)
		_ = unix.Unlinkat(d.fd, f.name, 0)
	}
	return nil
}

// swap puts the temp file name in place of FileName: an exchange when
// FileName exists and the file system supports it (exchanged: the old
// state file is now under name), else a rename over it.
func (d *dirHandle) swap(name string) (exchanged bool, err error) {
	if err := d.injected("rename"); err != nil {
		return false, fmt.Errorf("renameat state file: %w", err)
	}
	if !d.noExchange {
		err := unix.Renameat2(d.fd, name, d.fd, FileName, unix.RENAME_EXCHANGE)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP):
			d.noExchange = true
		case !errors.Is(err, unix.ENOENT): // ENOENT: no state file yet
			return false, fmt.Errorf("renameat2 state file: %w", err)
		}
	}
	if err := unix.Renameat(d.fd, name, d.fd, FileName); err != nil {
		return false, fmt.Errorf("renameat state file: %w", err)
	}
	return false, nil
}

// release closes fd (a file already unlinked by a rename, or -1) in the
// background: the final close frees the inode, which is the slow part of
// replacing a file, and nothing waits for it but close.
func (d *dirHandle) release(fd int) {
	if fd < 0 {
		return
	}
	d.releases.Add(1)
	go func() {
		defer d.releases.Done()
		_ = unix.Close(fd)
	}()
}

func (d *dirHandle) createTemp() (int, string, error) {
	var raw [12]byte
	for range tempAttempts {
		if _, err := rand.Read(raw[:]); err != nil {
			return -1, "", fmt.Errorf("create state temp file: %w", err)
		}
		name := tempPrefix + hex.EncodeToString(raw[:])
		if err := d.injected("openat"); err != nil {
			return -1, "", fmt.Errorf("openat state temp file: %w", err)
		}
		fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, fileMode)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return -1, "", fmt.Errorf("openat state temp file: %w", err)
		}
		// The umask may have narrowed the mode; never widened. Pin it.
		if err := unix.Fchmod(fd, fileMode); err != nil {
			_ = unix.Close(fd)
			_ = unix.Unlinkat(d.fd, name, 0)
			return -1, "", fmt.Errorf("fchmod state temp file: %w", err)
		}
		return fd, name, nil
	}
	return -1, "", fmt.Errorf("create state temp file: %d name collisions", tempAttempts)
}

// removeStaleTemps deletes temp files left by a crash mid-write. They are
// never read: the rename is the commit point.
func (d *dirHandle) removeStaleTemps() error {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("openat state dir: %w", err)
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("readdir state dir: %w", err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, tempPrefix) {
			if err := unix.Unlinkat(d.fd, n, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("unlinkat stale temp file: %w", err)
			}
		}
	}
	return nil
}

// Reading the state of a live runnerd from outside (Dump).
const (
	// maxInspectBytes bounds the state file an inspection reads: the
	// largest outbox the server configures (16 MiB) plus the state's
	// overhead allowance, with room to spare.
	maxInspectBytes = 64 * 1024 * 1024
	// inspectAttempts bounds the re-reads of a file a live runnerd changed
	// while it was being read.
	inspectAttempts = 8
)

// errStateChanging: every inspection attempt saw the file change under it.
var errStateChanging = errors.New("runner state kept changing while being read")

// openDirReadOnly opens an existing state directory for reading only: it
// never creates the directory or changes its mode, and refuses what
// openDir refuses (a symlink, not a directory, another user's).
func openDirReadOnly(path string) (*dirHandle, error) {
	if path == "" {
		return nil, fmt.Errorf("open state dir: %w: empty path", errUnsafePath)
	}
	d, _, err := openOwnedDir(filepath.Clean(path))
	return d, err
}

// readConsistent reads the state file like read, but from a runnerd that
// may be writing: a write overwrites the previous write's file in place
// before swapping it back in, so a reader that opened that inode could see
// a mix. The read is kept only when the inode's change and modification
// times and size are the same after it as before, and the inode is still
// FileName; otherwise it is redone, at most inspectAttempts times.
func (d *dirHandle) readConsistent(limit int64) ([]byte, error) {
	for range inspectAttempts {
		fd, err := d.openStateFile()
		if err != nil {
			return nil, err
		}
		b, ok, err := d.readStable(fd, limit)
		_ = unix.Close(fd)
		if err != nil || ok {
			return b, err
		}
	}
	return nil, fmt.Errorf("read state file: %w (%d attempts)", errStateChanging, inspectAttempts)
}

// readStable reads the open state file fd; ok is false when it changed
// during the read.
func (d *dirHandle) readStable(fd int, limit int64) (b []byte, ok bool, err error) {
	var before, after, named unix.Stat_t
	if err := unix.Fstat(fd, &before); err != nil {
		return nil, false, fmt.Errorf("fstat state file: %w", err)
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, false, fmt.Errorf("open state file: %w: not a regular file", errUnsafePath)
	}
	if int(before.Uid) != os.Geteuid() {
		return nil, false, fmt.Errorf("open state file: %w: owned by another user", errUnsafePath)
	}
	if before.Size > limit {
		return nil, false, fmt.Errorf("read state file: %w", errStateTooLarge)
	}
	b = make([]byte, before.Size)
	for off := 0; off < len(b); {
		n, err := unix.Pread(fd, b[off:], int64(off))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("read state file: %w", err)
		}
		if n == 0 {
			return nil, false, nil // shrank: changed
		}
		off += n
	}
	if err := unix.Fstat(fd, &after); err != nil {
		return nil, false, fmt.Errorf("fstat state file: %w", err)
	}
	if err := unix.Fstatat(d.fd, FileName, &named, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, false, nil // swapped out and not yet back
	}
	same := before.Ctim == after.Ctim && before.Mtim == after.Mtim && before.Size == after.Size &&
		named.Ino == before.Ino && named.Dev == before.Dev
	return b, same, nil
}
