package sessiondir

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
