package sessiondir

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// seqDigits is the zero-padded width of queue and event file names (§6.2).
const seqDigits = 12

// SeqName returns the queue/event file name of seq: the decimal number
// left-padded with zeros to seqDigits, plus ".json", exactly like
// String(seq).padStart(12, "0") + ".json".
func SeqName(seq int64) string {
	s := strconv.FormatInt(seq, 10)
	if len(s) < seqDigits {
		pad := "000000000000"[:seqDigits-len(s)]
		s = pad + s
	}
	return s + JSONSuffix
}

// ParseSeq returns parseInt(name, 10) with JavaScript semantics: leading
// white space skipped, an optional sign, then the longest run of decimal
// digits. ok is false when there are no digits (NaN). Values beyond int64
// saturate.
func ParseSeq(name string) (seq int64, ok bool) {
	i := 0
	for i < len(name) {
		r, size := utf8.DecodeRuneInString(name[i:])
		if !isJSSpace(r) {
			break
		}
		i += size
	}
	neg := false
	if i < len(name) && (name[i] == '+' || name[i] == '-') {
		neg = name[i] == '-'
		i++
	}
	start := i
	var v uint64
	const limit = uint64(1) << 63
	for i < len(name) && name[i] >= '0' && name[i] <= '9' {
		if v < limit {
			v = v*10 + uint64(name[i]-'0')
			if v > limit {
				v = limit
			}
		}
		i++
	}
	if i == start {
		return 0, false
	}
	if neg {
		if v >= limit {
			return -1 << 63, true
		}
		return -int64(v), true
	}
	if v >= limit {
		return 1<<63 - 1, true
	}
	return int64(v), true
}

// isJSSpace reports whether r is StrWhiteSpaceChar of ECMAScript (white
// space or a line terminator), which parseInt skips.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xa0, 0x2028, 0x2029, 0xfeff:
		return true
	}
	return unicode.Is(unicode.Zs, r)
}

// base64 alphabet values; both the standard and the URL alphabet decode,
