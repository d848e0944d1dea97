package opencode

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: {\"type\":\"x\"}\n\n"))
	f.Add([]byte("data: a\r\ndata: b\r\r: c\n\n"))
	f.Add([]byte("data"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := newSSEReader(bytes.NewReader(b), 256)
		for i := 0; i < len(b)+1; i++ {
			d, err := r.next()
			if err != nil {
				return
			}
			if len(d) > 256 {
				t.Fatalf("event of %d bytes past the bound", len(d))
			}
		}
	})
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1","type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_1","partID":"prt_1","field":"text","delta":"hi"}}`))
	f.Add([]byte(`{"type":"permission.asked","properties":{"id":"per_1","sessionID":"ses_1","permission":"bash","patterns":["ls"]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := decodeEvent(b)
		if err != nil {
			return
		}
		// Whatever decodes goes through the translation without a panic,
		// in and out of a turn.
		st := &State{SessionID: "ses_1"}
		_ = translate(st, ev)
		st.startTurn("turn-1")
		st.TurnUser = "msg_0"
		st.Assistant = []string{"msg_1"}
		_ = translate(st, ev)
		if _, err := json.Marshal(st); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzListenURL(f *testing.F) {
	f.Add([]byte("opencode server listening on http://127.0.0.1:4096\n"))
	f.Add([]byte("x\nserver listening on http://[::1]:1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		u, p, ok := listenURL(b)
		if !ok {
			return
		}
		if p <= 0 || p > 65535 {
			t.Fatalf("port %d", p)
		}
		if _, err := newClient(u, "pw"); err != nil {
			t.Fatalf("listen url %q not a loopback client url: %v", u, err)
		}
	})
}

func FuzzRecover(f *testing.F) {
	f.Add([]byte(`[{"info":{"id":"msg_2","role":"assistant","parentID":"msg_1","time":{"created":1,"completed":2}},"parts":[{"id":"prt_1","type":"text","text":"hi","time":{"start":1,"end":2}}]}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var msgs []Message
		if json.Unmarshal(b, &msgs) != nil {
			return
		}
		st := &State{SessionID: "ses_1"}
		st.startTurn("turn-1")
		_ = Recover(st, msgs, map[string]string{}, nil)
		// A second recovery of the same list adds nothing.
		st2 := st.clone()
		if st2.TurnID == "" {
			return
		}
		if in := Recover(&st2, msgs, map[string]string{"ses_1": "busy"}, nil); len(in) != 0 {
			for _, m := range in {
				if m.Update != nil && m.Update.Content != nil && m.Update.Content.Text != "" {
					t.Fatalf("second recovery emitted text again: %q", m.Update.Content.Text)
				}
			}
		}
	})
}

// FuzzSSEReaderReady: whenever ready says an event is in hand, next
// returns it (or refuses it by its bound) without reading again.
func FuzzSSEReaderReady(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: b\n\n: c\n\ndata: d\n"))
	f.Add([]byte("data: a\r\n\r\ndata\n\ndatum: x\n\n"))
	f.Add([]byte("data: a\n\ndata: b\r\rdata: c\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 32<<10 {
			return
		}
		src := &oneShot{data: b}
		r := newSSEReader(src, 256)
		for {
			if _, err := r.next(); err != nil {
				return
			}
			for r.ready() {
				reads := src.reads
				_, err := r.next()
				if src.reads != reads {
					t.Fatalf("ready, yet next read the connection again")
				}
				if errors.Is(err, errEventTooLarge) {
					return
				}
				if err != nil {
					t.Fatalf("ready, yet next failed: %v", err)
				}
			}
		}
	})
}
