package frame

import (
	"bytes"
	"encoding/base64"
	"testing"
)

// BenchmarkParseMessage64K: one 64 KiB stdin chunk in the three shapes a
// writer may produce: JSON.stringify's compact form, Python json.dumps's
// default (a space after each separator), and the keys reordered.
func BenchmarkParseMessage64K(b *testing.B) {
	data := bytes.Repeat([]byte("y"), 64<<10)
	b64 := base64.StdEncoding.EncodeToString(data)
	for _, c := range []struct{ name, body string }{
		{"compact", string(Message{Type: MsgStdin, Data: data}.AppendJSON(nil))},
		{"spaced", `{"type": "stdin", "data": "` + b64 + `"}`},
		{"reordered", `{"data":"` + b64 + `","type":"stdin"}` + "\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			body := []byte(c.body)
			// A payload buffer as pcwrap recycles them: room for DecodedLen.
			dst := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				m, err := ParseMessageInto(body, dst)
				if err != nil || len(m.Data) != len(data) {
					b.Fatal(err)
				}
			}
		})
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
