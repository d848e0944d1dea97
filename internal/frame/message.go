package frame

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// Stdin-queue message types (spec §6.1).
const (
	MsgStdin    = "stdin"
	MsgStdinEnd = "stdinEnd"
	MsgShutdown = "shutdown"
)

// ErrEmptyStdinFile is the read failure of an empty stdin file (§6.3).
var ErrEmptyStdinFile = errors.New("stdin file is empty")

// Message is one stdin-queue message (spec §6.1).
type Message struct {
	// Type is MsgStdin, MsgStdinEnd, MsgShutdown, or anything else (ignored
	// by pcwrap); "" when the file held valid JSON that is not an object
	// with a string type.
	Type string
	// Data is the decoded payload of a stdin message.
	Data []byte
	// BadData is set for a stdin message whose data is not a string; pcwrap
	// ignores such a message (§6.1).
	BadData bool
}

// AppendJSON appends the queue-file body of m: JSON.stringify of the
// message followed by "\n" (§6.1).
func (m Message) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"type":`...)
	dst = AppendJSString(dst, m.Type)
	if m.Type == MsgStdin {
		dst = append(dst, `,"data":"`...)
		n := base64.StdEncoding.EncodedLen(len(m.Data))
		dst = append(dst, make([]byte, n)...)
		encodeBase64(dst[len(dst)-n:], m.Data)
		dst = append(dst, '"')
	}
	return append(dst, "}\n"...)
}

// ParseMessage decodes the whole content of a stdin-queue file as
// JSON.parse would. Empty content is ErrEmptyStdinFile. Any JSON value
// parses; values that are not a known message come back with the type they
// carry (or "") and are to be ignored. The result never aliases content.
// Errors never quote the content
// beyond what the JSON decoder names (one character or a position).
func ParseMessage(content []byte) (Message, error) {
	return ParseMessageInto(content, nil)
}

// ParseMessageInto is ParseMessage decoding the payload of a stdin
// message into dst's storage when it is large enough (Data aliases dst
// then), so a reader can recycle payload buffers instead of allocating
// and zeroing one per file. The result never aliases content.
func ParseMessageInto(content, dst []byte) (Message, error) {
	if len(content) == 0 {
		return Message{}, ErrEmptyStdinFile
	}
	if m, ok := parseStdinFast(content, dst); ok {
		return m, nil
	}
	return parseMessageJSON(content)
}

// parseMessageJSON is the general path of ParseMessage.
func parseMessageJSON(content []byte) (Message, error) {
	// Validate the whole text first (JSON.parse semantics: any value,
	// surrounding white space allowed); a map keeps keys case-sensitive
	// and lets the last duplicate win, as JavaScript does.
	var raw json.RawMessage
	if err := json.Unmarshal(content, &raw); err != nil {
		return Message{}, jsonError(err)
	}
	if raw[0] != '{' {
		return Message{}, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return Message{}, jsonError(err)
	}
	var t string
	if v, ok := obj["type"]; ok && v[0] == '"' {
		_ = json.Unmarshal(v, &t)
	}
	m := Message{Type: t}
	if t == MsgStdin {
		v, ok := obj["data"]
		var s string
		if !ok || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			m.BadData = true
			return m, nil
		}
		m.Data = DecodeBase64(s)
	}
	return m, nil
}

// stdinPrefix starts every stdin message a conforming writer produces.
const stdinPrefix = `{"type":"stdin","data":"`

// parseStdinFast handles the shape every writer produces,
// {"type":"stdin","data":"<base64>"} plus JSON white space, without the
// general decoder, which is slow on large strings. It reports false for
// anything else, which then takes the general path; both give the same
// result for this shape.
func parseStdinFast(b, dst []byte) (Message, bool) {
	b = bytes.TrimLeft(b, " \t\r\n")
	if !bytes.HasPrefix(b, []byte(stdinPrefix)) {
		return Message{}, false
	}
	b = b[len(stdinPrefix):]
	end := bytes.IndexByte(b, '"')
	if end < 0 {
		return Message{}, false
	}
	data := b[:end]
	tail := bytes.TrimRight(b[end+1:], " \t\r\n")
	if len(tail) != 1 || tail[0] != '}' {
		return Message{}, false
	}
	out := dst[:cap(dst)]
	if need := base64.StdEncoding.DecodedLen(len(data)); len(out) < need {
		out = make([]byte, need)
	}
	n, ok := decodeBase64(out, data)
	if !ok {
		return Message{}, false // escapes, URL alphabet, odd padding, raw CR/LF: general path
	}
	return Message{Type: MsgStdin, Data: out[:n]}, true
}

// jsonError rewords a JSON decoding error without quoting content: a
// syntax error names its offset, anything else its kind.
func jsonError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at offset %d", se.Offset)
	}
	return errors.New("invalid JSON")
}

// SeqName returns the queue/event file name of seq: the decimal number
// left-padded with zeros to SeqDigits, plus ".json", exactly like
