package prp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"testing"
)

// benchFrameBytes is the plaintext size of the throughput target:
// seal+open of 64 KiB frames at ≥ 0.5× a bare AES-256-GCM seal of the same
// bytes, both measured in the same run:
//
//	go test -run '^$' -bench 'SealOpen64K|BareAESGCMSeal64K' -benchtime 2s ./internal/prp
const benchFrameBytes = 64 << 10

func benchSessions(b *testing.B) (runner, core *Session) {
	b.Helper()
	key := AuthKey("bench-ticket")
	signing := []byte(`{"bench":true}`)
	sp := serverProof(key[:], signing)
	cp := clientProof(key[:], signing, sp)
	runner, err := newSession(RoleRunner, key[:], signing, sp, cp)
	if err != nil {
		b.Fatal(err)
	}
	core, err = newSession(RoleCore, key[:], signing, sp, cp)
	if err != nil {
		b.Fatal(err)
	}
	return runner, core
}

func benchPlaintext(b *testing.B) []byte {
	b.Helper()
	pt := make([]byte, benchFrameBytes)
	if _, err := rand.Read(pt); err != nil {
		b.Fatal(err)
	}
	return pt
}

// BenchmarkSealOpen64K seals a 64 KiB plaintext into a secure frame (AES-GCM,
// hex, JSON) and opens it on the other side, per iteration.
func BenchmarkSealOpen64K(b *testing.B) {
	runner, core := benchSessions(b)
	pt := benchPlaintext(b)
	b.SetBytes(benchFrameBytes)
	b.ReportAllocs()
	for b.Loop() {
		frame, err := runner.Seal(pt)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := core.Open(frame); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSeal64K and BenchmarkOpen64K split the cost by half.
func BenchmarkSeal64K(b *testing.B) {
	runner, _ := benchSessions(b)
	pt := benchPlaintext(b)
	b.SetBytes(benchFrameBytes)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := runner.Seal(pt); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpen64K(b *testing.B) {
	const batch = 64
	runner, core := benchSessions(b)
	pt := benchPlaintext(b)
	frames := make([][]byte, batch)
	next := batch
	b.SetBytes(benchFrameBytes)
	b.ReportAllocs()
	for b.Loop() {
		if next == batch {
			b.StopTimer()
			for i := range frames {
				f, err := runner.Seal(pt)
				if err != nil {
					b.Fatal(err)
				}
				frames[i] = f
			}
			next = 0
			b.StartTimer()
		}
		if _, err := core.Open(frames[next]); err != nil {
			b.Fatal(err)
		}
		next++
	}
}

// BenchmarkBareAESGCMSeal64K is the baseline: one AES-256-GCM seal of the
// same 64 KiB with no framing.
func BenchmarkBareAESGCMSeal64K(b *testing.B) {
	key := AuthKey("bench-ticket")
	block, err := aes.NewCipher(key[:])
	if err != nil {
		b.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		b.Fatal(err)
	}
	pt := benchPlaintext(b)
	nonce := make([]byte, aead.NonceSize())
	dst := make([]byte, 0, len(pt)+aead.Overhead())
	b.SetBytes(benchFrameBytes)
	b.ReportAllocs()
	for b.Loop() {
		dst = aead.Seal(dst[:0], nonce, pt, nil)
	}
}
