package opencode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// errEventTooLarge means one SSE event exceeded maxEventBytes.
var errEventTooLarge = errors.New("sse event exceeds bound")

// sseReader decodes a text/event-stream (the WHATWG framing: field lines,
// a blank line ends an event, ':' starts a comment). It keeps only the
// data field: OpenCode puts the whole event, id included, in one JSON data
// line. Not safe for concurrent use.
type sseReader struct {
	r   *bufio.Reader
	max int
	buf []byte
	// queue holds the rest of a chunk split at bare \r.
	queue [][]byte
	eof   bool
}

// newSSEReader reads events of at most max bytes (maxEventBytes if 0).
func newSSEReader(r io.Reader, max int) *sseReader {
	if max <= 0 {
		max = maxEventBytes
	}
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the data of the next event with at least one data line, or
// io.EOF at the end of the stream (a final event without its blank line is
// dropped, as the framing says).
func (s *sseReader) next() ([]byte, error) {
	s.buf = s.buf[:0]
	have := false
	for {
		line, err := s.line()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			if have {
				return s.buf, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		if string(field) != "data" {
			continue
		}
		if have {
			s.buf = append(s.buf, '\n')
		}
		if len(s.buf)+len(value) > s.max {
			return nil, errEventTooLarge
		}
		s.buf = append(s.buf, value...)
		have = true
	}
}

// ready reports whether a whole event with data is already buffered, so
// next would return without reading the connection. It looks only at the
// bytes in hand and never blocks; a bare \r in them answers false (next
// still reads it right; the caller only stops batching).
func (s *sseReader) ready() bool {
	if len(s.queue) > 0 || s.eof {
		return false
	}
	buf, _ := s.r.Peek(s.r.Buffered())
	data := false
	for len(buf) > 0 {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			return false
		}
		line := buf[:i]
		buf = buf[i+1:]
		line = bytes.TrimSuffix(line, []byte("\r"))
		switch {
		case bytes.IndexByte(line, '\r') >= 0:
			return false
		case len(line) == 0:
			if data {
				return true
			}
		case bytes.HasPrefix(line, []byte("data")) && (len(line) == 4 || line[4] == ':'):
			data = true
		}
	}
	return false
}

// line reads one line without its terminator (\n, \r\n or \r), bounded
// by the event bound.
func (s *sseReader) line() ([]byte, error) {
	if len(s.queue) > 0 {
		l := s.queue[0]
		s.queue = s.queue[1:]
		return l, nil
	}
	if s.eof {
		return nil, io.EOF
	}
	var out []byte
	for {
		b, err := s.r.ReadSlice('\n')
		if len(out)+len(b) > s.max+2 {
			return nil, errEventTooLarge
		}
		out = append(out, b...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			// Lines ended by a bare \r are complete; the text after the
			// last terminator is not.
			s.eof = true
			i := bytes.LastIndexByte(out, '\r')
			if i < 0 {
				return nil, io.EOF
			}
			parts := bytes.Split(out[:i], []byte("\r"))
			s.queue = parts[1:]
			return parts[0], nil
		} else if err != nil {
			return nil, fmt.Errorf("read event stream: %w", err)
		}
		break
	}
	out = bytes.TrimSuffix(out, []byte("\n"))
	out = bytes.TrimSuffix(out, []byte("\r"))
	// A lone \r also ends a line. OpenCode never sends one (its data is
	// JSON), so the split is off the hot path.
	if bytes.IndexByte(out, '\r') < 0 {
		return out, nil
	}
	parts := bytes.Split(out, []byte("\r"))
	s.queue = parts[1:]
	return parts[0], nil
}

// decodeEvent parses one event's data. It checks the shape only: an id
// and type are strings, properties an object or absent.
func decodeEvent(data []byte) (event, error) {
	var ev event
	if err := json.Unmarshal(data, &ev); err != nil {
		return event{}, fmt.Errorf("decode event: %w", err)
	}
	if ev.Type == "" {
		return event{}, errors.New("decode event: no type")
	}
	if len(ev.Properties) > 0 && ev.Properties[0] != '{' && string(ev.Properties) != "null" {
		return event{}, errors.New("decode event: properties is not an object")
	}
	return ev, nil
}
