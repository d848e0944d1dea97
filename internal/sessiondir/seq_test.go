package sessiondir

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSeqCounterStartsFromHighestQueuedFile(t *testing.T) {
	d := newSession(t)
	require.NoError(t, os.WriteFile(filepath.Join(d, StdinDir, "000000000007.json"), []byte("{}"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(d, StdinDir, "000000000009.json.x.pcwrap-write.tmp"), nil, 0o600))
	c, err := LockSeqCounter(context.Background(), d)
	require.NoError(t, err)
	assert.Equal(t, int64(8), c.Next())
	require.NoError(t, c.Store(8))
	require.NoError(t, c.Close())

	b, err := os.ReadFile(filepath.Join(d, SeqFile))
	require.NoError(t, err)
	assert.Equal(t, "8", string(b))
	st, err := os.Stat(filepath.Join(d, SeqFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	c, err = LockSeqCounter(context.Background(), d)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, int64(9), c.Next())
}

func TestSeqCounterEmptySession(t *testing.T) {
	d := newSession(t)
	c, err := LockSeqCounter(context.Background(), d)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, int64(1), c.Next())
}

// Bad input gets a clear error and nothing is written.
func TestSeqCounterRejectsGarbage(t *testing.T) {
	for _, content := range []string{"abc", "-3", "12abc", "99999999999999999999999"} {
		d := newSession(t)
		require.NoError(t, os.WriteFile(filepath.Join(d, SeqFile), []byte(content), 0o600))
		_, err := LockSeqCounter(context.Background(), d)
		require.ErrorIs(t, err, errBadSeqCounter, content)
	}
}

func TestSeqCounterIsExclusive(t *testing.T) {
	d := newSession(t)
	c, err := LockSeqCounter(context.Background(), d)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = LockSeqCounter(ctx, d)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, c.Close())
	c2, err := LockSeqCounter(context.Background(), d)
	require.NoError(t, err)
	require.NoError(t, c2.Close())
}

// Security: a symlink planted at the counter's name is not followed.
func TestSeqCounterRefusesSymlink(t *testing.T) {
	d := newSession(t)
	target := filepath.Join(t.TempDir(), "target")
	require.NoError(t, os.WriteFile(target, []byte("5"), 0o600))
	require.NoError(t, os.Symlink(target, filepath.Join(d, SeqFile)))
	_, err := LockSeqCounter(context.Background(), d)
	require.ErrorIs(t, err, errClientSymlink)
	b, _ := os.ReadFile(target)
	assert.Equal(t, "5", string(b))
}

// FuzzSeqCounter feeds arbitrary counter-file contents: the counter either
// yields a number past every queued file or refuses the file.
func FuzzSeqCounter(f *testing.F) {
	for _, s := range []string{"", "0", "3", " 12\n", "x", "-1", "18446744073709551616", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		if len(content) > maxCounterBytes {
			return
		}
		d := newSession(t)
		require.NoError(t, os.WriteFile(filepath.Join(d, StdinDir, "000000000004.json"), []byte("{}"), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(d, SeqFile), []byte(content), 0o600))
		c, err := LockSeqCounter(context.Background(), d)
		if err != nil {
			require.ErrorIs(t, err, errBadSeqCounter)
			return
		}
		defer c.Close()
		assert.Greater(t, c.Next(), int64(4))
	})
}
