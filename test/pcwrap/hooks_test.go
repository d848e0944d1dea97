package pcwrap_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// Scenarios 25-34 and 60 (spec §13 B, F) on the test-hook build; the
// hooks and their env vars are documented in
// internal/sessiondir/probe_testhooks.go and
// internal/stdinpoll/watch_testhooks.go.

func hookStart(t *testing.T, o opts) *session {
	o.tags = []string{hookTag}
	return start(t, o)
}

// markerPayload returns a child that leaves a marker file, then cats.
func markerPayload(marker string) payload { return sh("touch " + marker + "; exec cat") }

// TestPcwrap25_ZeroBtimeAccepted (T16).
func TestPcwrap25_ZeroBtimeAccepted(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "session")
	s := hookStart(t, opts{dir: dir, env: []string{"PCWRAP_TEST_FAKE_BTIME=" + dir + "=zero"}})
	s.putRaw(1, stdinEndMsg)
	assert.Equal(t, 0, s.wait(waitBound))
	assert.NotContains(t, s.stderr.String(), "not usable")
	assert.Equal(t, 1, count(readEvents(t, dir), frame.FrameExit))
}

// TestPcwrap26_CtimeBtimeRefused (T17).
func TestPcwrap26_CtimeBtimeRefused(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "session")
	marker := filepath.Join(root, "child-ran")
	s := hookStart(t, opts{dir: dir, payload: markerPayload(marker), env: []string{"PCWRAP_TEST_FAKE_BTIME=" + filepath.Join(dir, "stdin") + "=ctime"}})
	assert.Equal(t, 1, s.wait(waitBound))
	assert.Contains(t, s.stderr.String(), "changed after a probe write")
	assert.Contains(t, s.stderr.String(), "Refusing to trust the process session control path stdinDir ("+filepath.Join(dir, "stdin")+")")
	assert.False(t, exists(marker), "no child may start")
	fr := readEvents(t, dir)
	assert.True(t, hasError(fr, "changed after a probe write"))
	assert.Equal(t, frame.FrameShutdownAck, fr[len(fr)-1].Type)
}

// nobody runs pcwrap as an unprivileged user when the tests run as root,
// so that chmod 000 denies it (root bypasses permission bits).
func nobody(t *testing.T, paths ...string) *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	for _, p := range paths {
		require.NoError(t, os.Chown(p, 65534, 65534))
	}
	return &syscall.Credential{Uid: 65534, Gid: 65534}
}

// TestPcwrap27_PrivateParentChmod000 (T18) and
// TestPcwrap28_SessionDirChmod000 (T19): a peer denying search
// permission latches the identity with an EACCES reason.
func TestPcwrap27_PrivateParentChmod000(t *testing.T) {
	t.Parallel()
	testDenied(t, true)
}

func TestPcwrap28_SessionDirChmod000(t *testing.T) {
	t.Parallel()
	testDenied(t, false)
}

func testDenied(t *testing.T, parent bool) {
	root := t.TempDir()
	open := []string{root, filepath.Dir(root)}
	private := filepath.Join(root, "private")
	dir := filepath.Join(private, "session")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "stdin"), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "events"), 0o700))
	cred := nobody(t, private, dir, filepath.Join(dir, "stdin"), filepath.Join(dir, "events"))
	bin := testbin.Path(t, "pcwrap")
	open = append(open, filepath.Dir(bin))
	for _, p := range open {
		require.NoError(t, os.Chmod(p, 0o755))
	}
	if cred != nil {
		skipUnlessReachable(t, int(cred.Uid), bin, dir)
	}
	// The child starts in root, not in pcwrap's cwd (the test's, inside the
	// checkout): a clone under a 0700 directory (mktemp -d) is out of the
	// dropped uid's reach, and the spawn failed with EACCES.
	p := sh("sleep 300")
	p.Cwd = root
	scans := watchScans(t, filepath.Join(dir, "stdin"))
	s := start(t, opts{dir: dir, noMkdir: true, payload: p, cred: cred})
	pgid := s.childPgid()
	// The identity must be lost while pcwrap supervises, not during setup.
	scans.waitReaderRunning(t)
	victim := dir
	if parent {
		victim = private
	}
	require.NoError(t, os.Chmod(victim, 0))
	t.Cleanup(func() { _ = os.Chmod(victim, 0o700) })
	s.wait(10 * time.Second)
	assert.Contains(t, s.stderr.String(), "Latching on a lost process session identity: lstat failed with EACCES. Terminating.")
	groupGone(t, pgid, 5*time.Second)
}

// skipUnlessReachable skips the test when uid cannot search every
// directory above the given paths (for example a TMPDIR inside a private
// home), naming the directory in the way.
func skipUnlessReachable(t *testing.T, uid int, paths ...string) {
	t.Helper()
	for _, p := range paths {
		for d := filepath.Dir(p); ; d = filepath.Dir(d) {
			var st syscall.Stat_t
			require.NoError(t, syscall.Stat(d, &st))
			if st.Mode&0o001 == 0 && (int(st.Uid) != uid || st.Mode&0o100 == 0) {
				t.Skipf("uid %d cannot reach %s: %s is mode %#o; point TMPDIR at a world-traversable directory", uid, p, d, st.Mode&0o777)
			}
			if d == "/" {
				break
			}
		}
	}
}

