package state

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSideFileRoundTripAndTamper(t *testing.T) {
	dir := t.TempDir()
	data := []byte(`{"operations":[]}`)
	name, err := WriteSide(dir, data)
	require.NoError(t, err)
	require.Equal(t, SideName(data), name)
	again, err := WriteSide(dir, data)
	require.NoError(t, err, "a second write of the same content keeps the file")
	require.Equal(t, name, again)

	got, err := ReadSide(dir, name, 1<<20)
	require.NoError(t, err)
	require.Equal(t, data, got)

	path, err := sidePath(dir, name)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	di, err := os.Stat(filepath.Join(dir, SideDir))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), di.Mode().Perm())

	_, err = ReadSide(dir, name, int64(len(data)-1))
	require.ErrorContains(t, err, "larger than")

	require.NoError(t, os.WriteFile(path, []byte(`{"operations":[1]}`), 0o600))
	_, err = ReadSide(dir, name, 1<<20)
	require.ErrorContains(t, err, "does not match its name")
}

func TestSideFileRefusesNamesThatAreNotAddresses(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"", "sha256:", "sha256:../../etc/passwd", "md5:00",
		"sha256:" + string(make([]byte, 64)),
		"sha256:ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"} {
		_, err := ReadSide(dir, name, 10)
		require.ErrorContains(t, err, "not a sha256 content address", name)
	}
}

func TestSideFileRefusesASymlinkedFile(t *testing.T) {
	dir := t.TempDir()
	data := []byte(`secret`)
	name := SideName(data)
	require.NoError(t, os.Mkdir(filepath.Join(dir, SideDir), 0o700))
	outside := filepath.Join(t.TempDir(), "x")
	require.NoError(t, os.WriteFile(outside, data, 0o600))
	path, err := sidePath(dir, name)
	require.NoError(t, err)
	require.NoError(t, os.Symlink(outside, path))
	_, err = ReadSide(dir, name, 10)
	require.Error(t, err)
}
