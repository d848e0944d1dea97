package clientfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(racerDirEnv); dir != "" {
		os.Exit(runRacer(dir, os.Getenv(racerLinkEnv)))
	}
	goleak.VerifyTestMain(m)
}

// The racer is this test binary re-executed: another process that swaps
// a directory of cwd with a symlink to the outside until its stdin closes.
const (
	racerDirEnv  = "CLIENTFS_TEST_RACER_DIR"
	racerLinkEnv = "CLIENTFS_TEST_RACER_LINK"
	// maxRacerSwaps bounds the racer if its parent never closes stdin.
	maxRacerSwaps = 5_000_000
)

// runRacer swaps dir and link (renameat2 RENAME_EXCHANGE, so neither name
// is ever missing), says "ready" after the first swap, and on stdin EOF
// restores the real directory under dir and prints the swap count.
func runRacer(dir, link string) int {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	swaps := 0
	for swaps < maxRacerSwaps {
		select {
		case <-done:
			if swaps%2 == 1 {
				if err := unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
					fmt.Fprintln(os.Stderr, "restore:", err)
					return 1
				}
			}
			fmt.Println(swaps)
			return 0
		default:
		}
		if err := unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
			fmt.Fprintln(os.Stderr, "swap:", err)
			return 1
		}
		swaps++
		if swaps == 1 {
			fmt.Println("ready")
		}
	}
	<-done
	return 0
}

// secret is what an escape would leak: no answer may carry it.
const secret = "top-secret-outside-content"

