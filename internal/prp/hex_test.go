package prp

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// hexTestBytes returns n bytes covering every byte value.
func hexTestBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + i>>8 + 7)
	}
	return b
}

// TestHexCodecLengthsAndAlignments compares with encoding/hex for every
// length 0..300 at every offset 0..7 of source and destination, checks the
// bytes around the output stay untouched, and checks the in-place expansion.
func TestHexCodecLengthsAndAlignments(t *testing.T) {
	const pad = 40
	all := hexTestBytes(300 + 8)
	for n := 0; n <= 300; n++ {
		for off := range 8 {
			src := all[off : off+n]
			want := hex.EncodeToString(src)

			buf := bytes.Repeat([]byte{0xee}, 2*n+2*pad)
			dst := buf[pad-off%3 : pad-off%3+2*n]
			encodeLowerHex(dst, src)
			require.Equal(t, want, string(dst), "encode n=%d off=%d", n, off)
			for i, c := range buf {
				if i < pad-off%3 || i >= pad-off%3+2*n {
					require.Equal(t, byte(0xee), c, "encode wrote outside dst: n=%d off=%d at %d", n, off, i)
				}
			}

			inPlace := make([]byte, 2*n+off)[off:]
			copy(inPlace[n:], src)
			encodeLowerHex(inPlace, inPlace[n:])
			require.Equal(t, want, string(inPlace), "in place n=%d off=%d", n, off)

			text := append(make([]byte, off), want...)[off:]
			out := bytes.Repeat([]byte{0xee}, n+2*pad)
			require.True(t, decodeLowerHex(out[pad+off:pad+off+n], text), "decode n=%d off=%d", n, off)
			require.Equal(t, src, out[pad+off:pad+off+n], "decode n=%d off=%d", n, off)
			require.Equal(t, bytes.Repeat([]byte{0xee}, pad+off), out[:pad+off], "decode wrote before dst")
			require.Equal(t, bytes.Repeat([]byte{0xee}, pad-off), out[pad+off+n:], "decode wrote after dst")
		}
	}
}

// TestHexCodecEveryByte encodes and decodes every byte value at every
// position of inputs of several lengths.
func TestHexCodecEveryByte(t *testing.T) {
	for _, n := range []int{1, 31, 32, 33, 64, 95} {
		for pos := range n {
			src := hexTestBytes(n)
			for v := range 256 {
				src[pos] = byte(v)
				enc := make([]byte, 2*n)
				encodeLowerHex(enc, src)
				require.Equal(t, hex.EncodeToString(src), string(enc), "n=%d pos=%d v=%#x", n, pos, v)
				dec := make([]byte, n)
				require.True(t, decodeLowerHex(dec, enc))
				require.Equal(t, src, dec)
			}
		}
	}
}

// TestHexDecodeRejectsEveryInvalidCharacter puts every character that is not
// a lowercase hex digit (uppercase included: the wire format is lowercase)
// at every position, across several lengths.
func TestHexDecodeRejectsEveryInvalidCharacter(t *testing.T) {
	for _, n := range []int{1, 16, 31, 32, 33, 64, 70} {
		good := []byte(hex.EncodeToString(hexTestBytes(n)))
		for pos := range 2 * n {
			for c := range 256 {
				text := bytes.Clone(good)
				text[pos] = byte(c)
				valid := ('0' <= c && c <= '9') || ('a' <= c && c <= 'f')
				dst := make([]byte, n)
				require.Equal(t, valid, decodeLowerHex(dst, text), "n=%d pos=%d char=%#x", n, pos, c)
				if valid {
					ref, err := hex.DecodeString(string(text))
					require.NoError(t, err)
					require.Equal(t, ref, dst)
				}
			}
		}
	}
	// Wrong lengths.
	require.False(t, decodeLowerHex(make([]byte, 32), make([]byte, 63)))
	require.False(t, decodeLowerHex(make([]byte, 32), make([]byte, 65)))
	// An uppercase frame that encoding/hex would accept.
	up := bytes.ToUpper([]byte(hex.EncodeToString(hexTestBytes(64))))
	require.False(t, decodeLowerHex(make([]byte, 64), up))
}

func FuzzHexCodec(f *testing.F) {
	f.Add([]byte{})
	f.Add(hexTestBytes(100))
	f.Add([]byte(hex.EncodeToString(hexTestBytes(40))))
	f.Add([]byte("0123456789abcdefABCDEF0123456789abcdef0123456789abcdef0123456789"))
	f.Fuzz(func(t *testing.T, data []byte) {

		enc := make([]byte, 2*len(data))
		encodeLowerHex(enc, data)
		if want := hex.EncodeToString(data); string(enc) != want {
			t.Fatalf("encode: got %q, want %q", enc, want)
		}
		inPlace := make([]byte, 2*len(data))
		copy(inPlace[len(data):], data)
		encodeLowerHex(inPlace, inPlace[len(data):])
		if !bytes.Equal(inPlace, enc) {
			t.Fatalf("in-place encode differs")
		}

		// data as hex text: valid exactly when encoding/hex accepts it and it
		// has no uppercase digit.
		if len(data)%2 != 0 {
			data = data[1:]
		}
		dst := make([]byte, len(data)/2)
		ok := decodeLowerHex(dst, data)
		ref, err := hex.DecodeString(string(data))
		want := err == nil && !bytes.ContainsAny(data, "ABCDEF")
		if ok != want {
			t.Fatalf("decode %q: ok=%v, want %v", data, ok, want)
		}
		if ok && !bytes.Equal(dst, ref) {
			t.Fatalf("decode %q: got %x, want %x", data, dst, ref)
		}
	})
}
