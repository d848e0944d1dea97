package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidName(t *testing.T) {
	assert.True(t, validName("pcwrap-123-0123456789ab"))
	for _, bad := range []string{"", "pcwrap-", "pcwrap-123", "pcwrap-x-0123456789ab", "pcwrap-1-0123456789aZ", "pcwrap-1-0123", "system.slice", "pcwrap-1-0123456789ab-x"} {
		assert.False(t, validName(bad), bad)
	}
}

func TestUnescape(t *testing.T) {
	assert.Equal(t, "/sys/fs/cgroup/a b", unescape(`/sys/fs/cgroup/a\040b`))
	assert.Equal(t, `/x\04`, unescape(`/x\04`))
	assert.Equal(t, "/plain", unescape("/plain"))
}

// TestCleanupRefusesWhatItDidNotMake: Cleanup reads its path from a file
// on disk, so it refuses a relative or uncleaned path, a foreign name
// and a directory that is no cgroup2 (no write happens there).
func TestCleanupRefusesWhatItDidNotMake(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pcwrap-1-0123456789ab")
	require.NoError(t, os.Mkdir(dir, 0o700))
	for _, p := range []string{"pcwrap-1-0123456789ab", dir + "/", "/sys/fs/cgroup/../cgroup/pcwrap-1-0123456789ab", "/sys/fs/cgroup/system.slice", dir} {
		assert.ErrorIs(t, Cleanup(p), ErrNotCgroup, p)
	}
	assert.DirExists(t, dir)
}

// writable makes a cgroup or skips saying why: a writable cgroup2
// hierarchy is always used.
func writable(t *testing.T) *Cgroup {
	t.Helper()
	c, err := Create()
	if err != nil {
		t.Skipf("no writable cgroup2 hierarchy here: %v", err)
	}
	t.Cleanup(func() { _ = c.End(); c.Close() })
	return c
}

// TestSpawnIntoKillRemove: a child spawned with CLONE_INTO_CGROUP is in
// the cgroup from its first instruction, with what it forks; cgroup.kill
// ends all of them, "populated 0" follows, and the cgroup is removed.
func TestSpawnIntoKillRemove(t *testing.T) {
	c := writable(t)
	own, err := Own()
	require.NoError(t, err)
	assert.Equal(t, own, filepath.Dir(c.Path()))
	pop, err := c.Populated()
	require.NoError(t, err)
	assert.False(t, pop)

	cmd := exec.Command("sh", "-c", "setsid sleep 30 & cat /proc/self/cgroup; exec sleep 30")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: c.FD()}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	buf := make([]byte, 4096)
	n, _ := out.Read(buf)
	var line string
	for _, l := range strings.Split(string(buf[:n]), "\n") {
		if strings.HasPrefix(l, "0::") {
			line = l
		}
	}
	require.NotEmpty(t, line)
	assert.True(t, strings.HasSuffix(c.Path(), strings.TrimPrefix(line, "0::")), "%s in %s", line, c.Path())
	pop, err = c.Populated()
	require.NoError(t, err)
	assert.True(t, pop)

	require.NoError(t, c.End())
	_ = cmd.Wait()
	assert.NoDirExists(t, c.Path())
}

// TestAddProcAndCleanup: the cgroup.procs fallback moves a running
// process in, and Cleanup (runnerd's side for a dead wrapper) kills it
// and removes the cgroup; a second Cleanup finds nothing to do.
func TestAddProcAndCleanup(t *testing.T) {
	c := writable(t)
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	require.NoError(t, c.AddProc(cmd.Process.Pid))
	b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cgroup")
	require.NoError(t, err)
	assert.Contains(t, string(b), filepath.Base(c.Path()))

	require.NoError(t, Cleanup(c.Path()))
	select {
	case <-done:
	case <-time.After(KillWait):
		t.Fatal("the member was not killed")
	}
	assert.NoDirExists(t, c.Path())
	assert.NoError(t, Cleanup(c.Path()), "already gone: nothing to do")
}

// TestEventValues: the flat-keyed files are read by key, a missing key
// or a bad number is an error (any directory serves: the files are read
// relative to its fd).
func TestEventValues(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, eventsFile), []byte("populated 1\nfrozen 0\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, memEventsFile), []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n"), 0o600))
	c, err := open(dir)
	require.NoError(t, err)
	defer c.Close()
	pop, err := c.Populated()
	require.NoError(t, err)
	assert.True(t, pop)
	n, err := c.OOMKills()
	require.NoError(t, err)
	assert.Equal(t, uint64(2), n)
	require.NoError(t, os.WriteFile(filepath.Join(dir, eventsFile), []byte("frozen 0\n"), 0o600))
	_, err = c.Populated()
	assert.Error(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, memEventsFile), []byte("oom_kill x\n"), 0o600))
	_, err = c.OOMKills()
	assert.Error(t, err)
}

// FuzzCleanupPath: a recorded cgroup path is untrusted disk content;
// anything that is not an absolute, clean pcwrap-<pid>-<hex> path is
// refused before any file is touched.
func FuzzCleanupPath(f *testing.F) {
	f.Add("/sys/fs/cgroup/pcwrap-1-0123456789ab")
	f.Add("../pcwrap-1-0123456789ab")
	f.Add("/sys/fs/cgroup/system.slice")
	f.Fuzz(func(t *testing.T, p string) {
		if validName(filepath.Base(p)) && !strings.HasPrefix(filepath.Base(p), namePrefix) {
			t.Fatalf("accepted %q", p)
		}
		_ = unescape(p)
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || !validName(filepath.Base(p)) {
			if err := Cleanup(p); err != ErrNotCgroup {
				t.Fatalf("Cleanup(%q) = %v, want ErrNotCgroup", p, err)
			}
		}
	})
}

// TestSweepRemovesStaleCgroups: an empty cgroup left by a wrapper that
// no longer runs is removed by the next wrapper's Sweep, not by its
// Create (that is on the way to its child's start); a live wrapper's is
// kept.
func TestSweepRemovesStaleCgroups(t *testing.T) {
	c := writable(t)
	parent := filepath.Dir(c.Path())
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run()) // its pid no longer runs
	stale := filepath.Join(parent, namePrefix+strconv.Itoa(cmd.Process.Pid)+"-0123456789ab")
	require.NoError(t, os.Mkdir(stale, dirMode))
	t.Cleanup(func() { _ = os.Remove(stale) })
	c2, err := Create()
	require.NoError(t, err)
	defer func() { _ = c2.End(); c2.Close() }()
	assert.DirExists(t, stale)
	c2.Sweep()
	assert.NoDirExists(t, stale)
	assert.DirExists(t, c.Path(), "this process runs: its cgroup stays")
}

// TestEndOfAVanishedCgroup: a cgroup another pcwrap's sweep removed while
// its owner (runnerd's cleanup of a dead wrapper) was ending it counts as
// ended, not as one that stayed populated.
func TestEndOfAVanishedCgroup(t *testing.T) {
	c := writable(t)
	require.NoError(t, c.Remove()) // the sweep's rmdir
	require.True(t, c.WaitEmpty(time.Millisecond))
	require.NoError(t, c.End())
}
