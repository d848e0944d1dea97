package procsession

import (
	"bytes"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

func TestUUIDRoundTrip(t *testing.T) {
	u, err := newUUID()
	require.NoError(t, err)
	got, err := ParseUUID(u)
	require.NoError(t, err)
	require.Equal(t, u, got)
	for _, bad := range []string{"", "../x", u[:35] + "G", u + "0", "0D9C1A52-7A8E-4C1B-9F0E-2B8F5F3C9A11"} {
		_, err := ParseUUID(bad)
		require.Error(t, err, bad)
	}
}

func FuzzParseUUID(f *testing.F) {
	f.Add("0d9c1a52-7a8e-4c1b-9f0e-2b8f5f3c9a11")
	f.Add("../../etc/passwd")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseUUID(s)
		if err != nil {
			return
		}
		for _, c := range got {
			if c == '/' || c == '.' {
				t.Fatal("a uuid that can leave its directory")
			}
		}
	})
}

func FuzzParseChildRecord(f *testing.F) {
	f.Add([]byte(`{"pgid":1234,"startTime":99}`))
	f.Add([]byte(`{"pgid":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := ParseChildRecord(b)
		if err == nil && rec.Pgid <= 1 {
			t.Fatal("accepted a group id that would hit runnerd or init")
		}
	})
}

// TestWrapperRunning: a process is named by pid and start time; it runs
// until it exits (a zombie does not run), and the same pid with another
// start time names nothing.
func TestWrapperRunning(t *testing.T) {
	require.False(t, Wrapper{}.Running(), "the zero Wrapper names no process")
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	w := wrapperOf(cmd.Process.Pid)
	require.True(t, w.Known())
	require.True(t, w.Running())
	require.False(t, Wrapper{Pid: w.Pid, Start: w.Start + 1}.Running(), "a reused pid is another process")
	require.NoError(t, cmd.Process.Kill())
	require.Eventually(t, func() bool { return !w.Running() }, 10*time.Second, 5*time.Millisecond,
		"a killed process, a zombie until reaped, does not run")
	_ = cmd.Wait()
	require.False(t, w.Running())
}

func TestParseStat(t *testing.T) {
	line := []byte("4242 (a (b) c) S 1 4242 4242 0 -1 4194560 99 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10\n")
	state, start, err := parseStat(line)
	require.NoError(t, err)
	require.Equal(t, byte('S'), state)
	require.EqualValues(t, 123456, start)
	for _, bad := range []string{"", "4242 (x S 1", "4242 (x) S 1 2 3", "4242 (x) SS 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1"} {
		_, _, err := parseStat([]byte(bad))
		require.Error(t, err, bad)
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("4242 (sh) S 1 4242 4242 0 -1 4194560 99 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10\n"))
	f.Add([]byte("1 ()) Z"))
	f.Fuzz(func(t *testing.T, b []byte) {
		state, _, err := parseStat(b)
		if err == nil && (state == ' ' || state == ')') {
			t.Fatalf("state %q taken from outside field 3", state)
		}
	})
}

func TestEnvironHas(t *testing.T) {
	env := []byte("A=1\x00PAPERCLIP_PROCESS_SESSION_DIR=/s/p/x\x00B=2\x00")
	require.True(t, environHas(env, []byte("PAPERCLIP_PROCESS_SESSION_DIR=/s/p/x")))
	require.False(t, environHas(env, []byte("PAPERCLIP_PROCESS_SESSION_DIR=/s/p")), "a prefix is another directory")
	require.False(t, environHas(env, []byte("SESSION_DIR=/s/p/x")), "a suffix is another variable")
	require.True(t, environHas([]byte("B=2\x00A=1"), []byte("A=1")), "the last entry needs no NUL")
}

func FuzzEnvironHas(f *testing.F) {
	f.Add([]byte("A=1\x00B=2\x00"), []byte("B=2"))
	f.Fuzz(func(t *testing.T, env, want []byte) {
		got := environHas(env, want)
		if got && !bytes.Contains(append(append([]byte{0}, env...), 0), append(append([]byte{0}, want...), 0)) &&
			!bytes.HasSuffix(env, want) {
			t.Fatalf("%q found in %q, which does not hold it whole", want, env)
		}
	})
}

// TestFindWrapper: a process is found by its session directory in its
// environment, and nothing is found for another directory.
func TestFindWrapper(t *testing.T) {
	dir := "/nonexistent/process-sessions/" + t.Name()
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{sessiondir.EnvDir + "=" + dir}
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	w := FindWrapper(dir)
	require.Equal(t, cmd.Process.Pid, w.Pid)
	require.True(t, w.Running())
	require.False(t, FindWrapper(dir+"-other").Known())
}
