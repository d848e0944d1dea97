package sessiondir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func openEvents(t *testing.T, d string) int {
	t.Helper()
	fd, err := unix.Open(filepath.Join(d, EventsDir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func readEvent(t *testing.T, d string, seq int64) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d, EventsDir, SeqName(seq)))
	require.NoError(t, err)
	return string(b)
}

// EventFiles publishes each file whole under its name; the inode it keeps
// ahead has no name, so the directory holds only published files. A seq
// out of turn (a retry, a gap) still publishes.
func TestEventFilesPublishWithTheNextTempAhead(t *testing.T) {
	d := newSession(t)
	w := NewEventFiles(openEvents(t, d))
	require.NoError(t, w.Write(1, []byte("one\n")))
	require.NoError(t, w.Write(2, []byte("two\n")))
	require.Equal(t, []string{SeqName(1), SeqName(2)}, dirNames(t, filepath.Join(d, EventsDir)))
	require.NoError(t, w.Write(5, []byte("five\n")))
	require.Equal(t, "one\n", readEvent(t, d, 1))
	require.Equal(t, "two\n", readEvent(t, d, 2))
	require.Equal(t, "five\n", readEvent(t, d, 5))
	w.Close()
	require.Equal(t, []string{SeqName(1), SeqName(2), SeqName(5)}, dirNames(t, filepath.Join(d, EventsDir)))
}

// Security: a file or a symlink put under the next temporary name is
// never published as it is: the body replaces the file, and a symlink
// fails the write without being followed.
func TestEventFilesRefuseASwappedTemp(t *testing.T) {
	d := newSession(t)
	events := filepath.Join(d, EventsDir)
	w := NewEventFiles(openEvents(t, d))
	require.NoError(t, w.Write(1, []byte("one\n")))
	tmp := filepath.Join(events, SeqName(2)+TmpSuffix)
	require.NoError(t, os.WriteFile(tmp, []byte("planted\n"), 0o600))
	require.NoError(t, w.Write(2, []byte("two\n")))
	require.Equal(t, "two\n", readEvent(t, d, 2))

	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("keep\n"), 0o600))
	tmp = filepath.Join(events, SeqName(3)+TmpSuffix)
	require.NoError(t, os.Symlink(secret, tmp))
	require.Error(t, w.Write(3, []byte("three\n")), "a symlink is never followed")
	b, err := os.ReadFile(secret)
	require.NoError(t, err)
	require.Equal(t, "keep\n", string(b))
	_, err = os.Lstat(filepath.Join(events, SeqName(3)))
	require.ErrorIs(t, err, os.ErrNotExist)
	w.Close()
}
