package sessiondir

import "golang.org/x/sys/unix"

// EventFiles publishes event files in sequence in events/ (spec §7.2):
// each body goes to <name>.tmp relative to the held fd without following
// links, then is renamed, so a consumer only ever sees complete files.
// After each one it creates the next file's temp file ahead, so a frame's
// own path is a write, a close and a rename: the inode allocation of
// O_CREAT (70-150 µs on ext4 here) happens while the writer is idle
// (issue 14 item 3). A consumer ignores temp files. One goroutine uses it
// at a time.
type EventFiles struct {
	dirfd int
	ahead int64 // seq whose temp file fd is (0: none)
	fd    int
}

// NewEventFiles publishes into the events directory held open as dirfd.
func NewEventFiles(dirfd int) *EventFiles { return &EventFiles{dirfd: dirfd, fd: -1} }

// Write publishes body as the event file of seq.
func (w *EventFiles) Write(seq int64, body []byte) error {
	name := SeqName(seq)
	if w.ahead != seq {
		w.drop()
		if err := writeAtomic(w.dirfd, name, name+TmpSuffix, body); err != nil {
			return err
		}
	} else {
		fd := w.fd
		w.ahead, w.fd = 0, -1
		if !sameFile(w.dirfd, name+TmpSuffix, fd) {
			// The temp name no longer names the file made ahead (the
			// directory is the session's, but never trust a name kept
			// across a wait): publish through a fresh temp file.
			unix.Close(fd)
			if err := writeAtomic(w.dirfd, name, name+TmpSuffix, body); err != nil {
				return err
			}
		} else if err := finishAtomic(w.dirfd, fd, name, name+TmpSuffix, body); err != nil {
			return err
		}
	}
	next := SeqName(seq + 1)
	fd, err := unix.Openat(w.dirfd, next+TmpSuffix, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err == nil {
		w.ahead, w.fd = seq+1, fd
	}
	return nil // without a file ahead, the next Write creates its own
}

// Close removes the temp file made ahead.
func (w *EventFiles) Close() { w.drop() }

func (w *EventFiles) drop() {
	if w.fd < 0 {
		return
	}
	unix.Close(w.fd)
	_ = unix.Unlinkat(w.dirfd, SeqName(w.ahead)+TmpSuffix, 0)
	w.ahead, w.fd = 0, -1
}

// sameFile reports whether name in dirfd (not followed) is the file open as fd.
func sameFile(dirfd int, name string, fd int) bool {
	var a, b unix.Stat_t
	return unix.Fstat(fd, &a) == nil && unix.Fstatat(dirfd, name, &b, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		a.Dev == b.Dev && a.Ino == b.Ino
}
