package prp

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// bytesPending reports whether c's socket has received bytes (or an EOF)
// that nobody has read yet, without consuming them: a peer whose request
// sits in the kernel buffer has sent something and is not evicted as silent.
func bytesPending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	pending := false
	var b [1]byte
	// Control, not Read: Read takes the descriptor's read lock, which the
	// HTTP server's blocked Read holds until its deadline.
	_ = rc.Control(func(fd uintptr) {
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		pending = err == nil && n > 0
	})
	return pending
}
