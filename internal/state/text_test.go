package state

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func putText(t *testing.T, s *Store, name string, off int, chunk string) {
	t.Helper()
	require.NoError(t, s.Update(func(tx *Tx) error { return tx.PutText(name, off, []byte(chunk)) }))
}

// TestTextsSurviveReopen: a text appended chunk by chunk, one replaced
// and one dropped come back from the store as the last step left them,
// in the store and through Read; FileName never holds them.
func TestTextsSurviveReopen(t *testing.T) {
	s, cfg := newStore(t)
	putText(t, s, "a/1", 0, "hello")
	putText(t, s, "a/1", 5, ", ")
	putText(t, s, "a/1", 7, "world")
	putText(t, s, "a/2", 0, "old text")
	putText(t, s, "a/2", 0, "new")
	putText(t, s, "b/1", 0, "gone")
	require.NoError(t, s.Update(func(tx *Tx) error {
		require.Equal(t, []string{"a/1", "a/2"}, tx.TextNames("a/"))
		tx.DropText("b/1")
		return nil
	}))
	err := s.Update(func(tx *Tx) error { return tx.PutText("a/1", 3, []byte("x")) })
	require.ErrorIs(t, err, ErrTextOffset)
	require.ErrorIs(t, s.Update(func(tx *Tx) error { return tx.PutText("none", 1, nil) }), ErrTextOffset)
	require.Error(t, s.Update(func(tx *Tx) error { return tx.PutText("a\x00b", 0, nil) }))
	require.Error(t, s.Update(func(tx *Tx) error { return tx.PutText("big", 0, make([]byte, maxTextBytes+1)) }))
	require.NoError(t, s.Close())

	s = openStore(t, cfg)
	want := map[string][]byte{"a/1": []byte("hello, world"), "a/2": []byte("new")}
	for name, v := range want {
		got, ok := s.Text(name)
		require.True(t, ok, name)
		require.Equal(t, string(v), string(got), name)
	}
	_, ok := s.Text("b/1")
	require.False(t, ok, "a dropped text is gone")
	require.NoError(t, s.Close())
	st, err := Read(cfg.Dir)
	require.NoError(t, err)
	require.Equal(t, want, st.Texts)
	raw, err := os.ReadFile(filepath.Join(cfg.Dir, FileName))
	require.NoError(t, err)
	require.NotContains(t, string(raw), "hello")
}

// TestTextStepWriteDoesNotGrowWithText: a step that appends a chunk to a
// text, rewrites a small record and enqueues an event writes as many
// store bytes with 60 KiB of text before it as with 1 KiB. Measured as
// the pages the store's transactions allocate (each is written at
// commit), a ratio in one run.
func TestTextStepWriteDoesNotGrowWithText(t *testing.T) {
	const steps = 50
	// perStep is a step's store bytes after before bytes of text; inRecord
	// keeps the text inside the record instead, as the agent's record
	// did, to show that the measure sees the difference.
	perStep := func(before int, inRecord bool) float64 {
		s, _ := newStore(t)
		held := strings.Repeat("x", before) // the record's text when inRecord
		if !inRecord {
			// Built as an agent builds it, chunk by chunk.
			for off := 0; off < before; off += 1 << 10 {
				putText(t, s, "item", off, strings.Repeat("x", 1<<10))
			}
		}
		start := pageAlloc(s)
		for i := range steps {
			require.NoError(t, s.Update(func(tx *Tx) error {
				const chunk = "chunk-8 "
				if inRecord {
					held += chunk
					if err := tx.SetRecord("acpAgent", map[string]any{"step": i, "text": held}); err != nil {
						return err
					}
				} else {
					if err := tx.SetRecord("acpAgent", map[string]int{"step": i}); err != nil {
						return err
					}
					if err := tx.PutText("item", before+i*len(chunk), []byte(chunk)); err != nil {
						return err
					}
				}
				_, err := tx.Enqueue(p1("item.delta"))
				return err
			}))
		}
		return float64(pageAlloc(s)-start) / steps
	}
	small, large := perStep(1<<10, false), perStep(60<<10, false)
	t.Logf("store bytes per step: %.0f at 1 KiB of text, %.0f at 60 KiB", small, large)
	require.LessOrEqual(t, large/small, 1.5, "a step's write must not grow with the text it extends")
	recSmall, recLarge := perStep(1<<10, true), perStep(60<<10, true)
	t.Logf("with the text inside the record: %.0f at 1 KiB, %.0f at 60 KiB", recSmall, recLarge)
	require.Greater(t, recLarge/recSmall, 3.0, "the measure sees a record that holds the text")
}

// pageAlloc is the bytes of the pages s's transactions allocated so far.
func pageAlloc(s *Store) int64 {
	st := s.db.Stats()
	return st.TxStats.GetPageAlloc()
}

// FuzzLoadTexts: whatever two rows the texts bucket holds either load
// into texts that write back (putTextDelta) and reload the same, or fail
// with errCorruptState.
func FuzzLoadTexts(f *testing.F) {
	f.Add(textKey("a", 0), []byte("abc"), textKey("a", 3), []byte("def"))
	f.Add(textKey("a", 0), []byte("abc"), textKey("a", 2), []byte("def"))
	f.Add(textKey("a", 1), []byte("abc"), []byte("b"), []byte(""))
	f.Add([]byte{0, 0, 0, 0, 0}, []byte("x"), textKey("b", 0), []byte{})
	dir, err := os.MkdirTemp(f.TempDir(), "store")
	if err != nil {
		f.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, DBName), fileMode, &bolt.Options{NoSync: true, Timeout: dbLockTimeout})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = db.Close() })
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 []byte) {
		for _, k := range [][]byte{k1, k2} {
			if len(k) == 0 || len(k) > bolt.MaxKeySize {
				return
			}
		}
		var texts map[string][]byte
		var loadErr error
		err := db.Update(func(tx *bolt.Tx) error {
			if tx.Bucket(bucketTexts) != nil {
				if err := tx.DeleteBucket(bucketTexts); err != nil {
					return err
				}
			}
			tb, err := tx.CreateBucket(bucketTexts)
			if err != nil {
				return err
			}
			if err := tb.Put(k1, v1); err != nil {
				return err
			}
			if err := tb.Put(k2, v2); err != nil {
				return err
			}
			texts, loadErr = loadTexts(tb)
			if loadErr != nil {
				return nil
			}
			// Written back into an empty bucket, they reload the same.
			if err := tx.DeleteBucket(bucketTexts); err != nil {
				return err
			}
			if tb, err = tx.CreateBucket(bucketTexts); err != nil {
				return err
			}
			put := func(b *bolt.Bucket, k, v []byte) error { return b.Put(k, v) }
			if err := putTextDelta(tb, nil, texts, put, dropTextRows); err != nil {
				return err
			}
			again, err := loadTexts(tb)
			if err != nil {
				return err
			}
			if len(again) != len(texts) {
				return errors.New("a different number of texts after writing back")
			}
			for k, v := range texts {
				if !bytes.Equal(again[k], v) {
					return errors.New("a text changed after writing back")
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if loadErr != nil && !errors.Is(loadErr, errCorruptState) {
			t.Fatalf("load error does not wrap errCorruptState: %v", loadErr)
		}
	})
}
