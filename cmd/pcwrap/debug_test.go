package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

func debugSession(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "s")
	require.NoError(t, os.MkdirAll(filepath.Join(d, sessiondir.StdinDir), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(d, sessiondir.EventsDir), 0o700))
	return d
}

func debug(t *testing.T, stdin string, name string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = debugMain(context.Background(), name, args, strings.NewReader(stdin), &o, &e)
	return code, o.String(), e.String()
}

func TestDebugUsage(t *testing.T) {
	d := debugSession(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"send", nil, "--session-dir is required"},
		{"send", []string{"--session-dir", d}, "nothing to send"},
		{"send", []string{"--session-dir", d, "a", "b"}, "want one TEXT argument"},
		{"send", []string{"--session-dir", d, "--bogus"}, "unknown flag"},
		{"stop", []string{"--session-dir", d, "extra"}, "unexpected argument"},
		{"tail", []string{"--session-dir", d, "--end"}, "unknown flag"},
		{"tail", nil, "--session-dir is required"},
	}
	for _, tc := range cases {
		code, out, errOut := debug(t, "", tc.name, tc.args...)
		assert.Equal(t, debugUsage, code, "%s %v", tc.name, tc.args)
		assert.Empty(t, out)
		assert.Contains(t, errOut, tc.want)
		assert.Contains(t, errOut, "--help")
	}
	assert.Empty(t, dirNames(t, filepath.Join(d, sessiondir.StdinDir)), "usage errors write nothing")
}

func TestDebugHelp(t *testing.T) {
	for _, name := range []string{"send", "stop", "tail"} {
		code, out, errOut := debug(t, "", name, "--help")
		assert.Equal(t, debugOK, code)
		assert.Empty(t, errOut)
		for _, s := range []string{"pcwrap send --session-dir DIR", "pcwrap stop", "pcwrap tail", "Exit status", "3000 ms"} {
			assert.Contains(t, out, s)
		}
	}
}

func TestDebugSendForms(t *testing.T) {
	d := debugSession(t)
	code, _, errOut := debug(t, "", "send", "--session-dir", d, "--", "-- not a flag")
	require.Equal(t, debugOK, code, errOut)
	code, _, _ = debug(t, "from\nstdin\n", "send", "--session-dir", d, "-")
	require.Equal(t, debugOK, code)
	code, _, _ = debug(t, "", "send", "--session-dir", d, "--end")
	require.Equal(t, debugOK, code)

	stdin := filepath.Join(d, sessiondir.StdinDir)
	var got []frame.Message
	for _, n := range dirNames(t, stdin) {
		b, err := os.ReadFile(filepath.Join(stdin, n))
		require.NoError(t, err)
		m, err := frame.ParseMessage(b)
		require.NoError(t, err)
		got = append(got, m)
	}
	require.Len(t, got, 3)
	assert.Equal(t, "-- not a flag", string(got[0].Data))
	assert.Equal(t, "from\nstdin\n", string(got[1].Data), "stdin is sent as-is")
	assert.Equal(t, frame.MsgStdinEnd, got[2].Type)
}

func TestDebugMissingDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	for _, name := range []string{"send", "stop", "tail"} {
		args := []string{"--session-dir", missing}
		if name == "send" {
			args = append(args, "--wait=0", "x")
		}
		code, _, errOut := debug(t, "", name, args...)
		assert.Equal(t, debugFailed, code, name)
		assert.Contains(t, errOut, "pcwrap "+name+": ")
		assert.Contains(t, errOut, "no such file or directory")
	}
}

// Security: the debug CLI refuses a symlinked session dir.
func TestDebugRefusesSymlink(t *testing.T) {
	real := debugSession(t)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(real, link))
	code, _, errOut := debug(t, "", "send", "--session-dir", link, "x")
	assert.Equal(t, debugFailed, code)
	assert.Contains(t, errOut, "symbolic link")
	assert.Empty(t, dirNames(t, filepath.Join(real, sessiondir.StdinDir)))
}