// TestPcwrap29_PlantedProbeSymlink (T20).
func TestPcwrap29_PlantedProbeSymlink(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "session")
	marker := filepath.Join(root, "child-ran")
	target := filepath.Join(root, "target")
	require.NoError(t, os.WriteFile(target, []byte("keep"), 0o600))
	s := hookStart(t, opts{dir: dir, payload: markerPayload(marker), env: []string{"PCWRAP_TEST_PAUSE_BEFORE_PROBE=1:400"}})
	link := filepath.Join(dir, sessiondir.ProbeName(s.cmd.Process.Pid, 1))
	require.NoError(t, os.Symlink(target, link))
	assert.Equal(t, 1, s.wait(waitBound))
	assert.Contains(t, s.stderr.String(), "could not be created exclusively")
	assert.False(t, exists(marker), "no child may start")
	dst, err := os.Readlink(link)
	require.NoError(t, err)
	assert.Equal(t, target, dst)
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b))
}

// TestPcwrap30_ProbeRemoved (T21): without interference no probe file
// stays behind (production build).
func TestPcwrap30_ProbeRemoved(t *testing.T) {
	t.Parallel()
	s := start(t, opts{})
	s.childPgid()
	for _, d := range []string{s.dir, filepath.Join(s.dir, "stdin")} {
		ents, err := os.ReadDir(d)
		require.NoError(t, err)
		for _, e := range ents {
			assert.False(t, strings.HasPrefix(e.Name(), sessiondir.ProbePrefix), "probe left: %s", e.Name())
		}
	}
	s.put(1, stdinEndMsg)
	assert.Equal(t, 0, s.wait(waitBound))
}

// TestPcwrap31to33_SwappedProbeKept (T22, T23, T24): a peer's file,
// directory or symlink swapped in at the last check stays untouched.
func TestPcwrap31to33_SwappedProbeKept(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"file", "dir", "symlink"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "session")
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "stdin"), 0o700))
			scans := watchScans(t, filepath.Join(dir, "stdin"))
			s := hookStart(t, opts{dir: dir, env: []string{"PCWRAP_TEST_PROBE_SWAP=1:" + kind}})
			s.childPgid()
			// The probes ran before the spawn (spec §4 step 3); once the
			// reader runs, setup, the only code that touches probes, is over.
			scans.waitReaderRunning(t)
			p := filepath.Join(s.dir, sessiondir.ProbeName(s.cmd.Process.Pid, 1))
			fi, err := os.Lstat(p)
			require.NoError(t, err, "the peer's %s must stay", kind)
			switch kind {
			case "file":
				b, err := os.ReadFile(p)
				require.NoError(t, err)
				assert.Equal(t, "peer", string(b))
			case "dir":
				assert.True(t, fi.IsDir())
			case "symlink":
				dst, err := os.Readlink(p)
				require.NoError(t, err)
				assert.Equal(t, "probe-swap-target", dst)
				assert.False(t, exists(filepath.Join(s.dir, "probe-swap-target")), "link not followed")
			}
			s.put(1, stdinEndMsg)
			assert.Equal(t, 0, s.wait(waitBound))
		})
	}
}

// TestPcwrap34_ProbeFstatFailure (T25).
func TestPcwrap34_ProbeFstatFailure(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "session")
	marker := filepath.Join(root, "child-ran")
	s := hookStart(t, opts{dir: dir, payload: markerPayload(marker), env: []string{"PCWRAP_TEST_FSTAT_FAILURE_PROBE=1"}})
	assert.Equal(t, 1, s.wait(waitBound))
	assert.Contains(t, s.stderr.String(), "its own probe file's identity could not be read")
	assert.False(t, exists(marker), "no child may start")
	fi, err := os.Lstat(filepath.Join(dir, sessiondir.ProbeName(s.cmd.Process.Pid, 1)))
	require.NoError(t, err, "the probe stays without a verified identity")
	assert.True(t, fi.Mode().IsRegular())
}

// TestPcwrap60_OverflowRescan: with every inotify event lost to a
// forced overflow, the overflow's full rescan delivers all waiting files
// in order.
func TestPcwrap60_OverflowRescan(t *testing.T) {
	t.Parallel()
	s := hookStart(t, opts{mode: "stdout", env: []string{"PCWRAP_TEST_INOTIFY_OVERFLOW=1"}})
	var want strings.Builder
	for i := int64(1); i <= 20; i++ {
		fmt.Fprintf(&want, "<%d>", i)
		s.put(i, stdinMsg(fmt.Sprintf("<%d>", i)))
	}
	s.put(21, stdinEndMsg)
	assert.Equal(t, 0, s.wait(waitBound))
	assert.Equal(t, want.String(), output(s.frames(), frame.StreamStdout))
}
