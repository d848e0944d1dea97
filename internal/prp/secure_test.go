package prp

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLowerHexCodec(t *testing.T) {
	src := make([]byte, 1031)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	for n := 0; n <= len(src); n += 1 + n/7 {
		want := hex.EncodeToString(src[:n])
		enc := make([]byte, 2*n)
		encodeLowerHex(enc, src[:n])
		require.Equal(t, want, string(enc), "n=%d", n)

		// In place: the bytes sit in the back half of the output.
		inPlace := make([]byte, 2*n)
		copy(inPlace[n:], src[:n])
		encodeLowerHex(inPlace, inPlace[n:])
		require.Equal(t, want, string(inPlace), "in place n=%d", n)

		dst := make([]byte, n)
		require.True(t, decodeLowerHex(dst, enc), "n=%d", n)
		require.Equal(t, src[:n], dst)
		assert.Equal(t, n > 0, validCiphertextHex(enc), "n=%d", n)
	}
	// Every byte value in every position of an unrolled step and of the
	// tail is checked, by the decoder and by the validator.
	valid := []byte("0123456789abcdef")
	for _, size := range []int{16, 22} {
		for pos := range size {
			for c := range 256 {
				s := bytes.Repeat([]byte("0"), size)
				s[pos] = byte(c)
				dst := make([]byte, size/2)
				want := bytes.IndexByte(valid, byte(c)) >= 0
				assert.Equal(t, want, decodeLowerHex(dst, s), "size %d pos %d char %#x", size, pos, c)
				assert.Equal(t, want, validCiphertextHex(s), "size %d pos %d char %#x", size, pos, c)
				if want {
					ref, err := hex.DecodeString(string(s))
					require.NoError(t, err)
					assert.Equal(t, ref, dst)
				}
			}
		}
	}
	assert.False(t, decodeLowerHex(make([]byte, 1), []byte("abc")))
	assert.False(t, validCiphertextHex([]byte("abc")))
	assert.False(t, validCiphertextHex(nil))
}

