package agent

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// FuzzParseDescriptor: any run.prepare payload yields a binding with an
// absolute cwd and a command, or a fixed-text error; never a panic.
func FuzzParseDescriptor(f *testing.F) {
	for _, s := range []string{
		`{"provider":{"kind":"acpx","agent":"claude","cwd":"/work"}}`,
		`{"provider":{"kind":"acpx","agent":"x","command":"/bin/agent","args":["a"],"cwd":"/","permissionMode":"deny-all"}}`,
		`{"provider":{"kind":"codex"}}`,
		`{"provider":{"kind":"acpx","agent":"nope"}}`,
		`{"provider":{"kind":"acpx","agent":"pi","cwd":"rel"}}`,
		`{"provider":{"kind":"acpx","agent":"claude","permissionMode":"yolo"}}`,
		`[]`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		bind, err := parseDescriptor(b, testDrivers)
		if err != nil {
			if _, ok := err.(*CommandError); !ok {
				t.Fatalf("error is not a CommandError: %T", err)
			}
			return
		}
		if bind.Command == "" || !filepath.IsAbs(bind.Cwd) {
			t.Fatalf("accepted a binding without command or absolute cwd: %+v", bind)
		}
		if _, err := json.Marshal(bind); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzParseChildRecord: .pcwrap.child is untrusted disk content; a record
// is accepted only with a group id above 1 (never runnerd's or init's).
func FuzzParseChildRecord(f *testing.F) {
	for _, s := range []string{`{"pgid":1234,"startTime":99}`, `{"pgid":1,"startTime":0}`, `{"pgid":-5}`, `{}`, `x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := parseChildRecord(b)
		if err == nil && rec.Pgid <= 1 {
			t.Fatalf("accepted pgid %d", rec.Pgid)
		}
	})
}
