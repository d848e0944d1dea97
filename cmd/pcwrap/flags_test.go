package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/pcwrap"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// openPTY returns a pseudo-terminal pair, or skips when the machine has none.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal on this machine: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return m, s
}

// A bare pcwrap typed on a terminal prints the spec's line and points to
// --help; with stderr on a pipe (how the host runs it) the line stays
// exactly the spec's (test/pcwrap TestCLIErrors).
func TestBarePcwrapOnTerminalPointsToHelp(t *testing.T) {
	t.Setenv(sessiondir.EnvDir, "")
	t.Setenv(sessiondir.EnvOutput, "")
	master, tty := openPTY(t)
	_, code, ok := parseFlags(nil, &bytes.Buffer{}, tty)
	assert.False(t, ok)
	assert.Equal(t, exitFailure, code)
	require.NoError(t, master.SetReadDeadline(time.Now().Add(5*time.Second)))
	var got []byte
	buf := make([]byte, 256)
	for !strings.Contains(string(got), "--help") {
		n, err := master.Read(buf)
		require.NoError(t, err, "read so far: %q", got)
		got = append(got, buf[:n]...)
	}
	assert.Contains(t, string(got), pcwrap.MsgMissingEnv)
	assert.Contains(t, string(got), "Run 'pcwrap --help' for usage.")
	assert.Contains(t, string(got), sessiondir.EnvDir, "names the variable to set")

	var pipe bytes.Buffer
	_, _, ok = parseFlags(nil, &bytes.Buffer{}, &pipe)
	assert.True(t, ok, "not a terminal: run reports the missing env as the spec says")
	assert.Empty(t, pipe.String())
}

// --help gives the exit status the spec gives for --output=xml: 1 (§2.2).
func TestHelpExitStatusForBadOutput(t *testing.T) {
	var out bytes.Buffer
	_, code, ok := parseFlags([]string{"--help"}, &out, &bytes.Buffer{})
	require.False(t, ok)
	require.Equal(t, 0, code)
	assert.Contains(t, out.String(), "--output=xml")
	assert.NotContains(t, out.String(), "2 for bad flags")
}
