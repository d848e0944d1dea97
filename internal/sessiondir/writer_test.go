package sessiondir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newSession makes a session dir with stdin/ and events/, as the host's
// launch does.
func newSession(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "session")
	require.NoError(t, os.MkdirAll(filepath.Join(d, StdinDir), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(d, EventsDir), 0o700))
	return d
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

func TestWriterWritesMessagesInOrder(t *testing.T) {
	d := newSession(t)
	w, err := OpenWriter(d, 1, WriterOptions{})
	require.NoError(t, err)
	defer w.Close()
	ctx := context.Background()

	s1, err := w.Stdin(ctx, []byte("hello"))
	require.NoError(t, err)
	s2, err := w.StdinEnd(ctx)
	require.NoError(t, err)
	s3, err := w.Shutdown(ctx)
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 2, 3}, []int64{s1, s2, s3})
	assert.Equal(t, int64(4), w.Next())

	stdin := filepath.Join(d, StdinDir)
	assert.Equal(t, []string{"000000000001.json", "000000000002.json", "000000000003.json"}, dirNames(t, stdin),
		"no temporary sibling may stay behind")
	want := []string{
		`{"type":"stdin","data":"aGVsbG8="}` + "\n",
		`{"type":"stdinEnd"}` + "\n",
		`{"type":"shutdown"}` + "\n",
	}
	for i, w := range want {
		p := filepath.Join(stdin, SeqName(int64(i+1)))
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Equal(t, w, string(b))
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "stdin files may carry credentials")
	}
}

func TestWriterStartsAtCallerSeq(t *testing.T) {
	d := newSession(t)
	w, err := OpenWriter(d, 42, WriterOptions{})
	require.NoError(t, err)
	defer w.Close()
	seq, err := w.StdinEnd(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int64(42), seq)
	assert.FileExists(t, filepath.Join(d, StdinDir, "000000000042.json"))

	_, err = OpenWriter(d, 0, WriterOptions{})
	assert.Error(t, err, "sequence numbers start at 1")
}

// A writer never replaces a queued file: renameat2(RENAME_NOREPLACE).
func TestWriterNeverReplacesExistingFile(t *testing.T) {
	d := newSession(t)
	existing := filepath.Join(d, StdinDir, "000000000001.json")
	require.NoError(t, os.WriteFile(existing, []byte(`{"type":"stdin","data":"b3RoZXI="}`), 0o600))
	w, err := OpenWriter(d, 1, WriterOptions{})
	require.NoError(t, err)
	defer w.Close()

	_, err = w.Stdin(context.Background(), []byte("mine"))
	require.ErrorIs(t, err, errSeqTaken)
	b, err := os.ReadFile(existing)
	require.NoError(t, err)
	assert.Equal(t, `{"type":"stdin","data":"b3RoZXI="}`, string(b), "the earlier file is intact")
	assert.Equal(t, []string{"000000000001.json"}, dirNames(t, filepath.Join(d, StdinDir)), "temp file cleaned up")
	assert.Equal(t, int64(1), w.Next())
}

