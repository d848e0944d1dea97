package acpx

import (
	"strings"
	"testing"
)

// BenchmarkFeed measures stdout decoding: session/update lines through
// framing, JSON-RPC classification and update decoding.
func BenchmarkFeed(b *testing.B) {
	c := NewClient(Record{ACPSessionID: "s"}, ClientOptions{})
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

// BenchmarkMapChunk measures mapping one message chunk to PRP events.
func BenchmarkMapChunk(b *testing.B) {
	mp := Mapper{Redactor: NewRedactor(testSecret), Provider: "claude", Cwd: "/w"}
	st := &MapState{}
	mp.TurnStarted(st, "turn-1")
	u, err := DecodeSessionUpdate([]byte(`{"sessionUpdate":"agent_message_chunk","messageId":"m","content":{"type":"text","text":"` + strings.Repeat("x", 200) + `"}}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%256 == 0 { // keep the item text under MaxItemText
			mp.TurnStarted(st, "turn-1")
		}
		if len(mp.Update(st, "turn-1", u)) == 0 {
			b.Fatal("no event")
		}
	}
}
