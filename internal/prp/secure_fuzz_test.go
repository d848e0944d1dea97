package prp

import (
	"bytes"
	"testing"
)

// FuzzSecureFrame: the fast and the general frame parsers agree, Open and
// AppendOpen agree, and Open never panics, never accepts a frame it did not get from the peer's Seal,
// and keeps failing once it failed.
func FuzzSecureFrame(f *testing.F) {
	key := AuthKey("fuzz")
	runner, err := newSession(roleRunner, key[:], []byte("{}"), "a", "b")
	if err != nil {
		f.Fatal(err)
	}
	genuine, err := runner.Seal([]byte(`{"kind":"pong"}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(genuine)
	f.Add(bytes.ToUpper(genuine))
	f.Add([]byte(`{"ciphertext":"00","counter":0,"schema":"paperclip.runner.secure-frame.v1"}`))
	f.Add([]byte(`{"schema":"paperclip.runner.secure-frame.v1","counter":0,"ciphertext":"\u0030\u0030"}`))
	f.Add([]byte(`{"protocol":"paperclip.runner","kind":"ping"}`))
	f.Add([]byte(`{"schema":"paperclip.runner.secure-frame.v1","counter":1e0,"ciphertext":"00"}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		if c, ct, ok := splitSecureFrameFast(frame); ok && validCiphertextHex(ct) {
			sc, sct, err := parseSecureFrameSlow(frame)
			if err != nil || sc != c || !bytes.Equal(sct, ct) {
				t.Fatalf("fast path (%d, %q) and general parser (%d, %q, %v) disagree", c, ct, sc, sct, err)
			}
		}
		core, err := newSession(roleCore, key[:], []byte("{}"), "a", "b")
		if err != nil {
			t.Fatal(err)
		}
		// AppendOpen into a reused buffer (the reader's way) agrees with Open
		// and keeps dst's bytes.
		again, err := newSession(roleCore, key[:], []byte("{}"), "a", "b")
		if err != nil {
			t.Fatal(err)
		}
		dst := append(make([]byte, 0, 64), "keep"...)
		out, aerr := again.AppendOpen(dst, frame)
		pt, err := core.Open(frame)
		if (err == nil) != (aerr == nil) || (err != nil && err.Error() != aerr.Error()) {
			t.Fatalf("Open (%v) and AppendOpen (%v) disagree", err, aerr)
		}
		if string(out[:4]) != "keep" || (err == nil && string(out[4:]) != string(pt)) || (err != nil && len(out) != 4) {
			t.Fatalf("AppendOpen returned %q", out)
		}
		if err == nil {
			if string(pt) != `{"kind":"pong"}` {
				t.Fatalf("opened a forged frame: %q", pt)
			}
			return
		}
		if _, err2 := core.Open(genuine); err2 == nil {
			t.Fatal("a failed direction accepted a later frame")
		}
	})
}

// FuzzSealOpen: every plaintext survives the round trip in both directions.
func FuzzSealOpen(f *testing.F) {
	f.Add([]byte(nil))
	f.Add([]byte(`{"protocol":"paperclip.runner"}`))
	f.Add(bytes.Repeat([]byte{0xff, 0x00}, 100))
	key := AuthKey("fuzz")
	f.Fuzz(func(t *testing.T, pt []byte) {
		runner, _ := newSession(roleRunner, key[:], []byte("{}"), "a", "b")
		core, _ := newSession(roleCore, key[:], []byte("{}"), "a", "b")
		for _, p := range [][2]*Session{{runner, core}, {core, runner}} {
			frame, err := p[0].Seal(pt)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p[1].Open(frame)
			if err != nil || !bytes.Equal(got, pt) {
				t.Fatalf("round trip: %v", err)
			}
		}
	})
}