// Security: control paths refuse symlinks, so a planted link cannot make the
// writer drop files (possibly holding credentials) elsewhere.
func TestWriterRefusesSymlinks(t *testing.T) {
	t.Run("stdin dir", func(t *testing.T) {
		d := filepath.Join(t.TempDir(), "s")
		elsewhere := t.TempDir()
		require.NoError(t, os.MkdirAll(d, 0o700))
		require.NoError(t, os.Symlink(elsewhere, filepath.Join(d, StdinDir)))
		_, err := OpenWriter(d, 1, WriterOptions{})
		require.ErrorIs(t, err, errClientSymlink)
		assert.Empty(t, dirNames(t, elsewhere))
	})
	t.Run("session dir", func(t *testing.T) {
		real := newSession(t)
		link := filepath.Join(t.TempDir(), "link")
		require.NoError(t, os.Symlink(real, link))
		_, err := OpenWriter(link, 1, WriterOptions{})
		require.ErrorIs(t, err, errClientSymlink)
	})
	t.Run("not a directory", func(t *testing.T) {
		d := filepath.Join(t.TempDir(), "s")
		require.NoError(t, os.MkdirAll(d, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(d, StdinDir), nil, 0o600))
		_, err := OpenWriter(d, 1, WriterOptions{})
		require.ErrorIs(t, err, errClientNotDir)
	})
	t.Run("missing", func(t *testing.T) {
		_, err := OpenWriter(filepath.Join(t.TempDir(), "nope"), 1, WriterOptions{})
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}

// PR #11406: file N's rename completes before file N+1 is started, even
// with many concurrent callers; Reserve sees every number once, in order.
func TestWriterSerializesConcurrentWrites(t *testing.T) {
	d := newSession(t)
	stdin := filepath.Join(d, StdinDir)
	var reserved []int64
	var violations []string
	w, err := OpenWriter(d, 1, WriterOptions{Reserve: func(seq int64) error {
		reserved = append(reserved, seq) // under the writer's lock
		if seq > 1 {
			if _, err := os.Stat(filepath.Join(stdin, SeqName(seq-1))); err != nil {
				violations = append(violations, fmt.Sprintf("file %d started before %d was renamed", seq, seq-1))
			}
		}
		return nil
	}})
	require.NoError(t, err)
	defer w.Close()

	const writers, each = 8, 10
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				_, err := w.Stdin(context.Background(), []byte(fmt.Sprintf("g%d-%d", g, i)))
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	assert.Empty(t, violations)
	require.Len(t, reserved, writers*each)
	for i, s := range reserved {
		assert.Equal(t, int64(i+1), s)
	}
	assert.Len(t, dirNames(t, stdin), writers*each)
}

func TestWriterReserveFailureWritesNothing(t *testing.T) {
	d := newSession(t)
	fail := true
	var got []int64
	w, err := OpenWriter(d, 5, WriterOptions{Reserve: func(seq int64) error {
		got = append(got, seq)
		if fail {
			return errors.New("disk full")
		}
		return nil
	}})
	require.NoError(t, err)
	defer w.Close()
	_, err = w.StdinEnd(context.Background())
	require.ErrorContains(t, err, "disk full")
	assert.Empty(t, dirNames(t, filepath.Join(d, StdinDir)))
	fail = false
	seq, err := w.StdinEnd(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int64(5), seq, "a number that never reached the queue is reused, leaving no gap")
	assert.Equal(t, []int64{5, 5}, got)
}

func TestWriterClosedAndCancelled(t *testing.T) {
	d := newSession(t)
	w, err := OpenWriter(d, 1, WriterOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = w.StdinEnd(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, w.Close())
	require.NoError(t, w.Close())
	_, err = w.StdinEnd(context.Background())
	require.ErrorIs(t, err, errWriterClosed)
	assert.Empty(t, dirNames(t, filepath.Join(d, StdinDir)))
}

// Issue #10874: a reader polling the queue while large files are written
// never sees an empty or partial .json file.
func TestWriterReaderNeverSeesPartialFile(t *testing.T) {
	d := newSession(t)
	stdin := filepath.Join(d, StdinDir)
	w, err := OpenWriter(d, 1, WriterOptions{})
	require.NoError(t, err)
	defer w.Close()
	payload := []byte(strings.Repeat("x", 64*1024))

	done := make(chan struct{})
	var reads, parseErrors int
	var rwg sync.WaitGroup
	rwg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			ents, _ := os.ReadDir(stdin)
			for _, e := range ents {
				if !strings.HasSuffix(e.Name(), ".json") {
					continue
				}
				b, err := os.ReadFile(filepath.Join(stdin, e.Name()))
				if err != nil {
					continue // removed between list and read
				}
				var v map[string]any
				if json.Unmarshal(b, &v) != nil {
					parseErrors++
				} else {
					reads++
				}
				_ = os.Remove(filepath.Join(stdin, e.Name()))
			}
		}
	})
	for range 6 {
		_, err := w.Stdin(context.Background(), payload)
		require.NoError(t, err)
	}
	// Let the reader drain what is left, bounded.
	for i := 0; i < 1000 && len(dirNames(t, stdin)) > 0; i++ {
		time.Sleep(time.Millisecond)
	}
	close(done)
	rwg.Wait()
	assert.Zero(t, parseErrors)
	assert.GreaterOrEqual(t, reads, 1)
}

// Security (path swap): once open, the writer publishes through its held
// descriptor; replacing stdin/ by a symlink afterwards does not redirect a
// single file.
func TestWriterHeldDirDefeatsPathSwap(t *testing.T) {
	d := newSession(t)
	w, err := OpenWriter(d, 1, WriterOptions{})
	require.NoError(t, err)
	defer w.Close()
	elsewhere := t.TempDir()
	stdin := filepath.Join(d, StdinDir)
	require.NoError(t, os.Rename(stdin, stdin+".old"))
	require.NoError(t, os.Symlink(elsewhere, stdin))

	_, err = w.Stdin(context.Background(), []byte("secret"))
	require.NoError(t, err)
	assert.Empty(t, dirNames(t, elsewhere), "nothing written through the swapped-in link")
	assert.Equal(t, []string{"000000000001.json"}, dirNames(t, stdin+".old"))
}

