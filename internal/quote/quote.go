// Package quote puts untrusted text into error messages and log lines with
// a bound: a peer's name, a flag value or a file name may be any size and
// any bytes, and an error that quotes it whole can be larger than the
// payload that carries it (%q turns each invalid byte into four).
package quote

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxBytes is how many bytes of the input Text quotes. It holds a whole
// catalog operation id (160 bytes) and a typical path, and keeps the quoted
// form under 1 KiB whatever the bytes are (strconv.Quote writes at most four
// characters per input byte: \xff, or \U0010ffff for four bytes).
const MaxBytes = 200

// Text is s as %q would print it when s is at most MaxBytes long. A longer
// s is cut to its first MaxBytes bytes (never inside a UTF-8 sequence),
// quoted, and followed by "… (N bytes)" so the reader knows it was cut and
// by how much.
func Text[S ~string](s S) string {
	if len(s) <= MaxBytes {
		return strconv.Quote(string(s))
	}
	cut := MaxBytes
	// Back up to the start of a rune, so a valid multi-byte character is
	// never split into invalid bytes; invalid input stays byte for byte.
	for i := 0; i < utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	if !utf8.RuneStart(s[cut]) {
		cut = MaxBytes
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(string(s[:cut])), len(s))
}
