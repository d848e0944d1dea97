package clientfs

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDecodeRead: any params decode to a request with a session and a
// path, or to an invalid-params error; never a panic.
func FuzzDecodeRead(f *testing.F) {
	for _, s := range []string{`{"sessionId":"s","path":"/a","line":2,"limit":3}`, `{"sessionId":"s","path":"/a","line":-1}`,
		`null`, `[]`, `{"path":"/a"}`, `{"sessionId":"s","path":"/a"} x`, `{"sessionId":"s","path":"/a","limit":4294967296}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := DecodeRead(json.RawMessage(raw))
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Code != codeInvalidParams {
				t.Fatalf("decode error %v is not invalid params", err)
			}
			return
		}
		if r.SessionID == "" || r.Path == "" {
			t.Fatalf("decoded %+v without session or path", r)
		}
	})
}

// FuzzDecodeWrite: as FuzzDecodeRead; content must be present.
func FuzzDecodeWrite(f *testing.F) {
	for _, s := range []string{`{"sessionId":"s","path":"/a","content":""}`, `{"sessionId":"s","path":"/a"}`,
		`{"sessionId":"s","path":"/a","content":null}`, `{"sessionId":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		w, err := DecodeWrite(json.RawMessage(raw))
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Code != codeInvalidParams {
				t.Fatalf("decode error %v is not invalid params", err)
			}
			return
		}
		if w.SessionID == "" || w.Path == "" {
			t.Fatalf("decoded %+v without session or path", w)
		}
	})
}

// FuzzLocate: whatever the agent's path, an accepted one maps to a clean
// relative path under a root that never climbs out with `..`.
func FuzzLocate(f *testing.F) {
	for _, s := range []string{"/w/a", "/w/../etc", "../x", "/w", "/wx/a", "/w/./a//b/", "/w/a/../../b", "/v/c"} {
		f.Add(s)
	}
	r := Roots{Cwd: "/w", Additional: []string{"/v", "/w/deep"}}
	f.Fuzz(func(t *testing.T, p string) {
		root, rel, err := r.locate("read text file", p)
		if err != nil {
			return
		}
		if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") || filepath.Clean(rel) != rel {
			t.Fatalf("%q → root %q rel %q", p, root, rel)
		}
		if got := filepath.Join(root, rel); got != filepath.Clean(p) {
			t.Fatalf("%q → %q, not the cleaned path", p, got)
		}
	})
}
