//go:build !purego

package frame

import "golang.org/x/sys/cpu"

// base64SIMDSupported: the vector codec needs AVX2 (256-bit VPSHUFB,
// VPMADDUBSW, VPERMD).
var base64SIMDSupported = cpu.X86.HasAVX2

// encodeBase64SIMD encodes blocks × 24 bytes of src into blocks × 32
// characters of dst. blocks must be positive, and src must hold 4 bytes
// more than it encodes (each block loads 28).
//
//go:noescape
func encodeBase64SIMD(dst, src *byte, blocks int)

// decodeBase64SIMD decodes up to blocks × 32 characters of src into dst,
// 24 bytes per block, and returns how many blocks it decoded: it stops
// before the first block holding a character outside the standard
// alphabet (padding, CR and LF included). blocks must be positive, and
// dst must hold 8 bytes more than it decodes (each block stores 32).
//
//go:noescape
func decodeBase64SIMD(dst, src *byte, blocks int) int
