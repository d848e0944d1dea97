package frame

import (
	"bytes"
	"testing"
)

// BenchmarkParseMessage64K: one 64 KiB stdin chunk as the host writes it.
func BenchmarkParseMessage64K(b *testing.B) {
	body := Message{Type: MsgStdin, Data: bytes.Repeat([]byte("y"), 64<<10)}.AppendJSON(nil)
	b.SetBytes(64 << 10)
	for b.Loop() {
		if _, err := ParseMessage(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseFrame64K: one stdout-mode data line of a full 64 KiB
// pipe read, as a consumer decodes it.
func BenchmarkParseFrame64K(b *testing.B) {
	line := Frame{Seq: 12345, Type: FrameData, Stream: StreamStdout, Data: bytes.Repeat([]byte("y"), 64<<10)}.AppendJSON(nil)
	line = append(line, '\n')
	b.SetBytes(64 << 10)
	for b.Loop() {
		if _, err := ParseFrame(line); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFrameAppendJSON64K: encoding one data frame of a full pipe read.
func BenchmarkFrameAppendJSON64K(b *testing.B) {
	f := Frame{Seq: 12345, Type: FrameData, Stream: StreamStdout, Data: bytes.Repeat([]byte("y"), 64<<10)}
	var buf []byte
	b.SetBytes(64 << 10)
	for b.Loop() {
		buf = f.AppendJSON(buf[:0])
	}
}
