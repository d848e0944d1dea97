package provider

import (
	"strings"
	"testing"
)

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
		if i%256 == 0 { // keep the item text under maxItemText
			mp.TurnStarted(st, "turn-1")
		}
		if len(mp.Update(st, "turn-1", u)) == 0 {
			b.Fatal("no event")
		}
	}
}
