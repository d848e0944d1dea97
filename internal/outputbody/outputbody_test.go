package outputbody

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// checkBody asserts every rule of workspace.md §7.3 on a cut body of text.
func checkBody(t testing.TB, text string, b Body) {
	t.Helper()
	want := strings.ToValidUTF8(text, "\uFFFD")
	if len(want) > MaxBodyBytes {
		want = cutRunes(want, MaxBodyBytes)
	}
	var joined strings.Builder
	for _, c := range b.Chunks {
		require.NoError(t, Check(c, nil))
		require.Equal(t, strconv.Itoa(joined.Len()), c.Offset, "offsets are contiguous")
		require.True(t, utf8.ValidString(c.Text), "cut on a UTF-8 boundary")
		require.LessOrEqual(t, len(c.Text), MaxChunkBytes)
		require.LessOrEqual(t, len(jsonenc.MustMarshal(c.Text)), MaxChunkJSONBytes)
		joined.WriteString(c.Text)
	}
	require.Equal(t, want, joined.String())
	sum := sha256.Sum256([]byte(joined.String()))
	require.Equal(t, hex.EncodeToString(sum[:]), b.Ref.SHA256)
	require.Equal(t, b.Ref.SHA256, b.Ref.BodyID)
	require.Equal(t, strconv.Itoa(joined.Len()), b.Ref.ByteLength)
	got, err := Assemble(b.Ref.BodyID, b.Chunks)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// TestWorkspace15_OneChunk (chunker part): 10,000 ASCII bytes are one chunk
// at offset "0", byteLength "10000", the body digest that of the chunk.
func TestWorkspace15_OneChunk(t *testing.T) {
	text := strings.Repeat("x", 10_000)
	b, err := Cut(text)
	require.NoError(t, err)
	require.Len(t, b.Chunks, 1)
	require.Equal(t, "0", b.Chunks[0].Offset)
	require.Equal(t, "10000", b.Ref.ByteLength)
	require.Equal(t, b.Chunks[0].SHA256, b.Ref.SHA256)
	checkBody(t, text, b)
}

// TestWorkspace16_UTF8Boundaries (chunker part): 100,000 bytes of 4-byte
// emoji and text are cut on UTF-8 boundaries, each chunk within both
// bounds, offsets contiguous, the concatenation hashing to bodyId.
func TestWorkspace16_UTF8Boundaries(t *testing.T) {
	var sb strings.Builder
	for sb.Len() < 100_000 {
		sb.WriteString("ab\U0001F600c")
	}
	text := sb.String()
	b, err := Cut(text)
	require.NoError(t, err)
	require.Greater(t, len(b.Chunks), 3)
	checkBody(t, text, b)
}

// TestWorkspace17_ControlCharacters: 40,000 NUL/control characters escape to
// 6 bytes each as JSON: chunks shrink until each JSON string ≤ 32,768.
func TestWorkspace17_ControlCharacters(t *testing.T) {
	text := strings.Repeat("\x00\x01\x1f", 40_000/3+1)[:40_000]
	b, err := Cut(text)
	require.NoError(t, err)
	for _, c := range b.Chunks {
		require.Less(t, len(c.Text), MaxChunkBytes/4, "halved")
	}
	checkBody(t, text, b)
}

// TestCutBounds: the 4 MiB limit cuts on a character boundary and marks
// the body truncated; invalid UTF-8 travels as U+FFFD; empty text has no
// body.
func TestCutBounds(t *testing.T) {
	text := strings.Repeat("é", MaxBodyBytes/2) + "tail"
	b, err := Cut(text)
	require.NoError(t, err)
	require.True(t, b.Truncated)
	require.Equal(t, strconv.Itoa(MaxBodyBytes), b.Ref.ByteLength)
	checkBody(t, text, b)

	b, err = Cut("a\xffb")
	require.NoError(t, err)
	require.Equal(t, "a\uFFFDb", b.Chunks[0].Text)

	_, err = Cut("")
	require.ErrorIs(t, err, ErrEmpty)
}

// TestWorkspace22_Assembly: the server's download rules (ROB,
// assembleRunOutputBody): all chunks → the exact text, in whatever order
// they were stored and with a repeated body's chunks stored twice; the
// last dropped → not complete; two chunks' texts swapped, a gap, a wrong
// digest, another body's chunk or a changed byteLength → verification
// error; more than byteLength → exceeds; none, or an id that is not a
// digest → not found.
func TestWorkspace22_Assembly(t *testing.T) {
	text := strings.Repeat("0123456789", 10_000)
	b, err := Cut(text)
	require.NoError(t, err)
	require.Len(t, b.Chunks, 4)
	cs, id := b.Chunks, b.Ref.BodyID
	clone := func() []Chunk { return append([]Chunk(nil), cs...) }

	got, err := Assemble(id, cs)
	require.NoError(t, err)
	require.Equal(t, text, got)
	got, err = Assemble(id, append([]Chunk{cs[3], cs[1], cs[0], cs[2]}, cs...))
	require.NoError(t, err, "offset order, one chunk per offset")
	require.Equal(t, text, got)

	_, err = Assemble(id, cs[:3])
	require.ErrorIs(t, err, ErrNotComplete)
	require.Equal(t, 409, Status(err))

	swapped := clone()
	swapped[0].Text, swapped[0].SHA256, swapped[1].Text, swapped[1].SHA256 = cs[1].Text, cs[1].SHA256, cs[0].Text, cs[0].SHA256
	_, err = Assemble(id, swapped)
	require.ErrorIs(t, err, ErrVerification)
	require.Equal(t, "Stored output failed verification", err.Error())

	_, err = Assemble(id, []Chunk{cs[0], cs[2], cs[3]})
	require.ErrorIs(t, err, ErrVerification, "a gap")

	bad := clone()
	bad[1].Text = strings.Repeat("9", len(bad[1].Text))
	_, err = Assemble(id, bad)
	require.ErrorIs(t, err, ErrVerification, "a chunk's digest")

	other, err := Cut(strings.Repeat("z", 5000))
	require.NoError(t, err)
	_, err = Assemble(id, []Chunk{cs[0], {Schema: ChunkSchema, Body: other.Ref, Offset: cs[1].Offset, SHA256: cs[1].SHA256, Text: cs[1].Text}})
	require.ErrorIs(t, err, ErrVerification, "another body's chunk")

	grown := clone()
	grown[1].Body.ByteLength = "100001"
	_, err = Assemble(id, grown)
	require.ErrorIs(t, err, ErrVerification, "byteLength changed")

	short := clone()
	for i := range short {
		short[i].Body.ByteLength = "40000"
	}
	_, err = Assemble(id, short)
	require.ErrorIs(t, err, ErrExceedsLength)

	_, err = Assemble(id, nil)
	require.ErrorIs(t, err, ErrNotFound)
	require.Equal(t, 404, Status(err))
	_, err = Assemble("not-a-digest", cs)
	require.ErrorIs(t, err, ErrNotFound)
}

// TestAdmitRefuses: the server's admission refuses a wrong schema, an
// empty or oversized text and a digest mismatch; the runner's Check
// refuses those and a wrong reference, an offset past byteLength, a
// bodyId that is not the digest, and a text the sanitiser would change.
func TestAdmitRefuses(t *testing.T) {
	b, err := Cut(strings.Repeat("k", 5000))
	require.NoError(t, err)
	good := b.Chunks[0]
	keep := func(s string) string { return s }
	require.NoError(t, Admit(good))
	require.NoError(t, Check(good, keep))
	for name, tc := range map[string]struct {
		mut   func(c *Chunk)
		admit bool // the server admits it; only Check refuses
	}{
		"empty":      {func(c *Chunk) { c.Text = "" }, false},
		"oversized":  {func(c *Chunk) { c.Text = strings.Repeat("k", MaxChunkBytes+1) }, false},
		"schema":     {func(c *Chunk) { c.Schema = "x" }, false},
		"digest":     {func(c *Chunk) { c.SHA256 = strings.Repeat("0", 64) }, false},
		"ref schema": {func(c *Chunk) { c.Body.Schema = "x" }, true},
		"offset":     {func(c *Chunk) { c.Offset = "1" }, true},
		"lead zero":  {func(c *Chunk) { c.Offset = "00" }, true},
		"bodyId":     {func(c *Chunk) { c.Body.BodyID = strings.Repeat("0", 64) }, true},
		"length":     {func(c *Chunk) { c.Body.ByteLength = "4194305" }, true},
	} {
		c := good
		tc.mut(&c)
		if tc.admit {
			require.NoError(t, Admit(c), name)
		} else {
			require.ErrorIs(t, Admit(c), ErrInvalidChunk, name)
		}
		require.ErrorIs(t, Check(c, keep), ErrInvalidChunk, name)
	}
	require.ErrorIs(t, Check(good, strings.ToUpper), ErrInvalidChunk, "the sanitiser would rewrite it")
}

// FuzzCutAssemble: for any text the chunks are within bounds, contiguous,
// admitted, and reassemble to the text with the reference's digest.
func FuzzCutAssemble(f *testing.F) {
	f.Add("hello")
	f.Add(strings.Repeat("\x00", 40_000))
	f.Add(strings.Repeat("\U0001F600", 9000))
	f.Add(strings.Repeat("<\"\\>", 9000) + "\xff")
	f.Fuzz(func(t *testing.T, text string) {
		b, err := Cut(text)
		if text == "" {
			require.ErrorIs(t, err, ErrEmpty)
			return
		}
		require.NoError(t, err)
		checkBody(t, text, b)
	})
}
