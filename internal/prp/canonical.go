package prp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// Canonical JSON bounds, mirroring the reference's canonicalJson.
const (
	// MaxCanonicalDepth is the deepest nesting canonicalJson accepts; the
	// root is depth 0 (CP MAX_CANONICAL_JSON_DEPTH).
	MaxCanonicalDepth = 64
	// MaxCanonicalNodes is the most values canonicalJson visits, containers
	// included, object keys excluded (CP MAX_CANONICAL_JSON_NODES).
	MaxCanonicalNodes = 10_000
	// maxParseDepth bounds the parser's recursion; deeper than any value
	// Canonical can accept, so it only guards the stack.
	maxParseDepth = 1024
)

// Canonical JSON errors. Their texts are the reference's error codes.
var (
	ErrCanonicalTooLarge = errors.New("durable_prp_canonical_json_too_large")
	errCanonicalInvalid  = errors.New("durable_prp_canonical_json_invalid")
)

// Canonical returns the canonical JSON of v exactly as the reference's
// canonicalJson produces it: object keys sorted by UTF-16 code units at every
// level, compact, strings escaped as JSON.stringify does (no HTML escaping;
// U+2028/U+2029 raw; lone surrogates as \udXXX), numbers formatted as
// JavaScript does (IEEE doubles, shortest round trip, 1e+21, -0 as 0).
// At most MaxCanonicalDepth levels and MaxCanonicalNodes values.
//
// v is any value encoding/json can marshal; a json.RawMessage or []byte is
// taken as JSON text and parsed like JSON.parse (duplicate keys: the last
// wins). Invalid JSON or invalid UTF-8 is errCanonicalInvalid.
func Canonical(v any) ([]byte, error) {
	val, err := parseValue(v)
	if err != nil {
		return nil, err
	}
	return val.canonical(MaxCanonicalDepth, MaxCanonicalNodes)
}

// parseValue parses v as Canonical takes it: JSON text as is, anything else
// through encoding/json.
func parseValue(v any) (*jsonValue, error) {
	var text []byte
	switch x := v.(type) {
	case json.RawMessage:
		text = x
	case []byte:
		text = x
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("canonical json: %w: %w", errCanonicalInvalid, err)
		}
		text = b
	}
	return parseJSON(text)
}

// jsonKind tags a parsed JSON value.
type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

// jsonValue is a parsed JSON value with JavaScript semantics: numbers are
// doubles and strings are UTF-16 code-unit sequences, so lone surrogates
// survive and keys sort as JavaScript sorts them.
type jsonValue struct {
	kind    jsonKind
	boolean bool
	number  float64
	// numText is the literal number text, kept for strict integer checks.
	numText []byte
	str     []uint16
	items   []*jsonValue
	members []jsonMember
}

type jsonMember struct {
	key   []uint16
	value *jsonValue
}

// member returns the value of key, or nil.
func (v *jsonValue) member(key string) *jsonValue {
	if v == nil || v.kind != jsonObject {
		return nil
	}
	k := utf16.Encode([]rune(key))
	for _, m := range v.members {
		if slices.Equal(m.key, k) {
			return m.value
		}
	}
	return nil
}

// without returns a shallow copy of an object without key.
func (v *jsonValue) without(key string) *jsonValue {
	k := utf16.Encode([]rune(key))
	c := *v
	c.members = slices.DeleteFunc(slices.Clone(v.members), func(m jsonMember) bool { return slices.Equal(m.key, k) })
	return &c
}

// goString converts a string value to Go (lone surrogates become U+FFFD)
// and reports whether v is a string at all.
func (v *jsonValue) goString() (string, bool) {
	if v == nil || v.kind != jsonString {
		return "", false
	}
	return string(utf16.Decode(v.str)), true
}

// CanonicalUnbounded is Canonical without MaxCanonicalDepth and
// MaxCanonicalNodes (the parser's stack guard stays): the same bytes for every
// value Canonical accepts. The catalog digest needs it: the reference runner's
// canonical_json (runner-core provider_bridge.rs) has no bounds, and a
// catalog of 256 operations with their schemas passes 10,000 nodes.
func CanonicalUnbounded(v any) ([]byte, error) {
	val, err := parseValue(v)
	if err != nil {
		return nil, err
	}
	return val.canonical(math.MaxInt, math.MaxInt)
}

