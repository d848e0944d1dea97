package prp

import (
	"bytes"
	"encoding/hex"
)

// The secure-frame ciphertext travels as lowercase hex (spec §2.2), so every
// sealed or opened byte goes through this codec: encoding/hex, plus the
// lowercase rule encoding/hex does not keep.

// encodeLowerHex writes the lowercase hex of src to dst[:2*len(src)].
//
// src may be exactly the back half of that range (src is
// dst[len(src):2*len(src)]): the encoding then expands in place, because
// hex.Encode stores the two digits of byte i at 2i and 2i+1 only after
// loading byte i, and 2i+1 ≤ len(src)+i, where that byte sits (the tests
// check this). Seal relies on it to seal straight into the frame. Any other
// overlap is not allowed.
func encodeLowerHex(dst, src []byte) {
	hex.Encode(dst[:2*len(src)], src)
}

// decodeLowerHex decodes src, which must be 2*len(dst) lowercase hex digits,
// into dst and reports whether it was. On false dst holds garbage.
// Uppercase digits are rejected: the wire format is lowercase (spec §2.2),
// while encoding/hex accepts both cases.
func decodeLowerHex(dst, src []byte) bool {
	if len(src) != 2*len(dst) || bytes.ContainsAny(src, "ABCDEF") {
		return false
	}
	n, err := hex.Decode(dst, src)
	return err == nil && n == len(dst)
}
