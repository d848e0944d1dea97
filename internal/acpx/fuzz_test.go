package acpx

import (
	"encoding/json"
	"testing"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// FuzzFeed feeds arbitrary stdout bytes, split at an arbitrary point and
// through a record round trip, and checks the framing invariants.
func FuzzFeed(f *testing.F) {
	for _, s := range []string{
		"",
		"banner\n",
		`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}` + "\n",
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}}` + "\n",
		`{"jsonrpc":"2.0","id":"a","method":"session/request_permission","params":{"options":[]}}` + "\npartial",
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"a"}}` + "\n",
		`{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"m"}}` + "\r\n",
		"{\"jsonrpc\":\"2.0\"}\n{}\n[]\nnull\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		c := NewClient(provider.Record{ACPSessionID: "s"}, ClientOptions{})
		if _, err := c.Request(provider.MethodInitialize, nil, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Prompt("turn-1", "x"); err != nil {
			t.Fatal(err)
		}
		cut := int(split) % (len(data) + 1)
		_, err1 := c.Feed(data[:cut])
		c = NewClient(c.Record(), ClientOptions{})
		_, err2 := c.Feed(data[cut:])
		w := c.Record().Process.Wire
		if len(w.PartialLine) > provider.MaxLineBytes {
			t.Fatalf("partial line over the bound: %d", len(w.PartialLine))
		}
		if err1 == nil && err2 == nil && w.ConsecutiveBadLines >= provider.MaxConsecutiveBadLines {
			t.Fatal("bad-line bound not enforced")
		}
		if _, err := json.Marshal(c.Record()); err != nil {
			t.Fatal(err)
		}
	})
}