// A staged file stays invisible under its temporary name until Publish,
// after the files before it; Locate tells a published file from one that
// never reached the queue (prp.md §7.2 item 8).
func TestWriterStagesThenPublishes(t *testing.T) {
	d := newSession(t)
	w, err := OpenWriter(d, 1, WriterOptions{})
	require.NoError(t, err)
	defer w.Close()
	stdin := filepath.Join(d, StdinDir)

	s, err := w.StageStdin([]byte("prompt"), 2)
	require.NoError(t, err)
	require.Equal(t, []string{s.Tmp}, dirNames(t, stdin), "only the temporary name exists")
	loc, err := w.Locate(s)
	require.NoError(t, err)
	require.Equal(t, Unpublished, loc)
	_, err = w.Publish(s)
	require.Error(t, err, "file 1 comes first")
	loc, err = w.Locate(s)
	require.NoError(t, err)
	require.Equal(t, Unpublished, loc, "a failed publish keeps the staged file")
	_, err = w.Stdin(context.Background(), []byte("first"))
	require.NoError(t, err)
	seq, err := w.Publish(s)
	require.NoError(t, err)
	require.Equal(t, int64(2), seq)
	require.Equal(t, int64(3), w.Next())
	require.Equal(t, []string{"000000000001.json", "000000000002.json"}, dirNames(t, stdin))
	loc, err = w.Locate(s)
	require.NoError(t, err)
	require.Equal(t, published, loc)
	require.NoError(t, os.Remove(filepath.Join(stdin, "000000000002.json"))) // pcwrap consumed it
	loc, err = w.Locate(s)
	require.NoError(t, err)
	require.Equal(t, published, loc)

	s, err = w.StageStdin([]byte("never"), 3)
	require.NoError(t, err)
	require.NoError(t, w.Discard(s))
	require.Equal(t, []string{"000000000001.json"}, dirNames(t, stdin))
	_, err = w.StageStdin([]byte("x"), 1)
	require.ErrorIs(t, err, errSeqTaken)
}

// A file named before it is written (NewStaged) is staged under that very
// name, never over an existing file, and published as StageStdin's.
func TestWriterStagesUnderGivenName(t *testing.T) {
	d := newSession(t)
	w, err := OpenWriter(d, 1, WriterOptions{})
	require.NoError(t, err)
	defer w.Close()
	stdin := filepath.Join(d, StdinDir)

	s, err := NewStaged(1)
	require.NoError(t, err)
	require.NoError(t, w.StageStdinAs([]byte("line"), s))
	require.Equal(t, []string{s.Tmp}, dirNames(t, stdin), "only the given temporary name exists")
	require.Error(t, w.StageStdinAs([]byte("again"), s), "never over an existing file")
	seq, err := w.Publish(s)
	require.NoError(t, err)
	require.Equal(t, int64(1), seq)
	body, err := os.ReadFile(filepath.Join(stdin, SeqName(1)))
	require.NoError(t, err)
	require.Equal(t, "{\"type\":\"stdin\",\"data\":\"bGluZQ==\"}\n", string(body))

	late, err := NewStaged(1)
	require.NoError(t, err)
	require.ErrorIs(t, w.StageStdinAs([]byte("x"), late), errSeqTaken)
}

// TestWriterWriteBody: a body the caller encoded is published as is,
// under the next sequence number, after the same reservation as Write.
func TestWriterWriteBody(t *testing.T) {
	d := newSession(t)
	var reserved []int64
	w, err := OpenWriter(d, 1, WriterOptions{Reserve: func(seq int64) error { reserved = append(reserved, seq); return nil }})
	require.NoError(t, err)
	defer w.Close()
	ctx := context.Background()
	_, err = w.StdinEnd(ctx)
	require.NoError(t, err)
	body := `{"type": "shutdown"}` + "\n"
	seq, err := w.WriteBody(ctx, []byte(body))
	require.NoError(t, err)
	assert.Equal(t, int64(2), seq)
	assert.Equal(t, []int64{1, 2}, reserved)
	b, err := os.ReadFile(filepath.Join(d, StdinDir, SeqName(2)))
	require.NoError(t, err)
	assert.Equal(t, body, string(b))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = w.WriteBody(cancelled, []byte(body))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(3), w.Next())
}
