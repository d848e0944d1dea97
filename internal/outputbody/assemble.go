package outputbody

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strings"
)

// The server's download errors (workspace.md §7.7): the body is served
// whole or not at all.
var (
	// ErrNotFound: no chunk of the body is stored, or the id is not a
	// digest (404 "Output not found").
	ErrNotFound = errors.New("Output not found")
	// ErrNotComplete: the chunks stored so far are contiguous but end
	// before byteLength (409 "Output is not complete yet").
	ErrNotComplete = errors.New("Output is not complete yet")
	// ErrVerification: a gap, a chunk of another body, a byteLength that
	// changes, an oversized or empty text or a bad digest (409 "Stored
	// output failed verification").
	ErrVerification = errors.New("Stored output failed verification")
	// ErrExceedsLength: the chunks hold more than byteLength (409 "Stored
	// output exceeds its declared length").
	ErrExceedsLength = errors.New("Stored output exceeds its declared length")
)

// Status is the HTTP status the server answers err with.
func Status(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	default:
		return http.StatusConflict
	}
}

// Assemble is the server's download of body bodyID from the chunks stored
// for it, as the reference's assembleRunOutputBody reads them: one chunk
// per offset (the first stored), in offset order; each must start where
// the previous one ended, name this body with the same byteLength, and
// match its digest; the text is returned once byteLength bytes are in and
// the whole hashes to bodyID. A caller stores only admitted chunks.
func Assemble(bodyID string, stored []Chunk) (string, error) {
	if !isDigest(bodyID) {
		return "", ErrNotFound
	}
	chunks := byOffset(stored)
	var b strings.Builder
	size := 0
	for _, c := range chunks {
		off, okOff := decimal(c.Offset)
		declared, okLen := decimal(c.Body.ByteLength)
		sum := sha256.Sum256([]byte(c.Text))
		if !okOff || off != b.Len() || !okLen || declared < 1 || declared > MaxBodyBytes ||
			(b.Len() > 0 && declared != size) || c.Schema != ChunkSchema || c.Body.Schema != RefSchema ||
			c.Body.BodyID != bodyID || c.Body.SHA256 != bodyID || c.Body.MediaType != MediaType ||
			c.Text == "" || len(c.Text) > MaxChunkBytes || c.SHA256 != hex.EncodeToString(sum[:]) {
			return "", ErrVerification
		}
		size = declared
		b.WriteString(c.Text)
		if b.Len() > size {
			return "", ErrExceedsLength
		}
		if b.Len() == size {
			whole := sha256.Sum256([]byte(b.String()))
			if hex.EncodeToString(whole[:]) != bodyID {
				return "", ErrVerification
			}
			return b.String(), nil
		}
	}
	if len(chunks) == 0 {
		return "", ErrNotFound
	}
	return "", ErrNotComplete
}

// byOffset is stored with one chunk per offset, the first of each, sorted
// by offset; a chunk whose offset does not parse sorts first, where it
// fails verification.
func byOffset(stored []Chunk) []Chunk {
	key := func(c Chunk) int {
		if n, ok := decimal(c.Offset); ok {
			return n
		}
		return -1
	}
	seen := make(map[int]bool, len(stored))
	out := make([]Chunk, 0, len(stored))
	for _, c := range stored {
		if k := key(c); k < 0 || !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b Chunk) int { return cmp.Compare(key(a), key(b)) })
	return out
}