// fixture is a session cwd with an outside directory next to it holding
// a secret, and links inside cwd that point out.
type fixture struct {
	cwd, outside string
	roots        Roots
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	base := t.TempDir()
	f := fixture{cwd: filepath.Join(base, "cwd"), outside: filepath.Join(base, "outside")}
	require.NoError(t, os.MkdirAll(filepath.Join(f.cwd, "sub"), 0o755))
	require.NoError(t, os.MkdirAll(f.outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(f.outside, "secret"), []byte(secret), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(f.cwd, "sub", "ok.txt"), []byte("inside\n"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(f.outside, "secret"), filepath.Join(f.cwd, "abs-link")))
	require.NoError(t, os.Symlink("../outside/secret", filepath.Join(f.cwd, "rel-link")))
	require.NoError(t, os.Symlink("../outside", filepath.Join(f.cwd, "dir-link")))
	require.NoError(t, os.Symlink("sub/ok.txt", filepath.Join(f.cwd, "in-link")))
	f.roots = Roots{Cwd: f.cwd}
	return f
}

// backends runs fn once with openat2 and once with the os.Root fallback.
func backends(t *testing.T, fn func(t *testing.T)) {
	for _, b := range []struct {
		name    string
		openat2 bool
	}{{"openat2", true}, {"osroot", false}} {
		t.Run(b.name, func(t *testing.T) {
			prev := useOpenat2.Load()
			useOpenat2.Store(b.openat2)
			t.Cleanup(func() { useOpenat2.Store(prev) })
			fn(t)
		})
	}
}

func rpcErr(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	require.ErrorAs(t, err, &e)
	require.NotContains(t, e.Message, secret, "an error never carries file contents")
	return e
}

func read(r Roots, path string) (string, error) {
	res, err := Read(r, ReadRequest{SessionID: "sess-1", Path: path})
	return res.Content, err
}

// TestTools12_ReadEscapesRefused: fs/read_text_file of `../etc/passwd`, of
// an absolute path outside cwd, of `..` out of cwd, and of absolute and
// relative symlinks (file and directory) pointing out → invalid params
// naming the path; a symlink that stays inside is followed (tools.md §9
// scenario 12).
func TestTools12_ReadEscapesRefused(t *testing.T) {
	backends(t, func(t *testing.T) {
		f := newFixture(t)
		for _, p := range []string{
			"../etc/passwd",
			"/etc/passwd",
			f.cwd + "/../outside/secret",
			f.cwd + "/abs-link",
			f.cwd + "/rel-link",
			f.cwd + "/dir-link/secret",
			f.outside + "/secret",
			f.cwd + "x/secret", // a sibling sharing cwd's prefix
		} {
			_, err := read(f.roots, p)
			e := rpcErr(t, err)
			require.Equal(t, codeInvalidParams, e.Code, "%s: %s", p, e.Message)
			require.Contains(t, e.Message, quote(p), "the message names the path as given")
		}
		got, err := read(f.roots, f.cwd+"/in-link")
		require.NoError(t, err)
		require.Equal(t, "inside\n", got)
		got, err = read(f.roots, f.cwd+"/sub/../sub/ok.txt")
		require.NoError(t, err)
		require.Equal(t, "inside\n", got)
	})
}

// TestReadAdditionalRoot: a path inside an additional directory is
// served; the sibling of both roots is not.
func TestReadAdditionalRoot(t *testing.T) {
	f := newFixture(t)
	r := Roots{Cwd: f.cwd, Additional: []string{f.outside}}
	got, err := read(r, f.outside+"/secret")
	require.NoError(t, err)
	require.Equal(t, secret, got)
	_, err = read(r, filepath.Dir(f.cwd)+"/other")
	require.Equal(t, codeInvalidParams, rpcErr(t, err).Code)
}

// TestReadErrors: a missing file is resource not found; a directory and a
// FIFO are refused without blocking.
func TestReadErrors(t *testing.T) {
	backends(t, func(t *testing.T) {
		f := newFixture(t)
		_, err := read(f.roots, f.cwd+"/missing.txt")
		require.Equal(t, CodeResourceNotFound, rpcErr(t, err).Code)
		_, err = read(f.roots, f.cwd+"/sub")
		e := rpcErr(t, err)
		require.Equal(t, codeInvalidParams, e.Code)
		require.Contains(t, e.Message, "is a directory")
		require.NoError(t, unix.Mkfifo(filepath.Join(f.cwd, "fifo"), 0o644))
		_, err = read(f.roots, f.cwd+"/fifo")
		require.Contains(t, rpcErr(t, err).Message, "not a regular file")
	})
}

// TestTools12_ReadHugeFile: a 100 MiB (sparse) file → a clear error
// naming the limit, whole or as one enormous line; the ranged read stops
// at the bound, so it allocates far less than the file (tools.md §9
// scenario 12).
func TestTools12_ReadHugeFile(t *testing.T) {
	f := newFixture(t)
	p := filepath.Join(f.cwd, "huge.bin")
	fh, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, fh.Truncate(100<<20))
	require.NoError(t, fh.Close())

	_, err = read(f.roots, p)
	e := rpcErr(t, err)
	require.Equal(t, codeInvalidParams, e.Code)
	require.Contains(t, e.Message, "exceeds the 8 MiB response limit")

	one := uint32(1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Read(f.roots, ReadRequest{SessionID: "s", Path: p, Line: &one, Limit: &one})
	runtime.ReadMemStats(&after)
	require.Contains(t, rpcErr(t, err).Message, "exceeds the 8 MiB response limit")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(40<<20), "the read stopped near the bound")

	// A line of a huge file that fits is served.
	require.NoError(t, os.WriteFile(p, append([]byte("first\nsecond\n"), make([]byte, 20<<20)...), 0o644))
	two := uint32(2)
	res, err := Read(f.roots, ReadRequest{SessionID: "s", Path: p, Line: &two, Limit: &one})
	require.NoError(t, err)
	require.Equal(t, "second\n", res.Content)
}

// TestReadEncodedBound: content under 8 MiB raw that JSON escaping pushes
// past the bound is refused (the bound is on the encoded response).
func TestReadEncodedBound(t *testing.T) {
	f := newFixture(t)
	p := filepath.Join(f.cwd, "ctl.bin")
	require.NoError(t, os.WriteFile(p, make([]byte, 2<<20), 0o644)) // NULs: \u0000 each
	_, err := read(f.roots, p)
	require.Contains(t, rpcErr(t, err).Message, "response limit")
	require.NoError(t, os.WriteFile(p, []byte(strings.Repeat("a", 7<<20)), 0o644))
	got, err := read(f.roots, p)
	require.NoError(t, err)
	require.Len(t, got, 7<<20)
}

