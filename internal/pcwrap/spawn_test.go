package pcwrap

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChildEnvOverlayAndStrip(t *testing.T) {
	base := []string{"PATH=/usr/bin", "HOME=/root", "PAPERCLIP_PROCESS_SESSION_DIR=/s", "PAPERCLIP_PROCESS_SESSION_COMMAND_B64=x", "PAPERCLIP_SANDBOX_EXEC_CHANNEL=bridge", "NOEQUALS"}
	got := childEnv(base, [][2]string{{"PATH", "/opt/bin"}, {"PAPERCLIP_PROCESS_SESSION_X", "1"}, {"NEW", "v"}, {"BAD=NAME", "v"}, {"NUL", "a\x00b"}, {"", "empty"}})
	assert.Equal(t, []string{"PATH=/opt/bin", "HOME=/root", "PAPERCLIP_SANDBOX_EXEC_CHANNEL=bridge", "NEW=v"}, got)
}

func TestLookPathUsesChildPath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	require.NoError(t, os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755))
	noexec := filepath.Join(dir, "plain")
	require.NoError(t, os.WriteFile(noexec, nil, 0o644))

	p, err := lookPath("tool", []string{"PATH=/nonexistent:" + dir}, "/")
	require.NoError(t, err)
	assert.Equal(t, exe, p)

	_, err = lookPath("tool", []string{"PATH=/usr/bin"}, "/")
	assert.ErrorIs(t, err, syscall.ENOENT)

	// Relative PATH entries resolve against the child's cwd.
	p, err = lookPath("tool", []string{"PATH=."}, dir)
	require.NoError(t, err)
	assert.Equal(t, exe, p)

	if os.Geteuid() != 0 { // root may execute anything with an x bit... and reads all
		_, err = lookPath("plain", []string{"PATH=" + dir}, "/")
		assert.ErrorIs(t, err, syscall.EACCES)
	}
	p, err = lookPath("./x/y", nil, "/")
	require.NoError(t, err)
	assert.Equal(t, "./x/y", p)
}

func TestSpawnErrno(t *testing.T) {
	assert.Equal(t, "ENOENT", spawnErrno(syscall.ENOENT))
	assert.Equal(t, "EACCES", spawnErrno(&os.PathError{Op: "fork/exec", Path: "x", Err: syscall.EACCES}))
	assert.Equal(t, "ENOENT", spawnErrno(&exec.Error{Name: "x", Err: exec.ErrNotFound}))
	assert.Equal(t, "UNKNOWN", spawnErrno(errors.New("weird")))
}