func TestDebugTailWithoutEvents(t *testing.T) {
	d := debugSession(t)
	require.NoError(t, os.Remove(filepath.Join(d, sessiondir.EventsDir)))
	code, _, errOut := debug(t, "", "tail", "--session-dir", d)
	assert.Equal(t, debugFailed, code)
	assert.Contains(t, errOut, "events")
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// Security: input never reaches an error message or a log.
func TestDebugSendNeverEchoesInput(t *testing.T) {
	const secret = "sk-live-SECRET-value"
	missing := filepath.Join(t.TempDir(), "gone")
	_, out, errOut := debug(t, secret, "send", "--session-dir", missing, "--wait=0", "-")
	assert.NotContains(t, out+errOut, secret)
	_, out, errOut = debug(t, "", "send", "--session-dir", missing, "--wait=0", secret)
	assert.NotContains(t, out+errOut, secret)
}

// FuzzDebugArgs feeds arbitrary command lines to the subcommands: each ends
// with a documented exit status and never panics.
func FuzzDebugArgs(f *testing.F) {
	for _, s := range []string{"send\x00x", "send\x00--end", "stop", "tail\x00--help", "send\x00-\x00-", "send\x00--session-dir", "tail\x00--session-dir=\x00x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		parts := strings.Split(line, "\x00")
		name := parts[0]
		if name != "send" && name != "stop" && name != "tail" {
			return
		}
		d := debugSession(t)
		// Point every --session-dir at the temp session so nothing outside
		// it is touched, and give stop/tail a session that ends at once.
		args := []string{"--session-dir", d}
		for _, a := range parts[1:] {
			if !strings.HasPrefix(a, "--session-dir") {
				args = append(args, a)
			}
		}
		require.NoError(t, os.WriteFile(filepath.Join(d, sessiondir.EventsDir, sessiondir.SeqName(1)),
			[]byte(`{"type":"shutdownAck"}`+"\n"), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(d, sessiondir.EventsDir, sessiondir.SeqName(2)),
			[]byte(`{"type":"exit","code":0,"signal":null}`+"\n"), 0o600))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var o, e bytes.Buffer
		code := debugMain(ctx, name, args, strings.NewReader("in"), &o, &e)
		assert.Contains(t, []int{debugOK, debugFailed, debugUsage, debugNoAck}, code)
	})
}

// send names a missing or non-session DIR in plain words, without the
// counter's internals, and leaves nothing behind in a directory that is
// not a session (no "lock seq counter: open session dir", no stray
// .pcwrap-stdin-seq).
func TestDebugSendClearErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	code, _, errOut := debug(t, "", "send", "--session-dir", missing, "--wait=10ms", "x")
	assert.Equal(t, debugFailed, code)
	assert.Equal(t, "pcwrap send: no session directory at "+missing+": no such file or directory (waited 10ms for it)\n", errOut)

	plain := t.TempDir()
	code, _, errOut = debug(t, "", "send", "--session-dir", plain, "--wait=0", "x")
	assert.Equal(t, debugFailed, code)
	assert.Contains(t, errOut, "not a process session directory")
	assert.NotContains(t, errOut, "seq counter")
	assert.Empty(t, dirNames(t, plain), "nothing is created in a directory that is not a session")
}

// A relative --session-dir is a usage error for every subcommand, as for
// the wrapper itself (spec §2.1: the session dir is absolute).
func TestDebugRefusesRelativeDir(t *testing.T) {
	d := debugSession(t)
	t.Chdir(filepath.Dir(d))
	for _, name := range []string{"send", "stop", "tail"} {
		args := []string{"--session-dir", filepath.Base(d)}
		if name == "send" {
			args = append(args, "x")
		}
		code, _, errOut := debug(t, "", name, args...)
		assert.Equal(t, debugUsage, code, name)
		assert.Contains(t, errOut, "--session-dir must be an absolute path", name)
	}
	assert.Empty(t, dirNames(t, filepath.Join(d, sessiondir.StdinDir)))
	assert.DirExists(t, d, "stop removed nothing")
}

// send to a session whose pcwrap has exited fails at once, naming the
// session, and queues nothing nobody would read.
func TestDebugSendToAnEndedSession(t *testing.T) {
	d := debugSession(t)
	require.NoError(t, os.WriteFile(filepath.Join(d, sessiondir.LockFile), nil, 0o600)) // nobody holds it
	code, _, errOut := debug(t, "", "send", "--session-dir", d, "x")
	assert.Equal(t, debugFailed, code)
	assert.Equal(t, "pcwrap send: session "+d+" has ended: its pcwrap has exited (.pcwrap.lock is free), so nothing would read the input\n", errOut)
	assert.Empty(t, dirNames(t, filepath.Join(d, sessiondir.StdinDir)))
}
