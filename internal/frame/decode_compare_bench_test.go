package frame

import (
	"bytes"
	"encoding/base64"
	"testing"
)

// BenchmarkDecoders compares the stdin-message decoder with
// encoding/json's answer to the same question (parseMessageJSON, the
// oracle) and with encoding/base64 alone (the floor no JSON decoder can
// beat), on JSON.stringify's compact form and Python json.dumps's spaced
// form, at a 64 KiB stdin chunk and at 16 MiB, the largest stdin file.
func BenchmarkDecoders(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"64KiB", 64 << 10}, {"16MiB", 16 << 20}} {
		data := bytes.Repeat([]byte("0123456789abcdef"), size.n/16)
		b64 := base64.StdEncoding.EncodeToString(data)
		for _, shape := range []struct{ name, body string }{
			{"compact", string(Message{Type: MsgStdin, Data: data}.AppendJSON(nil))},
			{"spaced", `{"type": "stdin", "data": "` + b64 + `"}`},
		} {
			body := []byte(shape.body)
			dst := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
			for _, dec := range []struct {
				name string
				f    func() (Message, error)
			}{
				{"frame", func() (Message, error) { return ParseMessageInto(body, dst) }},
				{"encoding-json", func() (Message, error) { return parseMessageJSON(body) }},
			} {
				b.Run(size.name+"/"+shape.name+"/"+dec.name, func(b *testing.B) {
					b.SetBytes(int64(len(data)))
					for b.Loop() {
						m, err := dec.f()
						if err != nil || len(m.Data) != len(data) {
							b.Fatal(err)
						}
					}
				})
			}
		}
		b.Run(size.name+"/base64-only", func(b *testing.B) {
			src := []byte(b64)
			dst := make([]byte, len(data))
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := base64.StdEncoding.Decode(dst, src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
