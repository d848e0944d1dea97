//go:build !amd64 || purego

package prp

// Without the amd64 vector code (or under the purego tag) the table code
// does all the work.
const hexSIMDSupported = false

func encodeHexSIMD(dst, src *byte, n int) { panic("prp: no vector hex codec") }

func decodeHexSIMD(dst, src *byte, n int) bool { panic("prp: no vector hex codec") }