// TestReadLineLimit: line is 1-based, limit counts lines, a line keeps
// its newline, and a range past the end is empty.
func TestReadLineLimit(t *testing.T) {
	f := newFixture(t)
	p := filepath.Join(f.cwd, "lines.txt")
	require.NoError(t, os.WriteFile(p, []byte("l1\nl2\nl3\nl4"), 0o644))
	u := func(n uint32) *uint32 { return &n }
	for _, c := range []struct {
		line, limit *uint32
		want        string
	}{
		{nil, nil, "l1\nl2\nl3\nl4"},
		{u(1), nil, "l1\nl2\nl3\nl4"},
		{u(0), u(1), "l1\n"},
		{u(2), nil, "l2\nl3\nl4"},
		{u(2), u(2), "l2\nl3\n"},
		{nil, u(1), "l1\n"},
		{u(4), u(10), "l4"},
		{u(5), nil, ""},
		{u(2), u(0), ""},
	} {
		res, err := Read(f.roots, ReadRequest{SessionID: "s", Path: p, Line: c.line, Limit: c.limit})
		require.NoError(t, err)
		require.Equal(t, c.want, res.Content, "line %v limit %v", c.line, c.limit)
	}
}

func write(r Roots, path, content string) error {
	return Write(r, WriteRequest{SessionID: "sess-1", Path: path, Content: content})
}

// TestTools12_WriteDenyAll: fs/write_text_file under deny-all → refused,
// nothing created; reads still work (tools.md §9 scenario 12).
func TestTools12_WriteDenyAll(t *testing.T) {
	f := newFixture(t)
	r := f.roots
	r.ReadOnly = true
	err := write(r, f.cwd+"/new.txt", "x")
	e := rpcErr(t, err)
	require.Equal(t, codeInternalError, e.Code)
	require.Contains(t, e.Message, "deny-all")
	require.NoFileExists(t, filepath.Join(f.cwd, "new.txt"))
	_, err = read(r, f.cwd+"/sub/ok.txt")
	require.NoError(t, err)
}

// TestWriteEscapesRefused: writes through `..`, a directory symlink out,
// or onto a symlink (which a rename would replace) are refused and leave
// the outside untouched.
func TestWriteEscapesRefused(t *testing.T) {
	backends(t, func(t *testing.T) {
		f := newFixture(t)
		for _, p := range []string{
			f.cwd + "/../outside/new",
			f.cwd + "/dir-link/new",
			f.cwd + "/dir-link/deeper/new",
			f.cwd + "/abs-link",
			f.cwd + "/rel-link",
			"/tmp/pcrunner-clientfs-never",
		} {
			e := rpcErr(t, write(f.roots, p, "x"))
			require.Equal(t, codeInvalidParams, e.Code, "%s: %s", p, e.Message)
		}
		entries, err := os.ReadDir(f.outside)
		require.NoError(t, err)
		require.Len(t, entries, 1, "only the secret is outside")
		b, _ := os.ReadFile(filepath.Join(f.outside, "secret"))
		require.Equal(t, secret, string(b))
	})
}

// TestWriteAtomicKeepsMode: a write replaces the file with the existing
// mode kept, a new file gets 0644 whatever the umask, missing parents
// inside the root are created, and no temporary file is left.
func TestWriteAtomicKeepsMode(t *testing.T) {
	backends(t, func(t *testing.T) {
		f := newFixture(t)
		old := unix.Umask(0o077)
		defer unix.Umask(old)
		exe := filepath.Join(f.cwd, "run.sh")
		require.NoError(t, os.WriteFile(exe, []byte("old"), 0o700))
		require.NoError(t, os.Chmod(exe, 0o751))
		require.NoError(t, write(f.roots, exe, "#!/bin/sh\n"))
		fi, err := os.Stat(exe)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o751), fi.Mode().Perm())
		b, _ := os.ReadFile(exe)
		require.Equal(t, "#!/bin/sh\n", string(b))

		deep := filepath.Join(f.cwd, "a", "b", "c.txt")
		require.NoError(t, write(f.roots, deep, ""))
		fi, err = os.Stat(deep)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
		require.Zero(t, fi.Size())

		require.NoError(t, write(f.roots, f.cwd+"/in-dir/../sub/x.txt", "y"))
		require.FileExists(t, filepath.Join(f.cwd, "sub", "x.txt"))
		for _, dir := range []string{f.cwd, filepath.Join(f.cwd, "a", "b"), filepath.Join(f.cwd, "sub")} {
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			for _, e := range entries {
				require.NotContains(t, e.Name(), ".pcrunner-", "no temporary file is left")
			}
		}
	})
}

