package pcwrap_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// stdinScans lets a test wait until pcwrap's stdin reader has scanned
// stdin/, so that "pcwrap did not deliver file N" is asserted after pcwrap
// has looked at file N rather than after a guessed sleep.
//
// The signal is the kernel's: every getdents on a directory raises
// IN_ACCESS on it (fs/readdir.c, iterate_dir), and pcwrap reads stdin/'s
// entries nowhere but in the reader's listing, done once per scan
// (stdinpoll.Reader.Scan; a second listing in one scan happens only when
// resuming a listing kept while the child's stdin was full, which these
// scenarios never fill). It works on the production binary, so no test
// hook is needed. pcwrap's own watch does not ask for IN_ACCESS, so this
// watch changes nothing for pcwrap; the tests look at stdin/ only by
// lstat, which raises no event.
//
// Counting: one listing is at most two getdents calls (the names, then
// the empty read at the end; the test queues hold a handful of names, far
// below the reader's 32 KiB buffer), so at most two events. The kernel
// merges an event into an identical unread one, which can only make a
// test see fewer events and wait longer, never shorter. A listing under
// way when the mark was queued can add one event after it.
type stdinScans struct {
	fd  int
	buf []byte
}

// watchScans starts watching stdinDir; call it before the events to be
// marked happen. The watch is closed when the test ends.
func watchScans(t testing.TB, stdinDir string) *stdinScans {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	_, err = unix.InotifyAddWatch(fd, stdinDir, unix.IN_ACCESS|unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE|unix.IN_ONLYDIR)
	require.NoError(t, err)
	return &stdinScans{fd: fd, buf: make([]byte, 64<<10)}
}

// scanWait bounds a wait for scans: pcwrap ticks every 50 ms while files
// wait and every 500 ms when idle (stdinpoll.TickInterval,
// IdleTickInterval); 10 s leaves room for a loaded 2-core machine.
const scanWait = 10 * time.Second

// settleScans is how many complete scans after a file's arrival the
// race scenarios wait for before asserting what pcwrap did NOT do: the
// first scan saw the file, the second shows the outcome held past one
// look (an empty file is retried, not dropped; a held file stays held).
const settleScans = 2

// waitScans waits until pcwrap has completed n scans that began after
// queue file name arrived (renamed in, or closed after writing), or, with
// name "", after the watch began.
func (w *stdinScans) waitScans(t testing.TB, name string, n int) {
	t.Helper()
	// n complete scans need n+1 listings begun after the mark (a listing
	// starts only once the previous scan has finished); with at most two
	// events per listing plus one from a listing straddling the mark,
	// 2(n+1) events guarantee that.
	w.waitListings(t, name, 2*(n+1))
}

// waitReaderRunning waits until pcwrap's stdin reader has listed stdin/
// at least once since the watch began: pcwrap is past setup and in its
// steady state (the reader starts after the spawn, spec §4).
func (w *stdinScans) waitReaderRunning(t testing.TB) {
	t.Helper()
	w.waitListings(t, "", 1)
}

// waitListings waits for need listing events after the mark.
func (w *stdinScans) waitListings(t testing.TB, name string, need int) {
	t.Helper()
	marked := name == ""
	seen := 0
	deadline := time.Now().Add(scanWait)
	for seen < need {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("timed out after %v waiting for %d stdin/ listing events after %q (saw %d, marked %v)", scanWait, need, name, seen, marked)
		}
		pfd := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, int(left/time.Millisecond)+1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			require.NoError(t, err)
		}
		k, err := unix.Read(w.fd, w.buf)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		require.NoError(t, err)
		for off := 0; off+unix.SizeofInotifyEvent <= k; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			nb := w.buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			evName := cstring(nb)
			switch {
			case ev.Mask&(unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE) != 0:
				if !marked && evName == name {
					marked = true
				}
			case ev.Mask&unix.IN_ACCESS != 0 && evName == "":
				// The directory itself was read: a listing.
				if marked {
					seen++
				}
			}
		}
	}
}

// cstring trims the NUL padding of an inotify event name.
func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// watchStdin returns a scan watch on s's stdin/.
func (s *session) watchStdin() *stdinScans {
	return watchScans(s.t, filepath.Join(s.dir, "stdin"))
}
