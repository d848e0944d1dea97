package frame

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// The stdin-message decoder. A stdin file is parsed as JSON.parse would
// (spec §6.3), and its answers are encoding/json's, byte for byte: the
// same Message for every valid document (object semantics, case-sensitive
// keys, the last duplicate key winning) and a refusal, at the same offset,
// of every invalid one. It does this in one pass over the content without
// encoding/json, which decodes a 64 KiB file three times and, measured,
// takes about 78% of pcwrap's CPU time for any writer whose output is not
// the exact compact form. FuzzParseMessageOracle compares the two.

// maxJSONDepth is encoding/json's nesting limit (maxNestingDepth in its
// scanner): it refuses the byte that opens the 10001st nested array or
// object, so this decoder must too.
const maxJSONDepth = 10000

// msgDecoder holds one parse. Its methods take the index to start at and
// return the index after what they consumed; on a syntax error they
// record where in bad and report false.
type msgDecoder struct {
	b    []byte
	out  []byte // payload storage: the caller's buffer or a larger one
	data []byte // the decoded payload of the last string "data" member
	bad  int    // index of the offending byte, len(b) for an early end
}

// decodeMessage parses non-empty content; see ParseMessageInto.
func decodeMessage(content, dst []byte) (Message, error) {
	d := msgDecoder{b: content, out: dst}
	m, ok := d.message()
	if !ok {
		// encoding/json's SyntaxError.Offset: bytes read including the
		// offending one, or all of them for an early end.
		off := min(d.bad+1, len(content))
		return Message{}, fmt.Errorf("invalid JSON at offset %d", off)
	}
	return m, nil
}

func (d *msgDecoder) fail(i int) (int, bool) {
	d.bad = i
	return i, false
}