// canonical serialises v as the reference's canonicalJson does.
func (v *jsonValue) canonical(maxDepth, maxNodes int) ([]byte, error) {
	var buf bytes.Buffer
	nodes := 0
	if err := v.writeCanonical(&buf, 0, &nodes, maxDepth, maxNodes); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (v *jsonValue) writeCanonical(buf *bytes.Buffer, depth int, nodes *int, maxDepth, maxNodes int) error {
	*nodes++
	if depth > maxDepth || *nodes > maxNodes {
		return fmt.Errorf("canonical json: %w", ErrCanonicalTooLarge)
	}
	switch v.kind {
	case jsonNull:
		buf.WriteString("null")
	case jsonBool:
		if v.boolean {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case jsonNumber:
		if math.IsInf(v.number, 0) || math.IsNaN(v.number) {
			return fmt.Errorf("canonical json: %w: non-finite number", errCanonicalInvalid)
		}
		buf.WriteString(formatJSNumber(v.number))
	case jsonString:
		writeJSString(buf, v.str)
	case jsonArray:
		buf.WriteByte('[')
		for i, it := range v.items {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := it.writeCanonical(buf, depth+1, nodes, maxDepth, maxNodes); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case jsonObject:
		members := slices.Clone(v.members)
		slices.SortFunc(members, func(a, b jsonMember) int { return slices.Compare(a.key, b.key) })
		buf.WriteByte('{')
		for i, m := range members {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSString(buf, m.key)
			buf.WriteByte(':')
			if err := m.value.writeCanonical(buf, depth+1, nodes, maxDepth, maxNodes); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	}
	return nil
}

// writeJSString writes s quoted exactly as JSON.stringify does.
func writeJSString(buf *bytes.Buffer, s []uint16) {
	const hexDigits = "0123456789abcdef"
	buf.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			buf.WriteString(`\"`)
		case c == '\\':
			buf.WriteString(`\\`)
		case c == '\b':
			buf.WriteString(`\b`)
		case c == '\f':
			buf.WriteString(`\f`)
		case c == '\n':
			buf.WriteString(`\n`)
		case c == '\r':
			buf.WriteString(`\r`)
		case c == '\t':
			buf.WriteString(`\t`)
		case c < 0x20:
			buf.WriteString(`\u00`)
			buf.WriteByte(hexDigits[c>>4])
			buf.WriteByte(hexDigits[c&0xf])
		case c < utf8.RuneSelf:
			buf.WriteByte(byte(c))
		case utf16.IsSurrogate(rune(c)):
			if c < 0xdc00 && i+1 < len(s) && s[i+1] >= 0xdc00 && s[i+1] < 0xe000 {
				buf.WriteRune(utf16.DecodeRune(rune(c), rune(s[i+1])))
				i++
				continue
			}
			buf.WriteString(`\u`)
			buf.WriteByte(hexDigits[c>>12])
			buf.WriteByte(hexDigits[(c>>8)&0xf])
			buf.WriteByte(hexDigits[(c>>4)&0xf])
			buf.WriteByte(hexDigits[c&0xf])
		default:
			buf.WriteRune(rune(c))
		}
	}
	buf.WriteByte('"')
}

// formatJSNumber formats f as ECMAScript Number::toString(10) does.
func formatJSNumber(f float64) string {
	if f == 0 {
		return "0" // both +0 and -0
	}
	if f < 0 {
		return "-" + formatJSNumber(-f)
	}
	// Shortest round-trip digits: d.ddddde±x.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expText, _ := bytes.Cut([]byte(e), []byte("e"))
	digits := bytes.ReplaceAll(mant, []byte("."), nil)
	exp, _ := strconv.Atoi(string(expText))
	k := len(digits)
	n := exp + 1 // value = 0.digits × 10^n
	var b []byte
	switch {
	case k <= n && n <= 21:
		b = append(b, digits...)
		b = append(b, bytes.Repeat([]byte("0"), n-k)...)
	case 0 < n && n <= 21:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:]...)
	case -6 < n && n <= 0:
		b = append(b, "0."...)
		b = append(b, bytes.Repeat([]byte("0"), -n)...)
		b = append(b, digits...)
	default:
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, int64(n-1), 10)
	}
	return string(b)
}

// parseJSON parses one JSON text (RFC 8259) with JSON.parse semantics.
func parseJSON(text []byte) (*jsonValue, error) {
	if !utf8.Valid(text) {
		return nil, fmt.Errorf("parse json: %w: invalid UTF-8", errCanonicalInvalid)
	}
	p := jsonParser{s: text}
	p.skipSpace()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.i != len(p.s) {
		return nil, p.fail("trailing data")
	}
	return v, nil
}

type jsonParser struct {
	s []byte
	i int
}

func (p *jsonParser) fail(what string) error {
	return fmt.Errorf("parse json: %w: %s at offset %d", errCanonicalInvalid, what, p.i)
}

