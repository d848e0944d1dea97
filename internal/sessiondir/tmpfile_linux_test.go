package sessiondir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestCreateFilledNamesAndRefusals: a file created filled appears under
// its name with the whole body and mode 0600, and an existing name (a
// file or a symlink) is refused with EEXIST and left alone.
func TestCreateFilledNamesAndRefusals(t *testing.T) {
	dir := t.TempDir()
	d, err := os.Open(dir)
	require.NoError(t, err)
	defer d.Close()
	dfd := int(d.Fd())
	err = createFilled(dfd, "a.tmp", []byte("body\n"), 0o600)
	if errors.Is(err, errNoTmpfile) {
		t.Skip("no O_TMPFILE here: the named path is the other tests'")
	}
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "a.tmp"))
	require.NoError(t, err)
	assert.Equal(t, "body\n", string(b))
	fi, err := os.Stat(filepath.Join(dir, "a.tmp"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	assert.ErrorIs(t, createFilled(dfd, "a.tmp", []byte("other\n"), 0o600), unix.EEXIST)
	b, _ = os.ReadFile(filepath.Join(dir, "a.tmp"))
	assert.Equal(t, "body\n", string(b), "an existing file is never replaced")

	require.NoError(t, os.Symlink(filepath.Join(dir, "target"), filepath.Join(dir, "link.tmp")))
	assert.ErrorIs(t, createFilled(dfd, "link.tmp", []byte("x"), 0o600), unix.EEXIST)
	_, err = os.Lstat(filepath.Join(dir, "target"))
	assert.True(t, os.IsNotExist(err), "a symlink is not followed")
}

// TestNamedCreateFallback runs the writer's and the atomic writes' tests
// the way a system without O_TMPFILE (or /proc) does, so the named create
// stays covered although this machine takes the filled path.
func TestNamedCreateFallback(t *testing.T) {
	noTmpfile.Store(true)
	defer noTmpfile.Store(false)
	for name, test := range map[string]func(*testing.T){
		"WritesMessagesInOrder":      TestWriterWritesMessagesInOrder,
		"NeverReplacesExistingFile":  TestWriterNeverReplacesExistingFile,
		"RefusesSymlinks":            TestWriterRefusesSymlinks,
		"SerializesConcurrentWrites": TestWriterSerializesConcurrentWrites,
		"ReaderNeverSeesPartialFile": TestWriterReaderNeverSeesPartialFile,
		"StagesThenPublishes":        TestWriterStagesThenPublishes,
		"WriteBody":                  TestWriterWriteBody,
		"WriteChildAtomic0600":       TestWriteChildAtomic0600,
		"EventReaderReusesBuffers":   TestEventReaderReusesBuffers,
	} {
		t.Run(name, test)
	}
}

// TestWriteEventFileOverStaleTemp: a temporary name left by a crash is
// overwritten (the named path takes over when the link finds the name
// taken), and only the complete event file remains.
func TestWriteEventFileOverStaleTemp(t *testing.T) {
	dir := t.TempDir()
	name := SeqName(1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+TmpSuffix), []byte("stale and longer than the body"), 0o600))
	d, err := os.Open(dir)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, writeEventFile(int(d.Fd()), 1, []byte("{}\n")))
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	assert.Equal(t, "{}\n", string(b))
	_, err = os.Lstat(filepath.Join(dir, name+TmpSuffix))
	assert.True(t, os.IsNotExist(err), "no temporary name stays behind")
}