// TestSealFrameLayout: Seal writes exactly the reference layout, sized to
// the byte, with the hex of AES-GCM over the spec's nonce and AAD.
func TestSealFrameLayout(t *testing.T) {
	key := AuthKey("t")
	runner, err := newSession(roleRunner, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	for _, n := range []int{0, 1, 15, 16, 17, 100, 4099} {
		pt := bytes.Repeat([]byte{0xa5}, n)
		counter := runner.seal.counter
		frame, err := runner.Seal(pt)
		require.NoError(t, err)
		nonce := runner.seal.nonce(counter)
		ct := runner.seal.aead.Seal(nil, nonce[:], pt, runner.seal.aad(counter))
		want := fmt.Sprintf(`{"schema":%q,"counter":%d,"ciphertext":%q}`, SecureFrameSchema, counter, hex.EncodeToString(ct))
		assert.Equal(t, want, string(frame), "n=%d", n)
		assert.Equal(t, len(frame), cap(frame), "n=%d: frame sized once", n)
	}
}

// TestAppendSeal: AppendSeal appends exactly the frame Seal would write,
// whether dst has room or must grow, reusing one buffer frame after frame
// (the writer's way), and fails without advancing the counter or touching
// dst.
func TestAppendSeal(t *testing.T) {
	key := AuthKey("t")
	a, err := newSession(roleRunner, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	b, err := newSession(roleRunner, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	core, err := newSession(roleCore, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	var buf []byte
	for i, n := range []int{4099, 0, 17, 100000, 1, 64} {
		pt := bytes.Repeat([]byte{byte(i)}, n)
		want, err := a.Seal(pt)
		require.NoError(t, err)
		buf, err = b.AppendSeal(buf[:0], pt)
		require.NoError(t, err)
		require.Equal(t, want, buf, "n=%d", n)
		got, err := core.Open(buf)
		require.NoError(t, err)
		require.Equal(t, pt, got)

		prefix := []byte("keep")
		want, err = a.Seal(pt)
		require.NoError(t, err)
		out, err := b.AppendSeal(prefix, pt)
		require.NoError(t, err)
		require.Equal(t, append([]byte("keep"), want...), out, "n=%d after a prefix", n)
		_, err = core.Open(out[len(prefix):])
		require.NoError(t, err)
	}

	b.seal.counter = maxFrameCounter + 1
	dst := []byte("x")
	out, err := b.AppendSeal(dst, []byte("y"))
	require.ErrorIs(t, err, errCounterExhausted)
	assert.Equal(t, dst, out)
	assert.Equal(t, uint64(maxFrameCounter+1), b.seal.counter)
}

// TestOpenReturnsOwnedPlaintext: a plaintext Open returned is not touched by
// later Opens, and Open leaves the frame as it was.
func TestOpenReturnsOwnedPlaintext(t *testing.T) {
	key := AuthKey("t")
	runner, err := newSession(roleRunner, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	core, err := newSession(roleCore, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	var kept [][]byte
	for i := range 8 {
		pt := bytes.Repeat([]byte{byte('a' + i)}, 1000+i)
		f, err := runner.Seal(pt)
		require.NoError(t, err)
		sent := bytes.Clone(f)
		got, err := core.Open(f)
		require.NoError(t, err)
		assert.Equal(t, sent, f, "Open wrote to the frame")
		assert.Equal(t, len(got), cap(got))
		kept = append(kept, got)
	}
	for i, got := range kept {
		assert.Equal(t, string(bytes.Repeat([]byte{byte('a' + i)}, 1000+i)), string(got), "plaintext %d", i)
	}
}

func TestSealOpenRoundTripAndCounters(t *testing.T) {
	key := AuthKey("t")
	runner, err := newSession(roleRunner, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	core, err := newSession(roleCore, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	for i := range 50 {
		pt := bytes.Repeat([]byte{byte(i)}, i*37)
		f, err := runner.Seal(pt)
		require.NoError(t, err)
		got, err := core.Open(f)
		require.NoError(t, err)
		assert.Equal(t, string(pt), string(got))
		f, err = core.Seal(pt)
		require.NoError(t, err)
		got, err = runner.Open(f)
		require.NoError(t, err)
		assert.Equal(t, string(pt), string(got))
	}
	// A frame sealed for one direction never opens in the other.
	f, err := runner.Seal([]byte("x"))
	require.NoError(t, err)
	_, err = runner.Open(f)
	assert.ErrorIs(t, err, ErrSecureFrame)

	// The counter stops at 2^53−1: the core could not read a larger one.
	runner.seal.counter = maxFrameCounter + 1
	_, err = runner.Seal([]byte("x"))
	assert.ErrorIs(t, err, errCounterExhausted)
}

// TestAppendOpen: AppendOpen into a reused buffer opens what Open opens,
// keeps dst's prefix, allocates nothing once the buffer has grown, and on
// a rejected frame returns dst unchanged and fails the direction.
func TestAppendOpen(t *testing.T) {
	key := AuthKey("t")
	runner, err := newSession(roleRunner, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	core, err := newSession(roleCore, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	var buf []byte
	for i, n := range []int{4099, 0, 17, 100000, 1, 64} {
		pt := bytes.Repeat([]byte{byte(i)}, n)
		f, err := runner.Seal(pt)
		require.NoError(t, err)
		buf, err = core.AppendOpen(buf[:0], f)
		require.NoError(t, err)
		require.Equal(t, string(pt), string(buf), "n=%d", n)

		f, err = runner.Seal(pt)
		require.NoError(t, err)
		out, err := core.AppendOpen([]byte("keep"), f)
		require.NoError(t, err)
		require.Equal(t, "keep"+string(pt), string(out), "n=%d after a prefix", n)
	}

	// Grown to the largest frame: the next opens reuse it.
	frames := make([][]byte, 8)
	for i := range frames {
		frames[i], err = runner.Seal(bytes.Repeat([]byte{'z'}, 1000))
		require.NoError(t, err)
	}
	i := 0
	allocs := testing.AllocsPerRun(len(frames)-1, func() {
		buf, err = core.AppendOpen(buf[:0], frames[i])
		i++
	})
	require.NoError(t, err)
	assert.Zero(t, allocs, "AppendOpen into a grown buffer allocates")

	// A replayed frame is rejected: dst comes back as it was, and the
	// direction stays failed.
	dst := []byte("x")
	out, err := core.AppendOpen(dst, frames[0])
	require.ErrorIs(t, err, ErrFrameCounter)
	assert.Equal(t, []byte("x"), out)
	f, err := runner.Seal([]byte("y"))
	require.NoError(t, err)
	_, err = core.AppendOpen(nil, f)
	assert.ErrorIs(t, err, ErrFrameCounter, "the direction stays failed")
}