func (p *jsonParser) skipSpace() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (*jsonValue, error) {
	if depth > maxParseDepth {
		return nil, fmt.Errorf("parse json: %w: nesting deeper than %d", ErrCanonicalTooLarge, maxParseDepth)
	}
	if p.i >= len(p.s) {
		return nil, p.fail("unexpected end")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return &jsonValue{kind: jsonString, str: s}, nil
	case c == 't':
		return p.literal("true", &jsonValue{kind: jsonBool, boolean: true})
	case c == 'f':
		return p.literal("false", &jsonValue{kind: jsonBool})
	case c == 'n':
		return p.literal("null", &jsonValue{kind: jsonNull})
	case c == '-' || (c >= '0' && c <= '9'):
		return p.num()
	default:
		return nil, p.fail("unexpected character")
	}
}

func (p *jsonParser) literal(word string, v *jsonValue) (*jsonValue, error) {
	if !bytes.HasPrefix(p.s[p.i:], []byte(word)) {
		return nil, p.fail("invalid literal")
	}
	p.i += len(word)
	return v, nil
}

func (p *jsonParser) object(depth int) (*jsonValue, error) {
	p.i++ // '{'
	v := &jsonValue{kind: jsonObject}
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return v, nil
	}
	for {
		p.skipSpace()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return nil, p.fail("expected object key")
		}
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, p.fail("expected ':'")
		}
		p.i++
		p.skipSpace()
		val, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		// JSON.parse keeps the last of duplicate keys.
		if j := slices.IndexFunc(v.members, func(m jsonMember) bool { return slices.Equal(m.key, key) }); j >= 0 {
			v.members[j].value = val
		} else {
			v.members = append(v.members, jsonMember{key: key, value: val})
		}
		p.skipSpace()
		if p.i >= len(p.s) {
			return nil, p.fail("unterminated object")
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return v, nil
		default:
			return nil, p.fail("expected ',' or '}'")
		}
	}
}

func (p *jsonParser) array(depth int) (*jsonValue, error) {
	p.i++ // '['
	v := &jsonValue{kind: jsonArray}
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return v, nil
	}
	for {
		p.skipSpace()
		it, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v.items = append(v.items, it)
		p.skipSpace()
		if p.i >= len(p.s) {
			return nil, p.fail("unterminated array")
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return v, nil
		default:
			return nil, p.fail("expected ',' or ']'")
		}
	}
}

func (p *jsonParser) num() (*jsonValue, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.s) && p.s[p.i] == '0':
		p.i++
	case p.i < len(p.s) && p.s[p.i] >= '1' && p.s[p.i] <= '9':
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
	default:
		return nil, p.fail("invalid number")
	}
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		d := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		if p.i == d {
			return nil, p.fail("invalid number fraction")
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		d := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		if p.i == d {
			return nil, p.fail("invalid number exponent")
		}
	}
	text := p.s[start:p.i]
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, p.fail("invalid number")
	}
	// Out of range overflows to ±Inf exactly as JSON.parse does; canonical
	// output then rejects it.
	return &jsonValue{kind: jsonNumber, number: f, numText: text}, nil
}

func (p *jsonParser) str() ([]uint16, error) {
	p.i++ // opening quote
	var out []uint16
	for {
		if p.i >= len(p.s) {
			return nil, p.fail("unterminated string")
		}
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return out, nil
		case c == '\\':
			unit, n, ok := jsonenc.Unescape(p.s[p.i:])
			if !ok {
				what := escapeError(p.s[p.i:])
				if p.i+1 < len(p.s) {
					p.i += 2 // the offset past the escape's letter, as always
				}
				return nil, p.fail(what)
			}
			out = append(out, unit)
			p.i += n
		case c < 0x20:
			return nil, p.fail("control character in string")
		case c < utf8.RuneSelf:
			out = append(out, uint16(c))
			p.i++
		default:
			r, size := utf8.DecodeRune(p.s[p.i:])
			p.i += size
			if r >= 0x10000 {
				r1, r2 := utf16.EncodeRune(r)
				out = append(out, uint16(r1), uint16(r2))
			} else {
				out = append(out, uint16(r))
			}
		}
	}
}

// escapeError names what is wrong with the invalid escape at the start of
// s, as the parser's errors always have.
func escapeError(s []byte) string {
	switch {
	case len(s) < 2:
		return "unterminated escape"
	case s[1] != 'u':
		return "invalid escape"
	case len(s) < 6:
		return "short unicode escape"
	}
	return "invalid unicode escape"
}
