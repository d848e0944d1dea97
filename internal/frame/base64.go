package frame

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
)

// Standard base64 with wider steps than encoding/base64, whose one-byte
// table lookups take about 40% of pcwrap's CPU time per 64 KiB round trip
// (a stdin file decoded, a data frame encoded). The output is exactly
// encoding/base64.StdEncoding's (FuzzBase64 checks); partial blocks and
// anything unusual are left to encoding/base64.

const stdAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// enc12 maps 12 bits to their two base64 characters, the first in the low
// byte (8 KiB: fits the L1 cache).
var enc12 = func() (t [4096]uint16) {
	for i := range t {
		t[i] = uint16(stdAlphabet[i>>6]) | uint16(stdAlphabet[i&63])<<8
	}
	return t
}()

// dec0..dec3 map the character at each position of a 4-character quantum
// to its 6 bits already shifted into place in a 24-bit value; a character
// outside the standard alphabet (padding included) maps to badQuantum.
var dec0, dec1, dec2, dec3 = func() (d0, d1, d2, d3 [256]uint32) {
	for i := range 256 {
		d0[i], d1[i], d2[i], d3[i] = badQuantum, badQuantum, badQuantum, badQuantum
	}
	for v := range len(stdAlphabet) {
		c := stdAlphabet[v]
		d0[c], d1[c], d2[c], d3[c] = uint32(v)<<18, uint32(v)<<12, uint32(v)<<6, uint32(v)
	}
	return
}()

const badQuantum = 1 << 24

// encodeBase64 is base64.StdEncoding.Encode: dst must hold
// EncodedLen(len(src)) bytes.
func encodeBase64(dst, src []byte) {
	di, si := 0, 0
	// AVX2 first: 24 bytes per block, each loading 28, so 4 must remain
	// past the last block.
	if base64SIMDSupported && len(src) >= 28 {
		if blocks := min((len(src)-4)/24, len(dst)/32); blocks > 0 {
			encodeBase64SIMD(&dst[0], &src[0], blocks)
			si, di = blocks*24, blocks*32
		}
	}
	// 24 bytes to 32 characters per step, as four 6-byte groups: one
	// bounds check per step instead of one per group, and the loop's own
	// cost spread over four times the bytes (the encoder is pcwrap's
	// largest user-space cost per round-trip frame after the decoder).
	// The last group reads 8 bytes from si+18, so 26 must remain.
	for len(src)-si >= 26 && len(dst)-di >= 32 {
		s, d := src[si:si+26], dst[di:di+32]
		putQuantum8(d[0:8], binary.BigEndian.Uint64(s[0:8]))
		putQuantum8(d[8:16], binary.BigEndian.Uint64(s[6:14]))
		putQuantum8(d[16:24], binary.BigEndian.Uint64(s[12:20]))
		putQuantum8(d[24:32], binary.BigEndian.Uint64(s[18:26]))
		si += 24
		di += 32
	}
	// 6 bytes to 8 characters per step; each step reads 8 bytes and
	// writes 8, so stop while that stays in bounds.
	for len(src)-si >= 8 && len(dst)-di >= 8 {
		putQuantum8(dst[di:di+8], binary.BigEndian.Uint64(src[si:si+8]))
		si += 6
		di += 8
	}
	// si is a multiple of 3, so the rest encodes on its own.
	base64.StdEncoding.Encode(dst[di:], src[si:])
}

// putQuantum8 writes the 8 characters of the top 48 bits of v to d.
func putQuantum8(d []byte, v uint64) {
	binary.LittleEndian.PutUint64(d, uint64(enc12[v>>52])|
		uint64(enc12[v>>40&0xfff])<<16|
		uint64(enc12[v>>28&0xfff])<<32|
		uint64(enc12[v>>16&0xfff])<<48)
}

// decodeBase64 is base64.StdEncoding.Decode except that it refuses CR
// and LF, which encoding/base64 skips but JSON forbids raw inside a
// string (so a caller need not scan for them first): it decodes src into
// dst, which must hold DecodedLen(len(src)) bytes, and reports false
// where Decode fails or src holds CR or LF.
func decodeBase64(dst, src []byte) (int, bool) {
	di, si := 0, 0
	// AVX2 first: 32 characters to 24 bytes per block, each storing 32,
	// so 8 bytes of room must remain past the last block. It stops before
	// a block with anything outside the alphabet (padding, CR, LF, a bad
	// character), which the steps below then decode or refuse exactly as
	// they would have.
	if base64SIMDSupported && len(src) >= 32 && len(dst) >= 32 {
		if blocks := min(len(src)/32, (len(dst)-8)/24); blocks > 0 {
			n := decodeBase64SIMD(&dst[0], &src[0], blocks)
			si, di = n*32, n*24
		}
	}
	// 8 characters to 6 bytes per step, never the last 8 characters
	// (padding); each step writes 8 bytes, so dst must have room.
	for len(src)-si > 8 && len(dst)-di >= 8 {
		s := src[si : si+8]
		x := dec0[s[0]] | dec1[s[1]] | dec2[s[2]] | dec3[s[3]]
		y := dec0[s[4]] | dec1[s[5]] | dec2[s[6]] | dec3[s[7]]
		if (x|y)&badQuantum != 0 {
			return 0, false // outside the alphabet, CR and LF included
		}
		binary.BigEndian.PutUint64(dst[di:], uint64(x)<<40|uint64(y)<<16)
		si += 8
		di += 6
	}
	// si is a multiple of 4, so the rest decodes on its own.
	rest := src[si:]
	if bytes.IndexByte(rest, '\n') >= 0 || bytes.IndexByte(rest, '\r') >= 0 {
		return 0, false
	}
	n, err := base64.StdEncoding.Decode(dst[di:], rest)
	return di + n, err == nil
}

// base64 alphabet values; both the standard and the URL alphabet decode,
// as in Node's Buffer.from(s, "base64").
var b64val = func() [256]byte {
	var t [256]byte
	for i := range t {
		t[i] = 0xff
	}
	const std = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := 0; i < len(std); i++ {
		t[std[i]] = byte(i)
	}
	t['-'], t['_'] = 62, 63
	return t
}()

// DecodeBase64 decodes s as leniently as Node's Buffer.from(s, "base64"):
// characters outside the alphabets (white space included) are skipped,
// padding is optional, and the first '=' ends the data. It never fails.
func DecodeBase64(s string) []byte {
	if out, err := base64.StdEncoding.DecodeString(s); err == nil {
		return out
	}
	out := make([]byte, 0, len(s)*3/4+2)
	var acc uint32
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '=' {
			break
		}
		v := b64val[c]
		if v == 0xff {
			continue
		}
		acc = acc<<6 | uint32(v)
		n++
		if n == 4 {
			out = append(out, byte(acc>>16), byte(acc>>8), byte(acc))
			acc, n = 0, 0
		}
	}
	switch n {
	case 2:
		out = append(out, byte(acc>>4))
	case 3:
		out = append(out, byte(acc>>10), byte(acc>>2))
	}
	return out
}
