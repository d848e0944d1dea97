package bridge

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// cliTimeout bounds every debug CLI invocation; the slowest (stop without
// an ack) takes 3000 ms by contract.
const cliTimeout = 15 * time.Second

// pcwrapCmd runs one pcwrap invocation to completion.
func pcwrapCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(testbin.Path(t, "pcwrap"), args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = 2 * time.Second
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), o.String(), e.String()
		}
		require.NoError(t, err)
		return 0, o.String(), e.String()
	case <-time.After(cliTimeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("pcwrap %v did not finish within %v", args, cliTimeout)
		return 0, "", ""
	}
}

// waitFor polls cond every 10 ms for at most d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lockHeld reports whether someone holds the flock on path, as
// `flock -n path true` would find out.
func lockHeld(t *testing.T, path string) bool {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return false
	}
	require.ErrorIs(t, err, unix.EWOULDBLOCK)
	return true
}

// Scenario 66: pcwrap --session-dir D -- cat; send hello; tail shows the data
// frame; stop acks and removes D without sending a signal; the lock is held
// while pcwrap runs.
func TestPcwrap66_DebugCLIRoundTrip(t *testing.T) {
	bin := testbin.Path(t, "pcwrap")
	d := filepath.Join(t.TempDir(), "session")
	wrapper := exec.Command(bin, "--session-dir", d, "--", "cat")
	var wrapErr syncbuf.Buffer
	wrapper.Stderr = &wrapErr
	wrapper.WaitDelay = 2 * time.Second // bound the stderr copy if a descendant keeps it open
	require.NoError(t, wrapper.Start())
	wrapDone := make(chan struct{})
	var wrapWaitErr error
	go func() { wrapWaitErr = wrapper.Wait(); close(wrapDone) }()
	t.Cleanup(func() {
		select {
		case <-wrapDone:
		default:
			_ = wrapper.Process.Kill()
			<-wrapDone
		}
	})

	waitFor(t, 5*time.Second, "pcwrap to start its child", func() bool {
		_, err := os.Stat(filepath.Join(d, sessiondir.ChildFile))
		return err == nil
	})
	assert.True(t, lockHeld(t, filepath.Join(d, sessiondir.LockFile)), "flock -n .pcwrap.lock must fail while pcwrap runs")

	code, _, stderr := pcwrapCmd(t, "send", "--session-dir", d, "hello")
	require.Equal(t, 0, code, stderr)

	tail := exec.Command(bin, "tail", "--session-dir", d)
	var tailOut, tailErr syncbuf.Buffer
	tail.Stdout, tail.Stderr = &tailOut, &tailErr
	tail.WaitDelay = 2 * time.Second
	require.NoError(t, tail.Start())
	tailDone := make(chan error, 1)
	go func() { tailDone <- tail.Wait() }()
	waitFor(t, 5*time.Second, "tail to print the data frame", func() bool {
		return strings.Contains(tailOut.String(), `"data":"aGVsbG8="`)
	})

	code, _, stderr = pcwrapCmd(t, "stop", "--session-dir", d)
	assert.Equal(t, 0, code, stderr)
	assert.NotContains(t, stderr, "did not acknowledge")
	assert.NoDirExists(t, d)

	// §2.5: a terminate() writes shutdownAck before the child's exit frame,
	// and stop removes D as soon as it reads the ack, so the exit frame may
	// be written after D is gone. tail then ends 1, reporting the vanished
	// directory (§10), instead of 0 after the exit frame; both are a normal
	// end, and either must come within the bound.
	select {
	case err := <-tailDone:
		if err == nil {
			assert.Contains(t, tailOut.String(), `"type":"exit"`, "tail ends 0 only after the exit frame")
		} else {
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, 1, ee.ExitCode(), "stderr: %s", tailErr.String())
			assert.Contains(t, tailErr.String(), sessiondir.ErrSessionGone.Error())
		}
	case <-time.After(cliTimeout):
		_ = tail.Process.Kill()
		<-tailDone
		t.Fatal("tail did not end after stop")
	}
	lines := strings.Split(strings.TrimSpace(tailOut.String()), "\n")
	require.NotEmpty(t, lines)
	assert.Equal(t, `{"seq":1,"type":"data","stream":"stdout","data":"aGVsbG8="}`, lines[0])

	select {
	case <-wrapDone:
		// pcwrap ended on its own (the shutdown message), not by a signal
		// from stop: it exits with a status, it is not signalled.
		ws := wrapper.ProcessState.Sys().(syscall.WaitStatus)
		assert.False(t, ws.Signaled(), "pcwrap was killed by a signal: %v", wrapWaitErr)
	case <-time.After(cliTimeout):
		t.Fatal("pcwrap did not exit after stop")
	}
}

// Scenario 67: stop on a session whose pcwrap never runs waits the full
// 3000 ms, warns, exits 3 and removes the directory anyway.
func TestPcwrap67_StopWithoutWrapper(t *testing.T) {
	t.Parallel()
	d := filepath.Join(t.TempDir(), "session")
	require.NoError(t, os.MkdirAll(filepath.Join(d, sessiondir.StdinDir), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(d, sessiondir.EventsDir), 0o700))
	start := time.Now()
	code, _, stderr := pcwrapCmd(t, "stop", "--session-dir", d)
	assert.GreaterOrEqual(t, time.Since(start), sessiondir.ShutdownAckWait)
	assert.Equal(t, 3, code)
	assert.Equal(t, "pcwrap stop: the wrapper did not acknowledge shutdown within 3000ms; removing the session directory anyway.\n", stderr)
	assert.NoDirExists(t, d)
}

// Scenario 68: send twice, then --end: files 1, 2, 3 in order, the third is
// stdinEnd, and the counter holds 3.
func TestPcwrap68_SendNumbersFilesFromCounter(t *testing.T) {
	t.Parallel()
	d := filepath.Join(t.TempDir(), "session")
	require.NoError(t, os.MkdirAll(filepath.Join(d, sessiondir.StdinDir), 0o700))
	for _, args := range [][]string{{"one"}, {"two"}, {"--end"}} {
		code, _, stderr := pcwrapCmd(t, append([]string{"send", "--session-dir", d}, args...)...)
		require.Equal(t, 0, code, stderr)
	}
	stdin := filepath.Join(d, sessiondir.StdinDir)
	ents, err := os.ReadDir(stdin)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"000000000001.json", "000000000002.json", "000000000003.json"}, names)
	for i, want := range []string{`{"type":"stdin","data":"b25l"}`, `{"type":"stdin","data":"dHdv"}`, `{"type":"stdinEnd"}`} {
		b, err := os.ReadFile(filepath.Join(stdin, names[i]))
		require.NoError(t, err)
		assert.Equal(t, want+"\n", string(b))
	}
	b, err := os.ReadFile(filepath.Join(d, sessiondir.SeqFile))
	require.NoError(t, err)
	assert.Equal(t, "3", strings.TrimSpace(string(b)))
}
