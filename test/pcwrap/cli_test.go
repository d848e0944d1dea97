package pcwrap_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// runBin runs pcwrap to completion with env and args; it returns the exit
// status, stdout and stderr.
func runBin(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(testbin.Path(t, "pcwrap"), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, out.String(), errb.String()
}

func TestCLIErrors(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "s")
	cases := []struct {
		name    string
		env     []string
		args    []string
		code    int
		stderr  string
		stdout  string
		created bool
	}{
		{"missing env", nil, nil, 1, "Missing process session bridge env.\n", "", false},
		{"relative dir", []string{"PAPERCLIP_PROCESS_SESSION_DIR=rel/dir"}, nil, 1, "pcwrap: the process session dir must be an absolute path\n", "", false},
		{"bad output env", []string{"PAPERCLIP_PROCESS_SESSION_DIR=" + dir, "PAPERCLIP_PROCESS_SESSION_OUTPUT=xml"}, nil, 1, "pcwrap: invalid output mode xml; want events or stdout\n", "", false},
		{"bad output flag", []string{"PAPERCLIP_PROCESS_SESSION_DIR=" + dir}, []string{"--output=files"}, 1, "pcwrap: invalid output mode files; want events or stdout\n", "", false},
		{"unknown flag", nil, []string{"--bogus"}, 2, "pcwrap: unknown flag: --bogus\nRun 'pcwrap --help' for usage.\n", "", false},
		{"stray arg", nil, []string{"cat"}, 2, "pcwrap: unexpected argument \"cat\"\nRun 'pcwrap --help' for usage.\n", "", false},
		{"command without dir", nil, []string{"--", "cat"}, 2, "pcwrap: -- CMD needs --session-dir\nRun 'pcwrap --help' for usage.\n", "", false},
		{"relative dir flag", nil, []string{"--session-dir", "rel/dir", "--", "cat"}, 2, "pcwrap: --session-dir must be an absolute path\nRun 'pcwrap --help' for usage.\n", "", false},
		{"empty command", nil, []string{"--session-dir", dir, "--"}, 2, "pcwrap: no command after --\nRun 'pcwrap --help' for usage.\n", "", false},
	}
	for _, tc := range cases {
		code, out, errOut := runBin(t, tc.env, tc.args...)
		assert.Equal(t, tc.code, code, tc.name)
		assert.Equal(t, tc.stderr, errOut, tc.name)
		assert.Equal(t, tc.stdout, out, tc.name)
		assert.False(t, exists(dir), "%s: nothing may be created", tc.name)
	}
}

func TestCLIHelp(t *testing.T) {
	t.Parallel()
	code, out, errOut := runBin(t, nil, "--help")
	assert.Equal(t, 0, code)
	assert.Empty(t, errOut)
	for _, want := range []string{"PAPERCLIP_PROCESS_SESSION_DIR", "--session-dir", "-- CMD", "Exit status", "127", "send|stop|tail"} {
		assert.Contains(t, out, want)
	}
}

// TestDebugModeCommandFromFlags: --session-dir DIR -- CMD runs CMD in
// pcwrap's cwd and env, reads no payload, and creates the dir (0700).
func TestDebugModeCommandFromFlags(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "s")
	code, out, errOut := runBin(t, []string{"PAPERCLIP_PROCESS_SESSION_COMMAND_B64=garbage", "MARK=m1"},
		"--session-dir", dir, "--output=stdout", "--", "sh", "-c", `printf '%s' "$MARK"`)
	assert.Equal(t, 0, code, errOut)
	var frames []frame.Frame
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f, err := frame.ParseFrame([]byte(line))
		require.NoError(t, err)
		frames = append(frames, f)
	}
	assert.Equal(t, "m1", output(frames, frame.StreamStdout))
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	assert.False(t, exists(filepath.Join(dir, "events")), "stdout mode creates no events/")
}

// TestSecondWrapperRefused: the session lock keeps a second pcwrap off a
// live session; the first is undisturbed.
func TestSecondWrapperRefused(t *testing.T) {
	t.Parallel()
	s := start(t, opts{mode: "stdout"})
	s.childPgid()
	code, out, _ := runBin(t, []string{"PAPERCLIP_PROCESS_SESSION_DIR=" + s.dir, "PAPERCLIP_PROCESS_SESSION_COMMAND_B64=" + catPayload().b64(t)}, "--output=stdout")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `"message":"pcwrap: another pcwrap holds the process session lock"`)
	s.put(1, stdinMsg("still-here"))
	s.put(2, stdinEndMsg)
	assert.Equal(t, 0, s.wait(waitBound))
	assert.Equal(t, "still-here", output(s.frames(), frame.StreamStdout))
}

// TestDebugModeMissingBinary: a child that cannot be spawned is named on
// stderr in one line, with the errno of the frames, and pcwrap exits 127
// (§2.5).
func TestDebugModeMissingBinary(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "s")
	code, _, errOut := runBin(t, nil, "--session-dir", dir, "--", "/no/such/binary")
	assert.Equal(t, 127, code)
	assert.Equal(t, "pcwrap: cannot spawn /no/such/binary: no such file or directory (ENOENT)\n", errOut)
}
