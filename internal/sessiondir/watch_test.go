package sessiondir

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// watchWait bounds a wait for an inotify wake-up (a loaded CI machine).
const watchWait = 10 * time.Second

// rawEvent encodes one inotify event as the kernel writes it, the name
// NUL-padded to a multiple of 16.
func rawEvent(mask uint32, name string) []byte {
	n := 0
	if name != "" {
		n = (len(name) + 16) &^ 15
	}
	b := make([]byte, unix.SizeofInotifyEvent+n)
	binary.NativeEndian.PutUint32(b[4:], mask)
	binary.NativeEndian.PutUint32(b[12:], uint32(n))
	copy(b[unix.SizeofInotifyEvent:], name)
	return b
}

// TestQueueWatchMatters: only names that can be queue files, overflows
// and events on the directory itself call for a scan; the writers'
// temporary names do not.
func TestQueueWatchMatters(t *testing.T) {
	for _, c := range []struct {
		name string
		buf  []byte
		want bool
	}{
		{"temp create", rawEvent(unix.IN_CREATE, "000000000001.json.0123456789abcdef.pcwrap-write.tmp"), false},
		{"temp close", rawEvent(unix.IN_CLOSE_WRITE, "000000000001.json.tmp"), false},
		{"rename", rawEvent(unix.IN_MOVED_TO, "000000000001.json"), true},
		{"temp then rename", append(rawEvent(unix.IN_CREATE, "x.tmp"), rawEvent(unix.IN_MOVED_TO, "000000000002.json")...), true},
		{"overflow", rawEvent(unix.IN_Q_OVERFLOW, ""), true},
		{"dir deleted", rawEvent(unix.IN_DELETE_SELF, ""), true},
		{"watch gone", rawEvent(unix.IN_IGNORED, ""), true},
		{"a name of 16 characters", rawEvent(unix.IN_CREATE, "0000000001.json."), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w queueWatch
			if got := w.matters(c.buf); got != c.want {
				t.Fatalf("matters = %v, want %v", got, c.want)
			}
		})
	}
	w := queueWatch{every: true}
	if !w.matters(rawEvent(unix.IN_CREATE, "x.tmp")) || w.Overflows() != 1 {
		t.Fatalf("every: want a wake-up counted as an overflow, got %d", w.Overflows())
	}
}

// TestQueueWatchLive: a file renamed to a queue name wakes the watch, so
// does the removal of the directory, and Close closes C.
func TestQueueWatchLive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	w, err := WatchQueue(false, filepath.Join(dir, "missing"), dir)
	if err != nil {
		t.Fatal(err)
	}
	wait := func(what string) {
		t.Helper()
		select {
		case <-w.C:
		case <-time.After(watchWait):
			t.Fatalf("no wake-up for %s within %v", what, watchWait)
		}
	}
	tmp := filepath.Join(dir, "000000000001.json.tmp")
	if err := os.WriteFile(tmp, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "000000000001.json")); err != nil {
		t.Fatal(err)
	}
	wait("the rename")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	wait("the removal")
	w.Close()
	for range w.C { // drain a pending wake-up; then closed
	}
}

// FuzzQueueWatchMatters: the inotify record parser never reads out of
// bounds and answers as a plain reading of the records with
// encoding/binary does.
func FuzzQueueWatchMatters(f *testing.F) {
	f.Add(rawEvent(unix.IN_MOVED_TO, "000000000001.json"))
	f.Add(append(rawEvent(unix.IN_CREATE, "a.tmp"), rawEvent(unix.IN_CLOSE_WRITE, "b.json")...))
	f.Add(rawEvent(unix.IN_Q_OVERFLOW, ""))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		want := false
		for rest := b; len(rest) >= unix.SizeofInotifyEvent; {
			mask := binary.NativeEndian.Uint32(rest[4:])
			n := int(binary.NativeEndian.Uint32(rest[12:]))
			if n > len(rest)-unix.SizeofInotifyEvent {
				want = true // a torn record: rescan
				break
			}
			name, _, _ := bytes.Cut(rest[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+n], []byte{0})
			if mask&unix.IN_Q_OVERFLOW != 0 || n == 0 || bytes.HasSuffix(name, []byte(JSONSuffix)) {
				want = true
			}
			rest = rest[unix.SizeofInotifyEvent+n:]
		}
		var w queueWatch
		if got := w.matters(b); got != want {
			t.Fatalf("matters(%x) = %v, want %v", b, got, want)
		}
	})
}