// ws skips JSON white space.
func (d *msgDecoder) ws(i int) int {
	for i < len(d.b) {
		switch d.b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// end accepts only white space after the top-level value.
func (d *msgDecoder) end(i int) bool {
	if i = d.ws(i); i != len(d.b) {
		d.bad = i
		return false
	}
	return true
}

func (d *msgDecoder) message() (Message, bool) {
	b := d.b
	i := d.ws(0)
	if i == len(b) || b[i] != '{' {
		// Any other value parses and is ignored (§6.1).
		i, ok := d.skipValue(i, 0)
		return Message{}, ok && d.end(i)
	}
	var (
		typ              string
		hasData, strData bool
		ok               bool
	)
	i = d.ws(i + 1)
	if i < len(b) && b[i] == '}' {
		return Message{}, d.end(i + 1)
	}
	for {
		if i == len(b) || b[i] != '"' {
			d.fail(i)
			return Message{}, false
		}
		start := i
		var esc bool
		if i, esc, ok = d.skipString(i); !ok {
			return Message{}, false
		}
		key := b[start+1 : i-1]
		if esc {
			key = appendUnquoted(nil, key) // rare: an escaped key
		}
		if i = d.ws(i); i == len(b) || b[i] != ':' {
			d.fail(i)
			return Message{}, false
		}
		i = d.ws(i + 1)
		switch string(key) {
		case "type":
			typ = ""
			if i < len(b) && b[i] == '"' {
				start := i
				if i, esc, ok = d.skipString(i); ok {
					typ = typeString(b[start+1:i-1], esc)
				}
			} else {
				i, ok = d.skipValue(i, 1)
			}
		case "data":
			hasData, strData = true, i < len(b) && b[i] == '"'
			if strData {
				i, ok = d.dataString(i)
			} else {
				i, ok = d.skipValue(i, 1)
			}
		default:
			i, ok = d.skipValue(i, 1)
		}
		if !ok {
			return Message{}, false
		}
		if i = d.ws(i); i < len(b) && b[i] == ',' {
			i = d.ws(i + 1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			i++
			break
		}
		d.fail(i)
		return Message{}, false
	}
	if !d.end(i) {
		return Message{}, false
	}
	m := Message{Type: typ}
	if typ == MsgStdin {
		if hasData && strData {
			m.Data = d.data
		} else {
			m.BadData = true
		}
	}
	return m, true
}

// typeString returns the decoded value of a type string (raw is what is
// between the quotes), without allocating for the message types.
func typeString(raw []byte, esc bool) string {
	if esc {
		raw = appendUnquoted(nil, raw)
	}
	switch string(raw) {
	case MsgStdin:
		return MsgStdin
	case MsgStdinEnd:
		return MsgStdinEnd
	case MsgShutdown:
		return MsgShutdown
	}
	if !esc && !utf8.Valid(raw) {
		raw = appendUnquoted(nil, raw) // replaces invalid UTF-8
	}
	return string(raw)
}

// skipString validates the string starting at b[i] == '"' and returns the
// index after its closing quote and whether it holds an escape.
func (d *msgDecoder) skipString(i int) (int, bool, bool) {
	b := d.b
	esc := false
	for j := i + 1; ; {
		if j == len(b) {
			_, ok := d.fail(j)
			return j, esc, ok
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1, esc, true
		case c == '\\':
			esc = true
			var ok bool
			if j, _, ok = d.escape(j); !ok {
				return j, esc, false
			}
		case c < 0x20:
			_, ok := d.fail(j)
			return j, esc, ok
		default:
			j++
		}
	}
}

// escape validates the escape at b[i] == '\\' and returns the index after
// it and, for the one-character escapes and \u below 0x80, the byte it
// stands for; any other \u gives 0x80 (not ASCII, so not base64).
func (d *msgDecoder) escape(i int) (int, byte, bool) {
	unit, n, ok := jsonenc.Unescape(d.b[i:])
	if !ok {
		j, ok := d.fail(i + n)
		return j, 0, ok
	}
	if unit >= utf8.RuneSelf {
		return i + n, utf8.RuneSelf, true
	}
	return i + n, byte(unit), true
}

// dataString decodes the data string starting at b[i] == '"' into d.out
// and sets d.data. The payload's bytes are DecodeBase64 of the unquoted
// string. The common case (standard base64 with no escapes, as every
// writer produces) finds the closing quote with IndexByte and decodes in
// wide steps straight into the buffer; anything else is unquoted and
// decoded leniently in one more pass.
func (d *msgDecoder) dataString(i int) (int, bool) {
	rest := d.b[i+1:]
	if end := bytes.IndexByte(rest, '"'); end >= 0 {
		raw := rest[:end]
		out := d.out[:cap(d.out)]
		if need := base64.StdEncoding.DecodedLen(len(raw)); len(out) < need {
			out = make([]byte, need)
		}
		d.out = out
		// Success means raw holds only the standard alphabet and closing
		// padding: no backslash, so the string does end here, it needs no
		// unquoting, and the lenient decoding gives the same bytes.
		if n, ok := decodeBase64(out, raw); ok {
			d.data = out[:n]
			return i + 1 + end + 1, true
		}
	}
	return d.dataLenient(i)
}

// dataLenient is dataString for any valid string: it validates and
// unquotes it and decodes the result as DecodeBase64 does (characters
// outside both alphabets skipped, the first '=' ends the data) in one
// pass. Every byte of a non-ASCII character (U+FFFD from invalid UTF-8
// included) is outside the alphabets, so only ASCII needs decoding.
func (d *msgDecoder) dataLenient(i int) (int, bool) {
	b := d.b
	out := d.out[:0]
	var acc uint32
	n := 0
	stopped := false
	for j := i + 1; ; {
		if j == len(b) {
			return d.fail(j)
		}
		c := b[j]
		switch {
		case c == '"':
			switch n {
			case 2:
				out = append(out, byte(acc>>4))
			case 3:
				out = append(out, byte(acc>>10), byte(acc>>2))
			}
			d.out, d.data = out, out
			return j + 1, true
		case c == '\\':
			var ok bool
			if j, c, ok = d.escape(j); !ok {
				return j, false
			}
		case c < 0x20:
			return d.fail(j)
		default:
			j++
		}
		if stopped {
			continue
		}
		if c == '=' {
			stopped = true
			continue
		}
		v := b64val[c]
		if v == 0xff {
			continue
		}
		acc = acc<<6 | uint32(v)
		if n++; n == 4 {
			out = append(out, byte(acc>>16), byte(acc>>8), byte(acc))
			acc, n = 0, 0
		}
	}
}

// skipValue validates the value starting at b[i] (after white space)
// inside depth open arrays and objects and returns the index after it.
func (d *msgDecoder) skipValue(i, depth int) (int, bool) {
	b := d.b
	// open holds the closing byte of each array or object opened here;
	// a fixed array keeps ordinary nesting off the heap.
	var stack [32]byte
	open := stack[:0]
	ok := true
	for {
		// At the start of a value.
		i = d.ws(i)
		if i == len(b) {
			return d.fail(i)
		}
		switch c := b[i]; c {
		case '{', '[':
			if depth+len(open)+1 > maxJSONDepth {
				return d.fail(i)
			}
			closer := c + 2 // '}' and ']'
			open = append(open, closer)
			if i = d.ws(i + 1); i < len(b) && b[i] == closer {
				open = open[:len(open)-1]
				i++
				break
			}
			if c == '{' {
				if i, ok = d.memberKey(i); !ok {
					return i, false
				}
			}
			continue
		case '"':
			if i, _, ok = d.skipString(i); !ok {
				return i, false
			}
		case 't':
			i, ok = d.literal(i, "true")
		case 'f':
			i, ok = d.literal(i, "false")
		case 'n':
			i, ok = d.literal(i, "null")
		default:
			if c != '-' && (c < '0' || c > '9') {
				return d.fail(i)
			}
			i, ok = d.number(i)
		}
		if !ok {
			return i, false
		}
		// After a value: close containers until one takes another value.
		for {
			if len(open) == 0 {
				return i, true
			}
			if i = d.ws(i); i == len(b) {
				return d.fail(i)
			}
			closer := open[len(open)-1]
			if b[i] == closer {
				open = open[:len(open)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return d.fail(i)
			}
			i++
			if closer == '}' {
				if i, ok = d.memberKey(d.ws(i)); !ok {
					return i, false
				}
			}
			break
		}
	}
}

// memberKey validates `"key" :` at b[i] and returns the index after the
// colon.
func (d *msgDecoder) memberKey(i int) (int, bool) {
	b := d.b
	if i == len(b) || b[i] != '"' {
		return d.fail(i)
	}
	i, _, ok := d.skipString(i)
	if !ok {
		return i, false
	}
	if i = d.ws(i); i == len(b) || b[i] != ':' {
		return d.fail(i)
	}
	return i + 1, true
}

func (d *msgDecoder) literal(i int, lit string) (int, bool) {
	for k := 0; k < len(lit); k++ {
		if i+k == len(d.b) || d.b[i+k] != lit[k] {
			return d.fail(i + k)
		}
	}
	return i + len(lit), true
}

// number validates a JSON number at b[i]; the byte after it is for the
// caller to judge, as in encoding/json's scanner ("01" ends after "0").
func (d *msgDecoder) number(i int) (int, bool) {
	b := d.b
	digits := func(i int) int {
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i
	}
	firstDigit := func(i int) (int, bool) {
		if i == len(b) || b[i] < '0' || b[i] > '9' {
			return d.fail(i)
		}
		return digits(i + 1), true
	}
	if b[i] == '-' {
		i++
		if i == len(b) || b[i] < '0' || b[i] > '9' {
			return d.fail(i)
		}
	}
	if b[i] == '0' {
		i++
	} else {
		i = digits(i + 1)
	}
	ok := true
	if i < len(b) && b[i] == '.' {
		if i, ok = firstDigit(i + 1); !ok {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i, ok = firstDigit(i); !ok {
			return i, false
		}
	}
	return i, true
}

// appendUnquoted appends the value of a validated JSON string's inside
// exactly as encoding/json decodes it: invalid UTF-8 and unpaired
// surrogates become U+FFFD, a valid surrogate pair one character.
func appendUnquoted(dst, s []byte) []byte {
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			unit, n, _ := jsonenc.Unescape(s[r:])
			r += n
			rr := rune(unit)
			if utf16.IsSurrogate(rr) {
				rr = utf8.RuneError
				if r+1 < len(s) && s[r] == '\\' && s[r+1] == 'u' {
					lo, n, _ := jsonenc.Unescape(s[r:])
					if dec := utf16.DecodeRune(rune(unit), rune(lo)); dec != utf8.RuneError {
						rr = dec
						r += n
					}
				}
			}
			dst = utf8.AppendRune(dst, rr)
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			dst = utf8.AppendRune(dst, rr)
			r += size
		}
	}
	return dst
}
