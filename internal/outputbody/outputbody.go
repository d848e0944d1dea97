// Package outputbody is the output body of a long text (workspace.md §7,
// durability.md §5): the reference an event carries as outputBody, the
// output.body.chunk payloads cut from the text, the runner's check of a
// chunk before it is enqueued, and the server's assembly rules, which
// prpctl's core applies as the real server does.
//
// A body is cut from text the caller has already passed through the
// outbox's sanitiser; a chunk is never rewritten after the cut, so the
// digests the server verifies are the digests of the bytes it stores.
package outputbody

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// Bounds and wire names (workspace.md §7.2, §7.3; event-v2.schema.json's
// output.body.chunk payload; output-body-reference.schema.json).
const (
	// Threshold: a text longer than this many bytes gets a body.
	Threshold = 4000
	// MaxChunkBytes bounds one chunk's text (the schema's text maxLength).
	MaxChunkBytes = 32766
	// MaxChunkJSONBytes bounds one chunk's text as a JSON string, quotes
	// included; a chunk is halved while it exceeds it.
	MaxChunkJSONBytes = 32768
	// MaxBodyBytes bounds a body (byteLength 1 … 4,194,304); longer text is
	// cut on a character boundary first.
	MaxBodyBytes = 4 << 20
	// MaxBatchEvents is the executor batch of prp.md §8.5: chunks and
	// carrier together never exceed it.
	MaxBatchEvents = 128

	// RefSchema is the body reference's schema.
	RefSchema = "paperclip.output.body.v1"
	// ChunkSchema is an output.body.chunk payload's schema.
	ChunkSchema = "paperclip.output.body.chunk.v1"
	// MediaType is every body's media type.
	MediaType = "text/plain; charset=utf-8"
)

// Ref is the body reference: the carrier's outputBody and every chunk's
// body, exactly these five keys.
type Ref struct {
	Schema     string `json:"schema"`
	BodyID     string `json:"bodyId"`
	SHA256     string `json:"sha256"`
	ByteLength string `json:"byteLength"`
	MediaType  string `json:"mediaType"`
}

// Chunk is an output.body.chunk payload, exactly these five keys.
type Chunk struct {
	Schema string `json:"schema"`
	Body   Ref    `json:"body"`
	Offset string `json:"offset"`
	SHA256 string `json:"sha256"`
	Text   string `json:"text"`
}

// Body is a text cut into chunks.
type Body struct {
	Ref    Ref
	Chunks []Chunk
	// Truncated reports that the text exceeded MaxBodyBytes and the body
	// holds only its first part (the carrier marks textTruncated).
	Truncated bool
}

// ErrEmpty is Cut's error for a text with nothing to carry.
var ErrEmpty = errors.New("output body: empty text")

// Cut cuts text into a body. Invalid UTF-8 becomes U+FFFD first, because
// that is what its JSON encoding would carry, and the digests must be of
// the bytes that travel.
func Cut(text string) (Body, error) {
	text = strings.ToValidUTF8(text, "\uFFFD")
	var b Body
	if len(text) > MaxBodyBytes {
		text, b.Truncated = cutRunes(text, MaxBodyBytes), true
	}
	if text == "" {
		return Body{}, ErrEmpty
	}
	sum := sha256.Sum256([]byte(text))
	digest := hex.EncodeToString(sum[:])
	b.Ref = Ref{Schema: RefSchema, BodyID: digest, SHA256: digest,
		ByteLength: strconv.Itoa(len(text)), MediaType: MediaType}
	for off := 0; off < len(text); {
		n := chunkLen(text[off:])
		part := text[off : off+n]
		cs := sha256.Sum256([]byte(part))
		b.Chunks = append(b.Chunks, Chunk{Schema: ChunkSchema, Body: b.Ref,
			Offset: strconv.Itoa(off), SHA256: hex.EncodeToString(cs[:]), Text: part})
		off += n
	}
	return b, nil
}

// chunkLen is the length of the next chunk of s (valid UTF-8, non-empty):
// at most MaxChunkBytes on a rune boundary, halved while its JSON string
// exceeds MaxChunkJSONBytes, never less than one rune.
func chunkLen(s string) int {
	n := len(cutRunes(s, MaxChunkBytes))
	for n > 0 && jsonLen(s[:n]) > MaxChunkJSONBytes {
		n = len(cutRunes(s, n/2))
	}
	if n == 0 {
		_, n = utf8.DecodeRuneInString(s)
	}
	return n
}

// jsonLen is the length of s as the outbox encodes it, quotes included.
func jsonLen(s string) int {
	return len(jsonenc.MustMarshal(s))
}

// cutRunes returns the longest prefix of s of at most n bytes that ends
// on a rune boundary.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Preview is text cut to at most n bytes on a rune boundary, and whether
// it was cut: the inline part a carrier keeps.
func Preview(text string, n int) (string, bool) {
	p := cutRunes(text, n)
	return p, len(p) < len(text)
}

// Check is the runner's check of one chunk before it is enqueued (OB's
// sanitize_chunk, workspace.md §7.5): Admit's rules, the reference's
// schema and media type, offset + length within byteLength within
// MaxBodyBytes, bodyId = sha256, and the outbox's sanitiser leaving the
// text unchanged. A failure is a runner bug.
func Check(c Chunk, sanitize func(string) string) error {
	if err := Admit(c); err != nil {
		return err
	}
	bad := func(why string) error { return fmt.Errorf("check chunk: %w: %s", ErrInvalidChunk, why) }
	if c.Body.Schema != RefSchema || c.Body.MediaType != MediaType || !utf8.ValidString(c.Text) {
		return bad("wrong reference")
	}
	total, ok := decimal(c.Body.ByteLength)
	if !ok || total < 1 || total > MaxBodyBytes {
		return bad("bad byteLength")
	}
	off, ok := decimal(c.Offset)
	if !ok || off+len(c.Text) > total {
		return bad("bad offset")
	}
	if !isDigest(c.Body.SHA256) || c.Body.BodyID != c.Body.SHA256 {
		return bad("bodyId is not the body's sha256")
	}
	if sanitize != nil && sanitize(c.Text) != c.Text {
		return bad("the outbox sanitiser would rewrite it")
	}
	return nil
}

// ErrInvalidChunk is a chunk the server's admission refuses
// (native_output_body_binding_invalid).
var ErrInvalidChunk = errors.New("native_output_body_binding_invalid")

// Admit is the server's admission of one chunk (workspace.md §7.7, the
// reference's prepareRunOutputChunkPayload): the chunk schema, a
// non-empty text of at most MaxChunkBytes, and its digest. Whether the
// chunks make a body is the download's question (Assemble).
func Admit(c Chunk) error {
	bad := func(why string) error { return fmt.Errorf("admit chunk: %w: %s", ErrInvalidChunk, why) }
	if c.Schema != ChunkSchema {
		return bad("wrong schema")
	}
	if c.Text == "" || len(c.Text) > MaxChunkBytes {
		return bad("empty or oversized text")
	}
	sum := sha256.Sum256([]byte(c.Text))
	if c.SHA256 != hex.EncodeToString(sum[:]) {
		return bad("digest mismatch")
	}
	return nil
}

// decimal parses the schema's decimal strings (no sign, no leading zero,
// at most 7 digits).
func decimal(s string) (int, bool) {
	if s == "" || len(s) > 7 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

func isDigest(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for i := range len(s) {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}
