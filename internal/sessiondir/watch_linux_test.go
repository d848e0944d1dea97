package sessiondir

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// record encodes one inotify record as the kernel does: the header, then
// the name NUL-padded to len bytes.
func record(mask uint32, name string, n int) []byte {
	b := make([]byte, unix.SizeofInotifyEvent+n)
	binary.NativeEndian.PutUint32(b[4:], mask)
	binary.NativeEndian.PutUint32(b[12:], uint32(n))
	copy(b[unix.SizeofInotifyEvent:], name)
	return b
}

func TestWatchPublishesOnlyEventFiles(t *testing.T) {
	cat := func(rs ...[]byte) []byte {
		var b []byte
		for _, r := range rs {
			b = append(b, r...)
		}
		return b
	}
	tmp := record(unix.IN_CLOSE_WRITE, "000000000001.json.tmp", 32)
	require.False(t, publishes(nil))
	require.False(t, publishes(tmp), "pcwrap's temp file wakes nobody")
	require.True(t, publishes(cat(tmp, record(unix.IN_MOVED_TO, "000000000001.json", 32))))
	require.True(t, publishes(record(unix.IN_CLOSE_WRITE, "000000000002.json", 18)), "a name filling its slot has no NUL")
	require.True(t, publishes(record(unix.IN_Q_OVERFLOW, "", 0)), "an overflow lists")
	require.True(t, publishes(record(unix.IN_DELETE_SELF, "", 0)))
	require.True(t, publishes(record(unix.IN_IGNORED, "", 0)))
	require.True(t, publishes(record(unix.IN_MOVED_TO, "000000000001.json", 32)[:20]), "a torn record lists")
}

func FuzzPublishes(f *testing.F) {
	f.Add(record(unix.IN_MOVED_TO, "000000000001.json", 32))
	f.Add(record(unix.IN_CLOSE_WRITE, "x.tmp", 16))
	f.Fuzz(func(t *testing.T, b []byte) { publishes(b) })
}

// waitWake waits, bounded, for a wake-up of w.
func waitWake(t *testing.T, w *EventWatch, what string) {
	t.Helper()
	select {
	case <-w.C:
	case <-time.After(10 * time.Second):
		t.Fatalf("no wake-up for %s", what)
	}
}

// A real watch wakes for a file renamed in, for one written in place, and
// for the directory's removal.
func TestWatchEventsWakes(t *testing.T) {
	dir := t.TempDir()
	w, err := WatchEvents(dir)
	require.NoError(t, err)
	defer w.Close()
	tmp := filepath.Join(dir, "000000000001.json.tmp")
	require.NoError(t, os.WriteFile(tmp, []byte("{}\n"), 0o600))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "000000000001.json")))
	waitWake(t, w, "a rename")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "000000000002.json"), []byte("{}\n"), 0o600))
	waitWake(t, w, "a file written in place")
	require.NoError(t, os.RemoveAll(dir))
	waitWake(t, w, "the directory's removal")
}