// TestWriteDirectoryMovedOut: the target's directory is moved out of the
// root between resolution and rename → the write is undone and fails;
// nothing it wrote is left outside.
func TestWriteDirectoryMovedOut(t *testing.T) {
	f := newFixture(t)
	moved := filepath.Join(f.outside, "moved")
	testHookBeforeRename = func() { _ = os.Rename(filepath.Join(f.cwd, "sub"), moved) }
	defer func() { testHookBeforeRename = nil }()
	e := rpcErr(t, write(f.roots, f.cwd+"/sub/new.txt", "payload"))
	require.Equal(t, codeInternalError, e.Code)
	require.Contains(t, e.Message, "moved out")
	entries, err := os.ReadDir(moved)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{"ok.txt"}, names, "the write was undone")
}

// raceRounds bounds the racing-rename test.
const raceRounds = 400

// TestWriteRacingRenames: while another process swaps a directory of cwd
// with a symlink to the outside (renameat2 RENAME_EXCHANGE, the classic
// resolution race), writes through that directory either land inside or
// fail; none lands outside.
func TestWriteRacingRenames(t *testing.T) {
	backends(t, func(t *testing.T) {
		f := newFixture(t)
		dir, link := filepath.Join(f.cwd, "d"), filepath.Join(f.cwd, "swap")
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, os.Symlink(f.outside, link))
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), racerDirEnv+"="+dir, racerLinkEnv+"="+link)
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		out := bufio.NewScanner(stdout)
		require.True(t, out.Scan(), "the racer started")
		require.Equal(t, "ready", out.Text())

		ok := 0
		for i := range raceRounds {
			err := write(f.roots, fmt.Sprintf("%s/d/f-%d", f.cwd, i), "x")
			if err == nil {
				ok++
				continue
			}
			var e *Error
			require.True(t, errors.As(err, &e))
			require.Contains(t, []int{codeInvalidParams, CodeResourceNotFound, codeInternalError}, e.Code, e.Message)
		}
		require.NoError(t, stdin.Close())
		require.True(t, out.Scan(), "the racer reports its swaps")
		swaps := out.Text()
		require.NoError(t, cmd.Wait())
		entries, err := os.ReadDir(f.outside)
		require.NoError(t, err)
		require.Len(t, entries, 1, "no write landed outside the root")
		inside, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, inside, ok, "every successful write is inside")
		t.Logf("%s swaps, %d of %d writes succeeded", swaps, ok, raceRounds)
	})
}

// TestOpenat2Fallback: openat2 failing with ENOSYS (a kernel before 5.6)
// or EPERM (a seccomp filter) switches to os.Root for good, and the
// request that met it is still served, with escapes still refused.
func TestOpenat2Fallback(t *testing.T) {
	for _, errno := range []unix.Errno{unix.ENOSYS, unix.EPERM} {
		t.Run(errno.Error(), func(t *testing.T) {
			f := newFixture(t)
			calls := 0
			openat2 = func(int, string, *unix.OpenHow) (int, error) { calls++; return -1, errno }
			defer func() { openat2 = unix.Openat2; useOpenat2.Store(true) }()
			got, err := read(f.roots, f.cwd+"/sub/ok.txt")
			require.NoError(t, err)
			require.Equal(t, "inside\n", got)
			require.False(t, useOpenat2.Load(), "the fallback sticks")
			_, err = read(f.roots, f.cwd+"/rel-link")
			require.Equal(t, codeInvalidParams, rpcErr(t, err).Code)
			require.NoError(t, write(f.roots, f.cwd+"/new/x.txt", "x"))
			require.Equal(t, 1, calls, "openat2 is not tried again")
		})
	}
}

// BenchmarkRead1MiB: fs/read_text_file of a 1 MiB file inside cwd next to
// a plain os.ReadFile of it (aim: ≤ 2×).
func BenchmarkRead1MiB(b *testing.B) {
	dir := b.TempDir()
	p := filepath.Join(dir, "f.txt")
	line := strings.Repeat("x", 99) + "\n"
	if err := os.WriteFile(p, []byte(strings.Repeat(line, (1<<20)/len(line)+1)[:1<<20]), 0o644); err != nil {
		b.Fatal(err)
	}
	r := Roots{Cwd: dir}
	b.Run("clientfs", func(b *testing.B) {
		b.SetBytes(1 << 20)
		for b.Loop() {
			if _, err := Read(r, ReadRequest{SessionID: "s", Path: p}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("os.ReadFile", func(b *testing.B) {
		b.SetBytes(1 << 20)
		for b.Loop() {
			if _, err := os.ReadFile(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
