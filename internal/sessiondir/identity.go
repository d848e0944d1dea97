package sessiondir

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
)

// identity is what pins a control directory (spec §5.1): device, inode
// and birth time in nanoseconds (0 when the filesystem reports none).
type identity struct {
	Dev   uint64
	Ino   uint64
	Btime int64
}

// Protocol-named identity failures (spec §4, §5.1).
var (
	// ErrSymlink is the reference's EPAPERCLIP_SYMLINK.
	ErrSymlink = errors.New("Refusing a symbolic link on a process session control path.")
	// ErrNotDir is ENOTDIR on a control path.
	ErrNotDir = errors.New("A process session control path is not a directory.")
)

// lostReason is the reason of the latch message of §5.3 for a stat error
// of a control path.
func lostReason(err error) string {
	var errno syscall.Errno
	switch {
	case errors.Is(err, ErrSymlink):
		return "the control path is now a symbolic link"
	case errors.Is(err, ErrNotDir), errors.Is(err, syscall.ENOTDIR):
		return "the control path is no longer a directory"
	case errors.Is(err, syscall.ENOENT):
		return "the control path no longer exists"
	case errors.As(err, &errno):
		if name := errnoName(errno); name != "" {
			return "lstat failed with " + name
		}
	}
	return "lstat failed"
}

// latch is the identity-lost latch of §5.3: set once, never cleared.
type latch struct{ lost atomic.Bool }

// set latches; it reports whether this call was the first.
func (l *latch) set() bool { return l.lost.CompareAndSwap(false, true) }

// Lost reports whether the latch is set.
func (l *latch) Lost() bool { return l.lost.Load() }

// Verifier re-checks both control paths against their captured identity
// before every scan of stdin/ (spec §5.3).
type Verifier struct {
	SessionPath, StdinPath string
	Session, Stdin         identity
	latch                  latch
	csession, cstdin       []byte // NUL-terminated paths, built once
}

// LostError is returned by Verify once the identity is lost.
type LostError struct {
	// First is true only for the call that set the latch.
	First bool
	// Message is the stderr line for a stat error; "" for a plain
	// mismatch, which §5.3 terminates without a line.
	Message string
}

func (e *LostError) Error() string { return "process session identity lost" }

// Verify stats both paths (not the held fds, so replacement and removal
// show) and compares them with the captured identity. It returns nil while
// the identity holds and a *LostError once anything failed, forever after:
// the latch is never cleared. Verify is called from one goroutine (the
// stdin reader); Lost and latch are safe from any.
func (v *Verifier) Verify() error {
	if v.latch.Lost() {
		return &LostError{}
	}
	if v.csession == nil {
		v.csession, v.cstdin = cString(v.SessionPath), cString(v.StdinPath)
	}
	for _, c := range [2]struct {
		path  string
		cpath []byte
		want  identity
	}{{v.SessionPath, v.csession, v.Session}, {v.StdinPath, v.cstdin, v.Stdin}} {
		got, err := rawStatIdentity(c.path, c.cpath)
		if err != nil {
			return &LostError{First: v.latch.set(), Message: fmt.Sprintf("Latching on a lost process session identity: %s. Terminating.", lostReason(err))}
		}
		if got != c.want {
			return &LostError{First: v.latch.set()}
		}
	}
	return nil
}

// lost reports whether the latch is set.
func (v *Verifier) lost() bool { return v.latch.Lost() }

// Latch sets the latch from outside (a vanished stdin listing, §6.3 step 2);
// it reports whether this call was the first.
func (v *Verifier) Latch() bool { return v.latch.set() }
