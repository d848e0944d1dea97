package sessiondir

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStatIdentityKinds(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "d")
	require.NoError(t, os.Mkdir(dir, 0o700))
	file := filepath.Join(root, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	link := filepath.Join(root, "l")
	require.NoError(t, os.Symlink(dir, link))

	id, err := statIdentity(dir)
	require.NoError(t, err)
	assert.NotZero(t, id.Ino)
	_, err = statIdentity(link)
	assert.ErrorIs(t, err, ErrSymlink)
	_, err = statIdentity(file)
	assert.ErrorIs(t, err, ErrNotDir)
	_, err = statIdentity(filepath.Join(root, "missing"))
	assert.ErrorIs(t, err, syscall.ENOENT)
}

func TestLostReason(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{ErrSymlink, "the control path is now a symbolic link"},
		{ErrNotDir, "the control path is no longer a directory"},
		{syscall.ENOTDIR, "the control path is no longer a directory"},
		{syscall.ENOENT, "the control path no longer exists"},
		{syscall.EACCES, "lstat failed with EACCES"},
		{syscall.Errno(4095), "lstat failed"},
		{os.ErrClosed, "lstat failed"},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, lostReason(tc.err), "%v", tc.err)
	}
}

func TestVerifierLatchNeverClears(t *testing.T) {
	root := t.TempDir()
	sess := filepath.Join(root, "s")
	stdin := filepath.Join(sess, StdinDir)
	require.NoError(t, os.MkdirAll(stdin, 0o700))
	v := &Verifier{SessionPath: sess, StdinPath: stdin}
	var err error
	v.Session, err = statIdentity(sess)
	require.NoError(t, err)
	v.Stdin, err = statIdentity(stdin)
	require.NoError(t, err)
	require.NoError(t, v.Verify())

	// Replace stdin/ by a new directory: a mismatch, latched silently.
	aside := filepath.Join(root, "aside")
	require.NoError(t, os.Rename(stdin, aside))
	require.NoError(t, os.Mkdir(stdin, 0o700))
	err = v.Verify()
	var le *LostError
	require.ErrorAs(t, err, &le)
	assert.True(t, le.First)
	assert.Empty(t, le.Message, "a mismatch terminates without a stderr line")

	// Restoring the original does not clear the latch.
	require.NoError(t, os.Remove(stdin))
	require.NoError(t, os.Rename(aside, stdin))
	err = v.Verify()
	require.ErrorAs(t, err, &le)
	assert.False(t, le.First)
	assert.True(t, v.lost())
}

func TestVerifierStatErrorMessage(t *testing.T) {
	root := t.TempDir()
	sess := filepath.Join(root, "s")
	stdin := filepath.Join(sess, StdinDir)
	require.NoError(t, os.MkdirAll(stdin, 0o700))
	v := &Verifier{SessionPath: sess, StdinPath: stdin}
	v.Session, _ = statIdentity(sess)
	v.Stdin, _ = statIdentity(stdin)
	require.NoError(t, os.RemoveAll(sess))
	var le *LostError
	require.ErrorAs(t, v.Verify(), &le)
	assert.Equal(t, "Latching on a lost process session identity: the control path no longer exists. Terminating.", le.Message)
	assert.True(t, le.First)
	assert.False(t, v.Latch(), "already latched")
}
