//go:build !purego

package prp

import "golang.org/x/sys/cpu"

// hexSIMDSupported: the vector codec needs AVX2 (256-bit VPSHUFB, VPMADDUBSW).
var hexSIMDSupported = cpu.X86.HasAVX2

// encodeHexSIMD writes the lowercase hex of src[:n] to dst[:2n]. n must be a
// positive multiple of 32. src may be the back half of dst[:2n] (see
// encodeLowerHex); any other overlap is not allowed.
//
//go:noescape
func encodeHexSIMD(dst, src *byte, n int)

// decodeHexSIMD decodes src[:2n] into dst[:n] and reports whether every
// character was a lowercase hex digit. n must be a positive multiple of 32.
// On false dst holds garbage.
//
//go:noescape
func decodeHexSIMD(dst, src *byte, n int) bool
