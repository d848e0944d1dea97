package terminal

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func FuzzDecodeCreate(f *testing.F) {
	f.Add([]byte(`{"sessionId":"s","command":"sh","args":["-c","echo hi"],"env":[{"name":"A","value":"b"}],"cwd":"/tmp","outputByteLimit":1024}`))
	f.Add([]byte(`{"sessionId":"s","command":"x","env":[{"name":"PAPERCLIP_A","value":"b"}]}`))
	f.Add([]byte(`{"sessionId":"s","command":"x","outputByteLimit":-1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeCreate(json.RawMessage(b))
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error is not a terminal.Error: %T", err)
			}
			return
		}
		if r.SessionID == "" || r.Command == "" {
			t.Fatal("accepted a request without sessionId or command")
		}
		if l := r.OutputByteLimit; l != nil && (*l < 0 || *l > maxOutputByteLimit) {
			t.Fatal("accepted an out-of-range limit")
		}
		for _, e := range r.Env {
			if len(e.Name) >= 10 && e.Name[:10] == "PAPERCLIP_" {
				t.Fatal("accepted a PAPERCLIP_ name")
			}
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"sessionId":"s","terminalId":"t"}`))
	f.Add([]byte(`{"sessionId":"s"}`))
	f.Add([]byte(`{"sessionId":"s","terminalId":"t"} {}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(json.RawMessage(b))
		if err == nil && (r.SessionID == "" || r.TerminalID == "") {
			t.Fatal("accepted a request without ids")
		}
	})
}

func FuzzKeepTail(f *testing.F) {
	f.Add([]byte("héllo"), []byte("wörld€"), 5)
	f.Fuzz(func(t *testing.T, a, b []byte, limit int) {
		if limit <= 0 || limit > 1<<16 {
			return
		}
		tail, cut := keepTail(nil, a, limit, false)
		tail, _ = keepTail(tail, b, limit, cut)
		if len(tail) > limit {
			t.Fatalf("tail of %d bytes over the limit %d", len(tail), limit)
		}
		whole := append(append([]byte{}, a...), b...)
		if string(whole[len(whole)-len(tail):]) != string(tail) {
			t.Fatal("tail is not a suffix of the output")
		}
		// A valid output gives a valid tail, unless the limit is below
		// one character.
		if utf8.Valid(whole) && !utf8.Valid(tail) && limit >= utf8.UTFMax {
			t.Fatal("a valid output gave an invalid tail")
		}
	})
}

func FuzzParseTail(f *testing.F) {
	const id = "0d9c1a52-7a8e-4c1b-9f0e-2b8f5f3c9a11"
	f.Add([]byte(`{"id":"` + id + `","sessionId":"s","limit":10,"consumed":3,"exit":{"exitCode":0,"signal":null},"waiters":[7]}` + "\nhello"))
	f.Add([]byte(`{"id":"` + id + `","limit":2}` + "\nhello"))
	f.Add([]byte("no header"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tm, err := parseTail(id, b)
		if err != nil {
			return
		}
		if len(tm.tail) > tm.limit || tm.limit > maxOutputByteLimit || len(tm.waiters) > maxWaiters {
			t.Fatal("accepted a tail file out of its bounds")
		}
	})
}
