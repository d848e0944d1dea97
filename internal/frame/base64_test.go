package frame

import (
	"bytes"
	"encoding/base64"
	"errors"
	"testing"
)

func FuzzBase64(f *testing.F) {
	for _, s := range []string{"", "a", "hello, world", "0123456789abcdef0123", "aGVsbG8=", "aGVs\nbG8gd29ybGQ=", "aGVsbG8gd29ybG=Q", "YWJjZGVmZ2hpamtsbW5vcA=="} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Encoding: byte-identical to encoding/base64.
		enc := make([]byte, base64.StdEncoding.EncodedLen(len(b)))
		encodeBase64(enc, b)
		if want := base64.StdEncoding.EncodeToString(b); string(enc) != want {
			t.Fatalf("encode %q = %q, want %q", b, enc, want)
		}
		// Decoding: same success and bytes, for valid and invalid text,
		// except that CR and LF are refused, not skipped.
		for _, src := range [][]byte{b, enc} {
			want := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
			wn, werr := base64.StdEncoding.Decode(want, src)
			if bytes.ContainsAny(src, "\r\n") {
				werr = errors.New("CR or LF")
			}
			got := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
			n, ok := decodeBase64(got, src)
			if ok != (werr == nil) || ok && !bytes.Equal(got[:n], want[:wn]) {
				t.Fatalf("decode %q = %q, %v; want %q, %v", src, got[:n], ok, want[:wn], werr)
			}
		}
	})
}

func BenchmarkEncodeBase64_64K(b *testing.B) {
	src := bytes.Repeat([]byte("0123456789abcdef"), 4<<10)
	dst := make([]byte, base64.StdEncoding.EncodedLen(len(src)))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		encodeBase64(dst, src)
	}
}

func BenchmarkDecodeBase64_64K(b *testing.B) {
	src := []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("0123456789abcdef"), 4<<10)))
	dst := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
	b.SetBytes(int64(len(dst)))
	for b.Loop() {
		if _, ok := decodeBase64(dst, src); !ok {
			b.Fatal("decode failed")
		}
	}
}

func BenchmarkStdlibBase64_64K(b *testing.B) {
	src := bytes.Repeat([]byte("0123456789abcdef"), 4<<10)
	enc := []byte(base64.StdEncoding.EncodeToString(src))
	dst := make([]byte, len(enc))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		base64.StdEncoding.Encode(dst, src)
		_, _ = base64.StdEncoding.Decode(dst, enc)
	}
}

// TestEncodeBase64Lengths covers every length up to 200 bytes, into a
// dirty destination, as the frame encoder's reused buffer is.
func TestEncodeBase64Lengths(t *testing.T) {
	src := make([]byte, 200)
	for i := range src {
		src[i] = byte(i*151 + 7)
	}
	for n := range len(src) + 1 {
		want := base64.StdEncoding.EncodeToString(src[:n])
		dst := bytes.Repeat([]byte{'!'}, len(want))
		encodeBase64(dst, src[:n])
		if string(dst) != want {
			t.Fatalf("encode %d bytes = %q, want %q", n, dst, want)
		}
	}
}

// TestDecodeBase64EveryByte puts each of the 256 byte values at each
// position of valid text (and, for the tails, at each length up to
// there); the answers must be encoding/base64's, with CR and LF refused.
func TestDecodeBase64EveryByte(t *testing.T) {
	raw := make([]byte, 75)
	for i := range raw {
		raw[i] = byte(i*37 + 11)
	}
	valid := []byte(base64.StdEncoding.EncodeToString(raw)) // 100 characters
	check := func(src []byte) {
		t.Helper()
		want := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
		wn, werr := base64.StdEncoding.Decode(want, src)
		if bytes.ContainsAny(src, "\r\n") {
			werr = errors.New("CR or LF")
		}
		got := bytes.Repeat([]byte{'!'}, base64.StdEncoding.DecodedLen(len(src)))
		n, ok := decodeBase64(got, src)
		if ok != (werr == nil) || ok && !bytes.Equal(got[:n], want[:wn]) {
			t.Fatalf("decode %q = %q, %v; want %q, %v", src, got[:n], ok, want[:wn], werr)
		}
	}
	src := make([]byte, len(valid))
	for pos := range valid {
		for c := range 256 {
			copy(src, valid)
			src[pos] = byte(c)
			check(src)
		}
	}
	for n := range len(valid) + 1 {
		check(valid[:n])
	}
}

// TestEncodeBase64Blocks: every alphabet character in every position of
// a 100-byte input, against encoding/base64.
func TestEncodeBase64Blocks(t *testing.T) {
	for shift := range 256 {
		src := make([]byte, 24*4+4)
		for i := range src {
			src[i] = byte(i*shift + shift>>1)
		}
		want := base64.StdEncoding.EncodeToString(src)
		dst := bytes.Repeat([]byte{'!'}, len(want))
		encodeBase64(dst, src)
		if string(dst) != want {
			t.Fatalf("encode %x = %q, want %q", src, dst, want)
		}
	}
}
