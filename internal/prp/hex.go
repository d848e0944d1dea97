package prp

import (
	"encoding/binary"
	"sync"
)

// The secure-frame ciphertext travels as lowercase hex (spec §2.2), so every
// sealed or opened byte goes through this codec. At 64 KiB frames the table
// code below costs more than AES-GCM itself (BenchmarkHexCodec), so on amd64
// with AVX2 whole 32-byte blocks go through vector code (hex_amd64.s, about
// ten times faster); the tails, and CPUs without AVX2, use the tables.
//
// Both table directions are lookups: per byte they cost a few loads and
// stores, which amd64 runs in parallel, while SWAR forms (64-bit
// constants, multiplies, lane shuffles) are ALU-bound and measured about
// twice as slow.

// hexDigitPairs[b] is the two lowercase hex digits of b, the first in the
// low byte, so that a little-endian store writes them in order.
var hexDigitPairs = func() (t [256]uint16) {
	const digits = "0123456789abcdef"
	for i := range t {
		t[i] = uint16(digits[i>>4]) | uint16(digits[i&0xf])<<8
	}
	return t
}()

// hexSIMD says whether encodeLowerHex and decodeLowerHex run the vector
// code (hex_amd64.s) on whole 32-byte blocks. It starts as the CPU's
// support (hexSIMDSupported); tests clear it to cover the table code, which
// also handles every tail shorter than a block.
var hexSIMD = hexSIMDSupported

// encodeLowerHex writes the lowercase hex of src to dst[:2*len(src)].
//
// src may be exactly the back half of that range (src is
// dst[len(src):2*len(src)]): the encoding then expands in place. Every
// store holds the digits of bytes already loaded, so once the first j bytes
// are read it ends at or before 2j, and 2j ≤ len(src)+j, where the first
// unread byte sits. Seal relies on this to seal straight into the frame.
// Any other overlap is not allowed. The vector code keeps the same rule: a
// block's 64 output bytes end at or before its first unread byte.
func encodeLowerHex(dst, src []byte) {
	dst = dst[:2*len(src)]
	if m := len(src) &^ 31; hexSIMD && m > 0 {
		encodeHexSIMD(&dst[0], &src[0], m)
		dst, src = dst[2*m:], src[m:]
	}
	encodeLowerHexTable(dst, src)
}

// encodeLowerHexTable is encodeLowerHex without the vector code, under the
// same contract (including the in-place expansion).
func encodeLowerHexTable(dst, src []byte) {
	dst = dst[:2*len(src)]
	t := &hexDigitPairs
	n := len(src) &^ 15
	for i := 0; i < n; i += 16 {
		s := (*[16]byte)(src[i:])
		d := (*[32]byte)(dst[2*i:])
		binary.LittleEndian.PutUint64(d[0:], uint64(t[s[0]])|uint64(t[s[1]])<<16|uint64(t[s[2]])<<32|uint64(t[s[3]])<<48)
		binary.LittleEndian.PutUint64(d[8:], uint64(t[s[4]])|uint64(t[s[5]])<<16|uint64(t[s[6]])<<32|uint64(t[s[7]])<<48)
		binary.LittleEndian.PutUint64(d[16:], uint64(t[s[8]])|uint64(t[s[9]])<<16|uint64(t[s[10]])<<32|uint64(t[s[11]])<<48)
		binary.LittleEndian.PutUint64(d[24:], uint64(t[s[12]])|uint64(t[s[13]])<<16|uint64(t[s[14]])<<32|uint64(t[s[15]])<<48)
	}
	for i := n; i < len(src); i++ {
		binary.LittleEndian.PutUint16(dst[2*i:], t[src[i]])
	}
}

// hexPairInvalid marks a hexPairValues entry whose two characters are not
// both lowercase hex digits; it lies outside the low byte that holds a value.
const hexPairInvalid = 0x100

// hexPairValues maps two characters, read as a little-endian uint16, to the
// byte they spell in lowercase hex, or to hexPairInvalid. One lookup decodes
// and validates a byte. The table is 128 KiB, built on first use; only the
// lines holding the 256 valid pairs (about 3 KiB) stay hot.
var hexPairValues = sync.OnceValue(func() *[1 << 16]uint16 {
	t := new([1 << 16]uint16)
	for i := range t {
		t[i] = hexPairInvalid
	}
	for hi := range 16 {
		for lo := range 16 {
			pair := hexDigitPairs[hi<<4|lo]
			t[pair] = uint16(hi<<4 | lo)
		}
	}
	return t
})

// decodeLowerHex decodes src, which must be 2*len(dst) lowercase hex digits,
// into dst and reports whether it was. On false dst holds garbage.
// Uppercase digits are rejected: the wire format is lowercase (spec §2.2).
func decodeLowerHex(dst, src []byte) bool {
	if len(src) != 2*len(dst) {
		return false
	}
	ok := true
	if m := len(dst) &^ 31; hexSIMD && m > 0 {
		ok = decodeHexSIMD(&dst[0], &src[0], m)
		dst, src = dst[m:], src[2*m:]
	}
	return decodeLowerHexTable(dst, src) && ok
}

// decodeLowerHexTable is decodeLowerHex without the vector code.
func decodeLowerHexTable(dst, src []byte) bool {
	if len(src) != 2*len(dst) {
		return false
	}
	t := hexPairValues()
	var bad uint16
	n := len(dst) &^ 7
	for i := 0; i < n; i += 8 {
		s := (*[16]byte)(src[2*i:])
		d := (*[8]byte)(dst[i:])
		// Two groups of four keep the values in registers.
		v0 := t[binary.LittleEndian.Uint16(s[0:])]
		v1 := t[binary.LittleEndian.Uint16(s[2:])]
		v2 := t[binary.LittleEndian.Uint16(s[4:])]
		v3 := t[binary.LittleEndian.Uint16(s[6:])]
		d[0], d[1], d[2], d[3] = byte(v0), byte(v1), byte(v2), byte(v3)
		bad |= v0 | v1 | v2 | v3
		v0 = t[binary.LittleEndian.Uint16(s[8:])]
		v1 = t[binary.LittleEndian.Uint16(s[10:])]
		v2 = t[binary.LittleEndian.Uint16(s[12:])]
		v3 = t[binary.LittleEndian.Uint16(s[14:])]
		d[4], d[5], d[6], d[7] = byte(v0), byte(v1), byte(v2), byte(v3)
		bad |= v0 | v1 | v2 | v3
	}
	for i := n; i < len(dst); i++ {
		v := t[binary.LittleEndian.Uint16(src[2*i:])]
		dst[i] = byte(v)
		bad |= v
	}
	return bad&hexPairInvalid == 0
}
