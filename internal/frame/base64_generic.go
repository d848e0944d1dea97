//go:build !amd64 || purego

package frame

// Without the amd64 vector code (or under the purego tag) the table code
// does all the work.
const base64SIMDSupported = false

func encodeBase64SIMD(dst, src *byte, blocks int) { panic("frame: no vector base64 codec") }

func decodeBase64SIMD(dst, src *byte, blocks int) int { panic("frame: no vector base64 codec") }
