// Package frame is the codec of the JSON bodies that cross a process-session
// directory (spec pcwrap-protocol.md): pcwrap's output frames (§7.1), in
// event files or stdout lines, and the stdin-queue messages (§6.1), with the
// Node-compatible base64 and JSON.stringify string quoting they share. The
// directory layout, file names and sequence numbers are sessiondir's.
package frame

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Frame types (spec §7.1).
const (
	FrameData        = "data"
	FrameExit        = "exit"
	FrameError       = "error"
	FrameShutdownAck = "shutdownAck"
)

// Streams of a data frame (spec §7.1).
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// ErrUnknownFrameType marks a frame that parsed but whose type is not
// one of §7.1. ParseFrame still returns the frame, so a consumer can
// skip it and go on.
var ErrUnknownFrameType = errors.New("unknown frame type")

// Frame is one pcwrap output frame (spec §7.1). Its JSON form is exactly
// what JavaScript's JSON.stringify produces for the reference's objects:
// compact, keys in spec order, no HTML escaping.
type Frame struct {
	// Seq is the stdout-mode sequence number (§7.3); 0 means absent, and
	// event-file bodies never carry it (§7.2).
	Seq  int64
	Type string
	// Stream is StreamStdout or StreamStderr (data frames).
	Stream string
	// Data is the raw child output (data frames); base64 on the wire.
	Data []byte
	// Code is the exit code, nil for JSON null (exit frames).
	Code *int
	// Signal is the SIG… name, "" for JSON null (exit frames).
	Signal string
	// Message is the error text (error frames).
	Message string
}

// DataFrame returns a data frame for one read from the child's stream.
func DataFrame(stream string, b []byte) Frame {
	return Frame{Type: FrameData, Stream: stream, Data: b}
}

// ExitFrame returns an exit frame; code nil and signal "" encode as null.
func ExitFrame(code *int, signal string) Frame {
	return Frame{Type: FrameExit, Code: code, Signal: signal}
}

// OOMKilledPrefix starts the error frame pcwrap emits before the exit
// frame of a child the OOM killer took (beyond): a consumer names the
// cause from it.
const OOMKilledPrefix = "pcwrap: the child was killed by the OOM killer"

// ErrorFrame returns an error frame carrying msg.
func ErrorFrame(msg string) Frame { return Frame{Type: FrameError, Message: msg} }

// ShutdownAckFrame returns the shutdownAck frame.
func ShutdownAckFrame() Frame { return Frame{Type: FrameShutdownAck} }

// AppendJSON appends JSON.stringify of the frame (no trailing newline) to
// dst. A non-zero Seq is written first, as the stdout mode requires (§7.3).
// Unknown types encode as {"type":…} alone.
func (f Frame) AppendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	if f.Seq != 0 {
		dst = append(dst, `"seq":`...)
		dst = strconv.AppendInt(dst, f.Seq, 10)
		dst = append(dst, ',')
	}
	dst = append(dst, `"type":`...)
	dst = appendJSString(dst, f.Type)
	switch f.Type {
	case FrameData:
		dst = append(dst, `,"stream":`...)
		dst = appendJSString(dst, f.Stream)
		dst = append(dst, `,"data":"`...)
		// Room for the characters and the closing '"}' without zeroing
		// it first (the encoder writes every byte of it): clearing 87 KiB
		// per frame only to overwrite it cost a memclr per pipe read.
		n := base64.StdEncoding.EncodedLen(len(f.Data))
		dst = slices.Grow(dst, n+2)
		at := len(dst)
		dst = dst[:at+n]
		encodeBase64(dst[at:], f.Data)
		dst = append(dst, '"')
	case FrameExit:
		dst = append(dst, `,"code":`...)
		if f.Code == nil {
			dst = append(dst, "null"...)
		} else {
			dst = strconv.AppendInt(dst, int64(*f.Code), 10)
		}
		dst = append(dst, `,"signal":`...)
		if f.Signal == "" {
			dst = append(dst, "null"...)
		} else {
			dst = appendJSString(dst, f.Signal)
		}
	case FrameError:
		dst = append(dst, `,"message":`...)
		dst = appendJSString(dst, f.Message)
	}
	return append(dst, '}')
}

// MarshalJSON implements json.Marshaler with AppendJSON. Note that
// json.Marshal HTML-escapes a Marshaler's output; use AppendJSON, or an
// Encoder with SetEscapeHTML(false), for the exact wire form.
func (f Frame) MarshalJSON() ([]byte, error) { return f.AppendJSON(nil), nil }

// wireFrame is the lenient decoding shape of a frame.
type wireFrame struct {
	Seq     *float64 `json:"seq"`
	Type    string   `json:"type"`
	Stream  string   `json:"stream"`
	Data    *string  `json:"data"`
	Code    *float64 `json:"code"`
	Signal  *string  `json:"signal"`
	Message *string  `json:"message"`
}

