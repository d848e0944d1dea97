package outputbody

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
)

// The server's download errors (workspace.md §7.7): the body is served
// whole or not at all.
var (
	// ErrNotFound: no chunk of the body is stored (404 "Output not found").
	ErrNotFound = errors.New("Output not found")
	// ErrNotComplete: the chunks stored so far are contiguous but end
	// before byteLength (409 "Output is not complete yet").
	ErrNotComplete = errors.New("Output is not complete yet")
	// ErrVerification: a gap, a reorder, a chunk of another body or a bad
	// digest (409 "Stored output failed verification").
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

// Assemble is the server's download of body ref from its chunks in the
// order they were stored (each admitted on arrival): each must start where
// the previous one ended and name the same body; the whole must be
// byteLength long and hash to the reference's digest.
func Assemble(ref Ref, chunks []Chunk) (string, error) {
	if len(chunks) == 0 {
		return "", ErrNotFound
	}
	total, ok := decimal(ref.ByteLength)
	if !ok {
		return "", ErrVerification
	}
	var b strings.Builder
	for _, c := range chunks {
		if c.Body != ref {
			return "", ErrVerification
		}
		if off, ok := decimal(c.Offset); !ok || off != b.Len() {
			return "", ErrVerification
		}
		sum := sha256.Sum256([]byte(c.Text))
		if c.SHA256 != hex.EncodeToString(sum[:]) {
			return "", ErrVerification
		}
		b.WriteString(c.Text)
		if b.Len() > total {
			return "", ErrExceedsLength
		}
	}
	if b.Len() < total {
		return "", ErrNotComplete
	}
	sum := sha256.Sum256([]byte(b.String()))
	if hex.EncodeToString(sum[:]) != ref.SHA256 || ref.BodyID != ref.SHA256 {
		return "", ErrVerification
	}
	return b.String(), nil
}
