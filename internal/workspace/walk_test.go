package workspace

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestWorkspace02_Root: the root is the resolved cwd; a missing or
// non-directory cwd is unavailable; runnerd's state dir under it is never
// walked (§2).
func TestWorkspace02_Root(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "ln")
	require.NoError(t, os.Symlink(dir, link))
	r := openRoot(t, link, filepath.Join(link, "state"))
	want, _ := filepath.EvalSymlinks(dir)
	require.Equal(t, want, r.Dir())
	write(t, dir, "state/runner-state.json", "{}")
	write(t, dir, "a.txt", "a\n")
	s := walk(t, r, nil)
	require.True(t, s.Complete())
	require.Contains(t, s.Files, "a.txt")
	require.NotContains(t, s.Files, "state/runner-state.json")

	_, err := Open(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, ErrUnavailable)
	_, err = Open(filepath.Join(dir, "a.txt"))
	require.ErrorIs(t, err, ErrUnavailable)
	_, err = Open("relative")
	require.ErrorIs(t, err, ErrUnavailable)
}

func TestValidPath(t *testing.T) {
	for p, ok := range map[string]bool{
		"a.txt": true, "d/e.go": true, "": false, "/abs": false, "a//b": false, "a/./b": false,
		"../x": false, "a/..": false, "a\nb": false, "\xff": false, strings.Repeat("x", MaxPathChars+1): false,
		strings.Repeat("é", MaxPathChars): true,
	} {
		require.Equal(t, ok, ValidPath(p), "%q", p)
	}
}

// TestWorkspace08_SkippedDirsAndSymlinks: skipped directories, runnerd's
// state dir and a symlink out of the root are never reported (§4.2).
func TestWorkspace08_SkippedDirsAndSymlinks(t *testing.T) {
	dir := t.TempDir()
	r := openRoot(t, dir, filepath.Join(dir, "var/runnerd"))
	before := walk(t, r, nil)
	for _, d := range []string{"node_modules", ".git", "target", ".paperclip-runtime", ".venv", "__pycache__", "var/runnerd", "sub/dist"} {
		write(t, dir, d+"/x.txt", "x\n")
	}
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")))
	require.NoError(t, os.Symlink("/etc", filepath.Join(dir, "etc")))
	write(t, dir, "kept.txt", "k\n")
	after := walk(t, r, before)
	require.True(t, after.Complete(), after.Incomplete)
	files := Compare(before, after, budget(), noRedact)
	require.Equal(t, []string{"kept.txt"}, paths(files))
}

// TestWorkspace27_BadEntries: a FIFO, a device node, a symlink loop,
// names with invalid UTF-8 or a newline → the walk finishes, only the
// other changes are reported.
func TestWorkspace27_BadEntries(t *testing.T) {
	dir := t.TempDir()
	r := openRoot(t, dir)
	before := walk(t, r, nil)
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	require.NoError(t, os.Symlink("loop", filepath.Join(dir, "loop")))
	require.NoError(t, os.Symlink("b", filepath.Join(dir, "a")))
	require.NoError(t, os.Symlink("a", filepath.Join(dir, "b")))
	write(t, dir, "bad\xffname", "x\n")
	write(t, dir, "new\nline", "x\n")
	write(t, dir, "dir\xff/inner.txt", "x\n")
	if err := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Logf("no device node (%v): the FIFO stands for non-regular files", err)
	}
	write(t, dir, "ok.txt", "fine\n")
	after := walk(t, r, before)
	require.True(t, after.Complete(), after.Incomplete)
	require.Equal(t, []string{"ok.txt"}, paths(Compare(before, after, budget(), noRedact)))
}

// TestWorkspace26_Caps: 2,001 files or 501 directories → the walk is
// incomplete, never an empty complete snapshot.
func TestWorkspace26_Caps(t *testing.T) {
	t.Run("files", func(t *testing.T) {
		dir := t.TempDir()
		for i := range MaxFiles + 1 {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "f"+itoa(i)), nil, 0o644))
		}
		s := walk(t, openRoot(t, dir), nil)
		require.Equal(t, IncompleteFiles, s.Incomplete)
	})
	t.Run("dirs", func(t *testing.T) {
		dir := t.TempDir()
		for i := range MaxDirs + 1 {
			require.NoError(t, os.Mkdir(filepath.Join(dir, "d"+itoa(i)), 0o755))
		}
		s := walk(t, openRoot(t, dir), nil)
		require.Equal(t, IncompleteDirs, s.Incomplete)
	})
	t.Run("entries", func(t *testing.T) {
		dir := t.TempDir()
		for i := range MaxDirEntries + 1 {
			require.NoError(t, os.Symlink("x", filepath.Join(dir, "l"+itoa(i))))
		}
		s := walk(t, openRoot(t, dir), nil)
		require.Equal(t, IncompleteDirEntries, s.Incomplete)
	})
	t.Run("unreadable dir", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root reads a mode-000 directory")
		}
		dir := t.TempDir()
		require.NoError(t, os.Mkdir(filepath.Join(dir, "locked"), 0))
		t.Cleanup(func() { os.Chmod(filepath.Join(dir, "locked"), 0o755) })
		s := walk(t, openRoot(t, dir), nil)
		require.Equal(t, IncompleteUnreadable, s.Incomplete)
	})
	t.Run("time", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, "a.txt", "a")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s := openRoot(t, dir).Walk(ctx, nil)
		require.Equal(t, IncompleteTime, s.Incomplete)
		require.False(t, s.Complete())
	})
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestStatCache: an after-walk does not read a file whose identity is
// unchanged and whose mtime is old; it re-reads a recently modified one.
func TestStatCache(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "old.txt", "old\n")
	age(t, dir, "old.txt")
	write(t, dir, "recent.txt", "recent\n")
	r := openRoot(t, dir)
	before := walk(t, r, nil)
	require.Equal(t, 2, before.Read)
	after := walk(t, r, before)
	require.Equal(t, 1, after.Read, "only the recently modified file is read again")
	require.Same(t, before.Files["old.txt"], after.Files["old.txt"])
	require.Empty(t, Compare(before, after, budget(), noRedact))
}

// TestLargeFiles: a file over MaxHashBytes is known by identity and not
// read; one over MaxFileRetainBytes is hashed, not retained, binary.
func TestLargeFiles(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.bin")
	f, err := os.Create(huge)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(1<<30)) // sparse 1 GiB
	require.NoError(t, f.Close())
	write(t, dir, "big.txt", strings.Repeat("line\n", (3<<20)/5))
	r := openRoot(t, dir)
	s := walk(t, r, nil)
	require.True(t, s.Complete())
	require.False(t, s.Files["huge.bin"].Hashed)
	require.True(t, s.Files["huge.bin"].Binary)
	require.True(t, s.Files["big.txt"].Hashed)
	require.True(t, s.Files["big.txt"].Binary)
	require.Nil(t, s.Files["big.txt"].Content)
	require.Equal(t, 1, s.Read)
}

// TestUnreadableFile: a file the walk cannot open makes it incomplete.
func TestUnreadableFile(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads a mode-000 file")
	}
	dir := t.TempDir()
	write(t, dir, "secret", "s")
	require.NoError(t, os.Chmod(filepath.Join(dir, "secret"), 0))
	s := walk(t, openRoot(t, dir), nil)
	require.Equal(t, IncompleteUnreadable, s.Incomplete)
	require.Equal(t, "secret", s.Path)
}
