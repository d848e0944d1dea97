package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/pcrunner/pcrunner/internal/outputbody"
	"github.com/pcrunner/pcrunner/internal/quote"
)

// Texts are named byte strings that only grow, kept beside the records:
// an open item's accumulated text (acp.md §5), which a step extends by a
// chunk. A record is rewritten whole by every step that changes it; a
// text is stored as rows of appended chunks, so a step writes the chunk,
// not the text.
const (
	// maxTextBytes bounds one text: twice the largest item text a
	// provider keeps (the whole of it may travel as an output body of up
	// to 4 MiB, workspace.md §7.2), so a UTF-8 boundary or a redaction
	// marker never reaches it.
	maxTextBytes = 2 * outputbody.MaxBodyBytes
	// maxTextNameBytes bounds a text's name.
	maxTextNameBytes = 256
)

var (
	// bucketTexts holds each text as rows: name, 0x00, the big-endian
	// 32-bit byte offset of the row's first byte -> the row's bytes. The
	// rows of a name are contiguous from offset 0.
	bucketTexts = []byte("texts")
	// ErrTextOffset is PutText at an offset that neither starts nor
	// extends the text.
	ErrTextOffset = errors.New("text offset is neither 0 nor the text's length")
)

// textKey is the row key of name at off.
func textKey(name string, off int) []byte {
	k := make([]byte, 0, len(name)+5)
	k = append(k, name...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, uint32(off))
}

// checkTextName refuses a name the row keys cannot hold.
func checkTextName(name string) error {
	if name == "" || len(name) > maxTextNameBytes || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("text name %s: empty, over %d bytes or holding NUL", quote.Text(name), maxTextNameBytes)
	}
	return nil
}

// PutText makes the text name, from byte off on, chunk: off 0 replaces
// the text (creating it), off equal to its length appends. Any other
// offset fails ErrTextOffset. A text never exceeds maxTextBytes. The store
// writes only what a step appended.
func (tx *Tx) PutText(name string, off int, chunk []byte) error {
	if err := checkTextName(name); err != nil {
		return fmt.Errorf("put text: %w", err)
	}
	cur, ok := tx.st.Texts[name]
	if off != 0 && (!ok || off != len(cur)) {
		return fmt.Errorf("put text %s at %d: %w", quote.Text(name), off, ErrTextOffset)
	}
	if off+len(chunk) > maxTextBytes {
		return fmt.Errorf("put text %s: over %d bytes", quote.Text(name), maxTextBytes)
	}
	if ok && off == len(cur) && len(chunk) == 0 {
		return nil
	}
	if tx.st.Texts == nil {
		tx.st.Texts = map[string][]byte{}
	}
	if off == 0 {
		// A fresh array: the published state's text keeps its bytes.
		tx.st.Texts[name] = slices.Clone(chunk)
		return nil
	}
	// Appends write past every published length: the array below it is
	// never changed (as the outbox's, see cloneShared).
	tx.st.Texts[name] = append(cur, chunk...)
	return nil
}

// DropText removes the text name (nothing when absent).
func (tx *Tx) DropText(name string) { delete(tx.st.Texts, name) }

// TextNames lists the names of the texts that start with prefix, sorted.
func (tx *Tx) TextNames(prefix string) []string { return tx.st.TextNames(prefix) }

// TextNames lists the names of the texts that start with prefix, sorted.
func (st *State) TextNames(prefix string) []string {
	var out []string
	for k := range st.Texts {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Text returns the text name; ok is false when absent. The bytes are
// shared: the caller must not change them.
func (st *State) Text(name string) (text []byte, ok bool) {
	text, ok = st.Texts[name]
	return text, ok
}

// Text returns a copy of the text name of the current state.
func (s *Store) Text(name string) (text []byte, ok bool) {
	text, ok = s.cur.Load().Text(name)
	return bytes.Clone(text), ok
}

// textsBytes is the texts' total size.
func (st *State) textsBytes() int {
	n := 0
	for _, v := range st.Texts {
		n += len(v)
	}
	return n
}

// putTextDelta writes into tb what turns the stored texts old into st's:
// an extended text gets one row (its new bytes), a replaced one loses its
// rows and gets one, a dropped one loses its rows.
func putTextDelta(tb *bolt.Bucket, old map[string][]byte, texts map[string][]byte, put func(*bolt.Bucket, []byte, []byte) error, drop func(*bolt.Bucket, string) error) error {
	for _, name := range slices.Sorted(maps.Keys(texts)) {
		v := texts[name]
		ov, had := old[name]
		if had && len(ov) <= len(v) && sameBytes(v[:len(ov)], ov) {
			if len(v) > len(ov) {
				if err := put(tb, textKey(name, len(ov)), v[len(ov):]); err != nil {
					return err
				}
			}
			continue
		}
		if had {
			if err := drop(tb, name); err != nil {
				return err
			}
		}
		if err := put(tb, textKey(name, 0), v); err != nil {
			return err
		}
	}
	for name := range old {
		if _, ok := texts[name]; !ok {
			if err := drop(tb, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropTextRows deletes every row of name.
func dropTextRows(tb *bolt.Bucket, name string) error {
	prefix := textKey(name, 0)[:len(name)+1]
	var keys [][]byte
	c := tb.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := tb.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// loadTexts reads every text of tb (nil: none). Errors wrap
// errCorruptState and never quote stored content.
func loadTexts(tb *bolt.Bucket) (map[string][]byte, error) {
	if tb == nil {
		return nil, nil
	}
	var texts map[string][]byte
	n := 0
	err := tb.ForEach(func(k, v []byte) error {
		n++
		i := bytes.IndexByte(k, 0)
		if i < 0 || len(k) != i+5 || checkTextName(string(k[:i])) != nil {
			return fmt.Errorf("load state store: %w: text row %d", errCorruptState, n)
		}
		name, off := string(k[:i]), int(binary.BigEndian.Uint32(k[i+1:]))
		cur, ok := texts[name]
		if off != len(cur) || (off != 0 && !ok) || off+len(v) > maxTextBytes {
			return fmt.Errorf("load state store: %w: text row %d", errCorruptState, n)
		}
		if texts == nil {
			texts = map[string][]byte{}
		}
		texts[name] = append(cur, v...)
		return nil
	})
	return texts, err
}
