package acpx

import (
	"strings"
	"testing"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// BenchmarkFeed measures stdout decoding: session/update lines through
// framing, JSON-RPC classification and update decoding.
func BenchmarkFeed(b *testing.B) {
	c := NewClient(provider.Record{ACPSessionID: "s"}, ClientOptions{})
	if _, err := c.Prompt("turn-1", "x"); err != nil {
		b.Fatal(err)
	}
	line := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","messageId":"m","content":{"type":"text","text":"` + strings.Repeat("lorem ipsum ", 20) + `"}}}}` + "\n"
	chunk := []byte(strings.Repeat(line, 64))
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		msgs, err := c.Feed(chunk)
		if err != nil || len(msgs) != 64 {
			b.Fatal(err, len(msgs))
		}
	}
}
