package frame

import (
	"encoding/base64"
	"errors"
	"slices"
)

// Stdin-queue message types (spec §6.1).
const (
	MsgStdin    = "stdin"
	MsgStdinEnd = "stdinEnd"
	MsgShutdown = "shutdown"
)

// errEmptyStdinFile is the read failure of an empty stdin file (§6.3).
var errEmptyStdinFile = errors.New("stdin file is empty")

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
	dst = appendJSString(dst, m.Type)
	if m.Type == MsgStdin {
		dst = append(dst, `,"data":"`...)
		// Room without zeroing it first, as in Frame.AppendJSON: the
		// encoder writes every byte of it.
		n := base64.StdEncoding.EncodedLen(len(m.Data))
		dst = slices.Grow(dst, n+3)
		at := len(dst)
		dst = dst[:at+n]
		encodeBase64(dst[at:], m.Data)
		dst = append(dst, '"')
	}
	return append(dst, "}\n"...)
}

// ParseMessage decodes the whole content of a stdin-queue file as
// JSON.parse would. Empty content is errEmptyStdinFile. Any JSON value
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
		return Message{}, errEmptyStdinFile
	}
	return decodeMessage(content, dst)
}

// SeqName returns the queue/event file name of seq: the decimal number
// left-padded with zeros to SeqDigits, plus ".json", exactly like
