package jsonenc

// Unescape decodes the JSON string escape at the start of s (s[0] is the
// backslash) into the UTF-16 code unit it stands for: the escaped
// character, or a \u escape's four hex digits (either case). It is the one
// escape decoder of the stdin-message decoder (which turns code units into
// UTF-8 as encoding/json does) and of prp.Canonical (which keeps them as
// JavaScript does).
//
// On success n is the escape's length in bytes. Otherwise ok is false and
// n is the offset of the first byte that makes the escape invalid, len(s)
// when s ends inside it, so a caller can report where the text went wrong.
func Unescape(s []byte) (unit uint16, n int, ok bool) {
	if len(s) < 2 {
		return 0, len(s), false
	}
	switch c := s[1]; c {
	case '"', '\\', '/':
		return uint16(c), 2, true
	case 'b':
		return '\b', 2, true
	case 'f':
		return '\f', 2, true
	case 'n':
		return '\n', 2, true
	case 'r':
		return '\r', 2, true
	case 't':
		return '\t', 2, true
	case 'u':
		for k := 2; k < 6; k++ {
			if k == len(s) {
				return 0, k, false
			}
			v := hexValue(s[k])
			if v < 0 {
				return 0, k, false
			}
			unit = unit<<4 | uint16(v)
		}
		return unit, 6, true
	}
	return 0, 1, false
}

// hexValue is the value of one hex digit of either case, or -1.
func hexValue(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}
