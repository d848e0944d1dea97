package codexapp

import (
	"encoding/json"
	"testing"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// FuzzDecodeMessage: the app-server line decoder never panics, and what it
// accepts re-encodes to a line it accepts again as the same kind.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"result":{}}`, `{"id":"srv-1","method":"item/tool/call","params":{}}`,
		`{"method":"turn/started","params":{"threadId":"t","turn":{"id":"u","status":"inProgress"}}}`,
		`{"jsonrpc":"2.0","id":2,"error":{"code":-1,"message":"x"}}`, `{"id":null,"result":1}`, `[]`, `junk`, `{"id":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, kind, err := decodeMessage(line)
		if err != nil {
			return
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		_, kind2, err := decodeMessage(b)
		if err != nil || kind2 != kind {
			t.Fatalf("round trip changed the message: %v %d→%d", err, kind, kind2)
		}
	})
}

// FuzzNotificationMapper: any notification, in or out of a turn, maps
// without panicking, and every Inbound it yields is well formed; the
// record stays serialisable.
func FuzzNotificationMapper(f *testing.F) {
	for _, s := range []string{
		`{"method":"item/agentMessage/delta","params":{"threadId":"thread-1","turnId":"u1","itemId":"i","delta":"hi"}}`,
		`{"method":"turn/completed","params":{"threadId":"thread-1","turn":{"id":"u1","status":"failed"}}}`,
		`{"method":"turn/plan/updated","params":{"threadId":"thread-1","turnId":"u1","plan":[{"step":"a","status":"inProgress"}]}}`,
		`{"method":"turn/diff/updated","params":{"threadId":"thread-1","turnId":"u1","diff":"diff --git a/x b/x\nold mode 100644\nnew mode 100755\n"}}`,
		`{"method":"thread/tokenUsage/updated","params":{"threadId":"thread-1","turnId":"u1","tokenUsage":{"total":{"totalTokens":3},"last":{}}}}`,
		`{"method":"item/completed","params":{"threadId":"thread-1","turnId":"u1","item":{"type":"commandExecution","id":"c","status":"completed","aggregatedOutput":"x"}}}`,
		`{"method":"item/completed","params":{"threadId":"thread-1","turnId":"u1","item":{"type":"contextCompaction","id":"k"}}}`,
		`{"method":"error","params":{"error":{"message":"boom"},"willRetry":true}}`,
		`{"method":"serverRequest/resolved","params":{"threadId":"thread-1","requestId":"srv-1"}}`,
	} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, line []byte, inTurn bool) {
		cl := provider.NewCore(provider.Record{ACPSessionID: "thread-1"}, nil, provider.Dialect{})
		c := New(cl)
		if inTurn {
			if _, err := c.turnStart("turn-1", "go"); err != nil {
				t.Fatal(err)
			}
		}
		line = append(line, '\n')
		ins, _ := c.feed(line)
		for _, in := range ins {
			switch in.Kind {
			case provider.KindUpdate:
				if in.Update == nil {
					t.Fatal("update without update")
				}
				_ = c.Mapper.Update(cl.Map(), in.TurnID, *in.Update)
			case provider.KindTurnSettled:
				if in.Outcome == nil {
					t.Fatal("settled without outcome")
				}
			case provider.KindEvents:
				if len(in.Events) == 0 {
					t.Fatal("no events")
				}
			}
		}
		_ = cl.Record() // panics if the record stopped being serialisable
	})
}
