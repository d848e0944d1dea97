package frame

import (
	"encoding/base64"
)

// encodeBase64 is base64.StdEncoding.Encode: dst must hold
// EncodedLen(len(src)) bytes.
func encodeBase64(dst, src []byte) {
	base64.StdEncoding.Encode(dst, src)
}

// decodeBase64 is base64.StdEncoding.Decode except that it refuses CR
// and LF, which encoding/base64 skips but JSON forbids raw inside a
// string (so a caller need not scan for them first): it decodes src into
// dst, which must hold DecodedLen(len(src)) bytes, and reports false
// where Decode fails or src holds CR or LF.
//
// The refusal costs no extra pass over src: a successful Decode of text
// without CR and LF writes exactly 3 bytes per 4 characters less one per
// closing '=', and any skipped CR or LF makes it write fewer (see
// decodedAll).
func decodeBase64(dst, src []byte) (int, bool) {
	n, err := base64.StdEncoding.Decode(dst, src)
	return n, err == nil && decodedAll(n, src)
}

// decodedAll reports whether a successful padded Decode of src that
// wrote n bytes read every byte of src as base64, i.e. skipped no CR or
// LF. Without any, len(src) is a multiple of 4 and n is 3 per 4 less the
// closing '=' (at most 2, all at the end). With k > 0 skipped, the text
// decoded is len(src)-k long, also a multiple of 4, so either len(src) is
// not one or k >= 4 and n is at least 3 bytes short, more than the at
// most 2 trailing '=' the count below can excuse.
func decodedAll(n int, src []byte) bool {
	if len(src)%4 != 0 {
		return false
	}
	pad := 0
	for pad < 2 && pad < len(src) && src[len(src)-1-pad] == '=' {
		pad++
	}
	return n == len(src)/4*3-pad
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
