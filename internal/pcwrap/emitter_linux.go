package pcwrap

import "golang.org/x/sys/unix"

// dirRemoved reports whether the directory held by fd has been deleted
// (no link left to it), as after the host's rm -rf of the session.
func dirRemoved(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Nlink == 0
}
