package sessiondir

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestOpenCreatesHeldLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "session")
	d, err := Open(path, true)
	require.NoError(t, err)
	defer d.Close()
	for _, p := range []string{path, filepath.Join(path, StdinDir), filepath.Join(path, EventsDir)} {
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		assert.True(t, fi.IsDir())
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm()&^0o022|0o700&fi.Mode().Perm())
	}
	// The lock is held: a second Open (a second wrapper) is refused.
	_, err = Open(path, true)
	assert.ErrorIs(t, err, ErrLocked)
	fd, err := unix.Open(filepath.Join(path, LockFile), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	assert.Equal(t, unix.EWOULDBLOCK, unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB))
}

func TestOpenStdoutModeMakesNoEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	d, err := Open(path, false)
	require.NoError(t, err)
	defer d.Close()
	assert.False(t, exists(filepath.Join(path, EventsDir)))
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func TestOpenRefusals(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real")
	require.NoError(t, os.Mkdir(real, 0o700))
	link := filepath.Join(root, "link")
	require.NoError(t, os.Symlink(real, link))
	_, err := Open(link, true)
	assert.ErrorIs(t, err, ErrSymlink)
	ents, _ := os.ReadDir(real)
	assert.Empty(t, ents, "nothing created through the link")

	dangling := filepath.Join(root, "dangling")
	require.NoError(t, os.Symlink(filepath.Join(root, "nowhere"), dangling))
	_, err = Open(dangling, true)
	assert.ErrorIs(t, err, ErrSymlink)
	assert.False(t, exists(filepath.Join(root, "nowhere")))

	file := filepath.Join(root, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = Open(file, true)
	assert.ErrorIs(t, err, ErrNotDir)

	// stdin/ a symlink to elsewhere.
	sess := filepath.Join(root, "sess")
	require.NoError(t, os.Mkdir(sess, 0o700))
	require.NoError(t, os.Symlink(real, filepath.Join(sess, StdinDir)))
	_, err = Open(sess, true)
	assert.ErrorIs(t, err, ErrSymlink)
	ev, err := OpenEvents(sess)
	require.NoError(t, err)
	ev.Close()

	_, err = Open("relative/path", true)
	assert.Error(t, err)
}

func TestCaptureAndCommandFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	d, err := Open(path, false)
	require.NoError(t, err)
	defer d.Close()
	v, err := d.Capture()
	require.NoError(t, err)
	require.NoError(t, v.Verify())

	_, found, err := d.ReadCommandFile()
	assert.False(t, found)
	assert.Error(t, err)

	body := base64.StdEncoding.EncodeToString([]byte(`{"command":"cat"}`))
	require.NoError(t, os.WriteFile(filepath.Join(path, CommandFile), []byte(body), 0o600))
	b, found, err := d.ReadCommandFile()
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, body, string(b))
	assert.False(t, exists(filepath.Join(path, CommandFile)), "always deleted")

	// A symlinked command.b64 is refused and the link (not its target) removed.
	target := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(target, []byte(body), 0o600))
	require.NoError(t, os.Symlink(target, filepath.Join(path, CommandFile)))
	_, found, err = d.ReadCommandFile()
	assert.True(t, found)
	assert.Error(t, err)
	assert.False(t, exists(filepath.Join(path, CommandFile)))
	assert.True(t, exists(target))
}

func TestWriteChildAtomic0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	d, err := Open(path, false)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.WriteChild(ChildRecord{Pgid: 123, StartTime: 456}))
	b, err := os.ReadFile(filepath.Join(path, ChildFile))
	require.NoError(t, err)
	assert.Equal(t, `{"pgid":123,"startTime":456}`, string(b))
	fi, err := os.Stat(filepath.Join(path, ChildFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	assert.False(t, exists(filepath.Join(path, ChildFile+TmpSuffix)))
}

func TestReadRegularBounds(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte("12345"), 0o600))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	_, err = ReadRegular(int(f.Fd()), 4, nil)
	assert.ErrorIs(t, err, ErrTooLarge)
	f2, err := os.Open(p)
	require.NoError(t, err)
	defer f2.Close()
	b, err := ReadRegular(int(f2.Fd()), 5, nil)
	require.NoError(t, err)
	assert.Equal(t, "12345", string(b))
	d, err := os.Open(filepath.Dir(p))
	require.NoError(t, err)
	defer d.Close()
	_, err = ReadRegular(int(d.Fd()), 5, nil)
	assert.ErrorIs(t, err, errNotRegular)
}

func TestParseTuning(t *testing.T) {
	cases := map[string]int64{"": 100, "abc": 100, "0": 100, "-5": 100, "3": 3, " 7ms": 7, "12.9": 12, "+4": 4}
	for in, want := range cases {
		assert.Equal(t, want, ParseTuning(in, 100), "%q", in)
	}
}

func TestReadRegularRawFD(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, []byte("12345"), 0o600))
	read := func(path string, max int64, buf []byte) ([]byte, error) {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		defer unix.Close(fd)
		return ReadRegular(fd, max, buf)
	}
	_, err := read(p, 4, nil)
	assert.ErrorIs(t, err, ErrTooLarge)
	b, err := read(p, 5, nil)
	require.NoError(t, err)
	assert.Equal(t, "12345", string(b))
	buf := make([]byte, 0, 64)
	b, err = read(p, 5, buf)
	require.NoError(t, err)
	assert.Equal(t, "12345", string(b))
	assert.Same(t, &buf[:1][0], &b[0], "read into buf")
	_, err = read(dir, 5, nil)
	assert.ErrorIs(t, err, errNotRegular)
	// A file longer than its stat size (as if it grew while read): /proc
	// files stat as empty.
	want, err := os.ReadFile("/proc/self/cmdline")
	require.NoError(t, err)
	b, err = read("/proc/self/cmdline", 1<<20, nil)
	require.NoError(t, err)
	assert.Equal(t, want, b)
	_, err = read("/proc/self/cmdline", int64(len(want)-1), nil)
	assert.ErrorIs(t, err, ErrTooLarge)
}