// UnmarshalJSON decodes a frame body or a stdout-mode line. A non-integer
// seq or code is an error; data is decoded with DecodeBase64.
func (f *Frame) UnmarshalJSON(b []byte) error {
	var w wireFrame
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	var out Frame
	out.Type, out.Stream = w.Type, w.Stream
	if w.Seq != nil {
		s := *w.Seq
		if s != float64(int64(s)) {
			return fmt.Errorf("decode frame: seq is not an integer")
		}
		out.Seq = int64(s)
	}
	if w.Data != nil {
		out.Data = DecodeBase64(*w.Data)
	}
	if w.Code != nil {
		c := *w.Code
		if c != float64(int(c)) {
			return fmt.Errorf("decode frame: code is not an integer")
		}
		ci := int(c)
		out.Code = &ci
	}
	if w.Signal != nil {
		out.Signal = *w.Signal
	}
	if w.Message != nil {
		out.Message = *w.Message
	}
	*f = out
	return nil
}

// ParseFrame decodes one event-file body or one stdout-mode line. A frame
// of a type outside §7.1 is returned together with ErrUnknownFrameType.
func ParseFrame(b []byte) (Frame, error) { return ParseFrameInto(b, nil) }

// ParseFrameInto is ParseFrame decoding the payload of a data frame in
// pcwrap's own form into dst's storage when it is large enough (Data
// aliases dst then), so a consumer can recycle payload buffers instead of
// allocating and clearing one per frame. Any other frame, and any payload
// too large for dst, gets storage of its own. The result never aliases b.
func ParseFrameInto(b, dst []byte) (Frame, error) {
	if f, ok := parseDataFast(b, dst); ok {
		return f, nil
	}
	var f Frame
	if err := f.UnmarshalJSON(b); err != nil {
		return Frame{}, fmt.Errorf("parse frame: %w", err)
	}
	switch f.Type {
	case FrameData, FrameExit, FrameError, FrameShutdownAck:
		return f, nil
	}
	return f, fmt.Errorf("parse frame: %w", ErrUnknownFrameType)
}

// parseDataFast handles the data frame exactly as pcwrap writes it,
// [{"seq":N,]"type":"data","stream":"stdout"|"stderr","data":"<base64>"}
// plus JSON white space, without encoding/json, which scans a large string
// several times a byte at a time (a consumer decoding frames slower than
// pcwrap writes them). It reports false for anything else, which then
// takes the general path; both give the same Frame for this shape
// (FuzzParseFrame checks).
func parseDataFast(b, dst []byte) (Frame, bool) {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 || b[0] != '{' {
		return Frame{}, false
	}
	b = b[1:]
	var f Frame
	if rest, ok := bytes.CutPrefix(b, []byte(`"seq":`)); ok {
		// 1 to 15 digits without a leading zero: valid JSON and exact
		// through the general path's float64.
		n := 0
		for n < len(rest) && n < 16 && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 0 || n > 15 || rest[0] == '0' || n >= len(rest) || rest[n] != ',' {
			return Frame{}, false
		}
		seq, err := strconv.ParseInt(string(rest[:n]), 10, 64)
		if err != nil {
			return Frame{}, false
		}
		f.Seq, b = seq, rest[n+1:]
	}
	b, ok := bytes.CutPrefix(b, []byte(`"type":"data","stream":"`))
	if !ok {
		return Frame{}, false
	}
	switch {
	case bytes.HasPrefix(b, []byte(StreamStdout+`","data":"`)):
		f.Stream = StreamStdout
	case bytes.HasPrefix(b, []byte(StreamStderr+`","data":"`)):
		f.Stream = StreamStderr
	default:
		return Frame{}, false
	}
	b = b[len(StreamStdout+`","data":"`):]
	end := bytes.IndexByte(b, '"')
	if end < 0 {
		return Frame{}, false
	}
	data := b[:end]
	if tail := bytes.TrimRight(b[end+1:], " \t\r\n"); len(tail) != 1 || tail[0] != '}' {
		return Frame{}, false
	}
	out := dst[:cap(dst)]
	if need := base64.StdEncoding.DecodedLen(len(data)); len(out) < need {
		out = make([]byte, need)
	}
	n, ok := decodeBase64(out, data)
	if !ok {
		return Frame{}, false
	}
	f.Type, f.Data = FrameData, out[:n]
	return f, true
}

// Message is one stdin-queue message (spec §6.1).

// appendJSString appends s as JSON.stringify quotes a string: only '"',
// '\\' and control characters are escaped (short forms where JavaScript
// has them, else \u00xx), no HTML escaping, U+2028/U+2029 verbatim.
// Invalid UTF-8 becomes U+FFFD, as decoding it to a JS string would.
func appendJSString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"':
				dst = append(dst, '\\', '"')
			case c == '\\':
				dst = append(dst, '\\', '\\')
			case c == '\b':
				dst = append(dst, '\\', 'b')
			case c == '\f':
				dst = append(dst, '\\', 'f')
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, "\ufffd"...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
