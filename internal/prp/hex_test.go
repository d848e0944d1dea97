package prp

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// hexCodecs runs f once with the codec as built for this CPU and once with
// the vector code off, so the table fallback is covered on every machine.
func hexCodecs(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, simd := range []bool{true, false} {
		if simd && !hexSIMDSupported {
			continue
		}
		t.Run(fmt.Sprintf("simd=%v", simd), func(t *testing.T) {
			setHexSIMD(t, simd)
			f(t)
		})
	}
}

// setHexSIMD sets hexSIMD for one test; such tests must not run in parallel.
func setHexSIMD(tb testing.TB, on bool) {
	old := hexSIMD
	hexSIMD = on
	tb.Cleanup(func() { hexSIMD = old })
}

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
	hexCodecs(t, func(t *testing.T) {
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
	})
}

// TestHexCodecEveryByte encodes and decodes every byte value at every
// position of a vector block and of a tail.
func TestHexCodecEveryByte(t *testing.T) {
	hexCodecs(t, func(t *testing.T) {
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
	})
}

// TestHexDecodeRejectsEveryInvalidCharacter puts every character that is not
// a lowercase hex digit (uppercase included: the wire format is lowercase)
// at every position, across vector blocks and tails.
func TestHexDecodeRejectsEveryInvalidCharacter(t *testing.T) {
	hexCodecs(t, func(t *testing.T) {
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
	})
}

// decodeHexPaths decodes text with the vector code and with the table code
// (decodeLowerHexTable, the reference) and fails unless both give the same
// answer and, when they accept, the same bytes.
func decodeHexPaths(t *testing.T, text []byte, what string, args ...any) {
	t.Helper()
	n := len(text) / 2
	want := make([]byte, n)
	wantOK := decodeLowerHexTable(want, text)
	setHexSIMD(t, true)
	got := make([]byte, n)
	if gotOK := decodeLowerHex(got, text); gotOK != wantOK {
		t.Fatalf("%s: vector ok=%v, table ok=%v", fmt.Sprintf(what, args...), gotOK, wantOK)
	} else if gotOK && !bytes.Equal(got, want) {
		t.Fatalf("%s: vector %x, table %x", fmt.Sprintf(what, args...), got, want)
	}
}

// TestHexDecodeVectorMatchesTableEveryByte puts every byte value at every
// position of valid text spanning one to five 32-byte vector blocks (the
// vector loop takes 64 bytes, 128 characters, at a time, so this covers a
// whole iteration, the 32-byte remainder after one, and a table tail), and
// requires the vector code to agree with the table code on each.
func TestHexDecodeVectorMatchesTableEveryByte(t *testing.T) {
	if !hexSIMDSupported {
		t.Skip("no vector hex codec on this CPU or build")
	}
	for _, n := range []int{32, 64, 96, 128, 160, 165} {
		good := []byte(hex.EncodeToString(hexTestBytes(n)))
		text := bytes.Clone(good)
		for pos := range text {
			for c := range 256 {
				text[pos] = byte(c)
				decodeHexPaths(t, text, "n=%d pos=%d char=%#x", n, pos, c)
			}
			text[pos] = good[pos]
		}
	}
}

// TestHexDecodeVectorMatchesTableRandom compares the vector and table code
// on random text: mostly lowercase digits with a few stray characters
// (uppercase digits, neighbours of the digit ranges, any byte), at random
// lengths and offsets.
func TestHexDecodeVectorMatchesTableRandom(t *testing.T) {
	if !hexSIMDSupported {
		t.Skip("no vector hex codec on this CPU or build")
	}
	rng := rand.New(rand.NewPCG(14, 5))
	const digits = "0123456789abcdef"
	const strays = "ABCDEF/:`g@GxX \"\x00\x7f\x80\xb0\xe1\xff"
	buf := make([]byte, 2*400+8)
	for i := range 20000 {
		n := rng.IntN(400)
		off := rng.IntN(8)
		text := buf[off : off+2*n]
		for j := range text {
			text[j] = digits[rng.IntN(len(digits))]
		}
		for range rng.IntN(3) {
			if len(text) == 0 {
				break
			}
			j := rng.IntN(len(text))
			if rng.IntN(2) == 0 {
				text[j] = strays[rng.IntN(len(strays))]
			} else {
				text[j] = byte(rng.IntN(256))
			}
		}
		decodeHexPaths(t, text, "case %d: n=%d off=%d", i, n, off)
	}
}

func FuzzHexCodec(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add(hexTestBytes(100), true)
	f.Add([]byte(hex.EncodeToString(hexTestBytes(40))), true)
	f.Add([]byte("0123456789abcdefABCDEF0123456789abcdef0123456789abcdef0123456789"), true)
	f.Fuzz(func(t *testing.T, data []byte, simd bool) {
		hexSIMD = simd && hexSIMDSupported
		defer func() { hexSIMD = hexSIMDSupported }()

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
		// And the vector code answers exactly as the table code.
		table := make([]byte, len(data)/2)
		if tableOK := decodeLowerHexTable(table, data); tableOK != ok || (ok && !bytes.Equal(table, dst)) {
			t.Fatalf("decode %q: simd=%v gives ok=%v, the table code ok=%v", data, hexSIMD, ok, tableOK)
		}
	})
}
