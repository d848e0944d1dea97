package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// FuzzLoadState: any file content either loads into a consistent state that
// re-encodes and reloads to the same state, or fails with a clear error;
// whatever decodes can be dumped.
func FuzzLoadState(f *testing.F) {
	cfg := testConfig("")
	cfg.MaxOutboxBytes, cfg.P0ReserveBytes, cfg.MaxFrameBytes = defaultMaxOutboxBytes, defaultP0ReserveBytes, defaultMaxFrameBytes
	seed := func(mut func(tx *Tx) error) []byte {
		st := (&Store{cfg: cfg}).fresh()
		s := &Store{cfg: cfg, log: discard()}
		s.publish(st)
		tx := &Tx{s: s, st: st.Clone()}
		if err := mut(tx); err != nil {
			f.Fatal(err)
		}
		b, err := tx.st.MarshalJSON()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(seed(func(*Tx) error { return nil }))
	f.Add(seed(func(tx *Tx) error {
		if _, err := tx.Enqueue(Event{Type: "item.delta", Priority: P2, Payload: json.RawMessage(`{"delta":"a"}`)}); err != nil {
			return err
		}
		if _, _, err := tx.enqueueExecutor("x", Event{Type: "session.goal.updated", Priority: P1, Payload: json.RawMessage(`{"goal":null}`)}); err != nil {
			return err
		}
		if _, err := tx.BeginCommand(command(1, "c1", "turn.start", `{"text":"x"}`)); err != nil {
			return err
		}
		return tx.SetRecord("acpSessions", map[string]int{"a": 1})
	}))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[1,2,3]`))
	f.Add([]byte(`{"nextSourceSeq":"2","outbox":[[]]}`))
	f.Add([]byte(`{"schema":"paperclip.runner.durable.state.v1","outbox":[{"envelope":{}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeState(b)
		if err != nil {
			if !errors.Is(err, errCorruptState) {
				t.Fatalf("decode error does not wrap ErrCorruptState: %v", err)
			}
			return
		}
		// Whatever decodes, an operator's dump prints (state dump).
		if err := dumpState(st, FileName, int64(len(b)), io.Discard); err != nil {
			t.Fatalf("dump: %v", err)
		}
		if err := st.check(cfg); err != nil {
			if !errors.Is(err, errCorruptState) && !errors.Is(err, errStateBinding) {
				t.Fatalf("check error untyped: %v", err)
			}
			return
		}
		out, err := st.MarshalJSON()
		if err != nil {
			t.Fatalf("a loaded state must re-encode: %v", err)
		}
		if !json.Valid(out) {
			t.Fatalf("encoded state is not valid JSON")
		}
		st2, err := decodeState(out)
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v", err)
		}
		if err := st2.check(cfg); err != nil {
			t.Fatalf("re-encoded state does not check: %v", err)
		}
		out2, err := st2.MarshalJSON()
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("encoding is not stable")
		}
		for _, e := range st2.Outbox {
			for _, v := range []int{1, 2} {
				if _, err := e.Wire(v); err != nil {
					t.Fatalf("wire of a checked event: %v", err)
				}
			}
		}
	})
}

// A command above the core's canonical node bound still fingerprints, stably.
func TestFingerprintOfHugeCommandIsStable(t *testing.T) {
	ops := make([]map[string]any, 2100) // > prp.MaxCanonicalNodes values
	for i := range ops {
		ops[i] = map[string]any{"operationId": i, "version": 1, "inputSchema": map[string]any{"type": "object"}}
	}
	payload, err := json.Marshal(map[string]any{"authorizedTools": map[string]any{"operations": ops}})
	if err != nil {
		t.Fatal(err)
	}
	c := command(1, "command_prp_00000001", "run.prepare", string(payload))
	if _, err := prp.Canonical(c.Raw); !errors.Is(err, prp.ErrCanonicalTooLarge) {
		t.Fatalf("test command must exceed the canonical bound, got %v", err)
	}
	a, err := c.Fingerprint()
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Fingerprint()
	if err != nil || a != b {
		t.Fatalf("unstable fingerprint: %v", err)
	}
}

// FuzzSanitizePayload: sanitising yields a compact JSON object with no
// credential-shaped text left, and sanitising again changes nothing.
func FuzzSanitizePayload(f *testing.F) {
	f.Add([]byte(`{"a":"Bearer abcdefghijkl","apiKey":"k","nested":[{"password":"p"},"sk-abcdefghijklmnopqrstu"]}`))
	f.Add([]byte(`{"requestId":"ghp_abcdefghijklmnopqrstuvwxyz"}`))
	f.Add([]byte(`{"n":1e400,"s":"\u2028<&>"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := sanitizeJSON(b)
		if err != nil {
			if !errors.Is(err, errInvalidEvent) && !errors.Is(err, errSensitiveIdentity) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if !isObject(out) {
			t.Fatalf("sanitised payload is not an object")
		}
		if secretPattern.Match(out) {
			t.Fatalf("credential-shaped text survived sanitising")
		}
		again, err := sanitizeJSON(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("sanitising is not idempotent: %v", err)
		}
	})
}

func TestCredentialShapedKeysAreRenamed(t *testing.T) {
	out, err := sanitizeJSON([]byte(`{"sk-abcdefghijklmnopqrstu":1,"[REDACTED]":null,"ok":3}`))
	if err != nil {
		t.Fatal(err)
	}
	if secretPattern.Match(out) || !bytes.Contains(out, []byte(`"[REDACTED]":null`)) {
		t.Fatalf("got %s", out)
	}
	var m map[string]*int
	if err := json.Unmarshal(out, &m); err != nil || len(m) != 3 {
		t.Fatalf("keys lost: %s", out)
	}
}

// FuzzMayHoldSecret: text the prefilter passes over never matches the
// secret pattern, so redactSecrets answers as the pattern alone does.
func FuzzMayHoldSecret(f *testing.F) {
	for _, s := range mayHoldSecretCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !mayHoldSecret(s) && secretPattern.MatchString(s) {
			t.Fatalf("the prefilter misses a secret in %q", s)
		}
		if got, want := redactSecrets(s), secretPattern.ReplaceAllString(s, Redacted); got != want {
			t.Fatalf("redactSecrets(%q) = %q, want %q", s, got, want)
		}
	})
}

// FuzzOpenSecretStart: for any text cut into any deltas, the pieces a
// streamer sends split no match of the sanitiser, and sanitising them one
// by one equals sanitising the whole.
func FuzzOpenSecretStart(f *testing.F) {
	f.Add("token ghp_TTTTTTTTTTTTTTTTTTTTTTTT end", []byte{3, 9, 1})
	f.Add("Bearer abcdefghijk -----BEGIN EC PRIVATE KEY-----\nx\n-----END EC PRIVATE KEY-----", []byte{7, 20, 2})
	f.Add("sk-ant-aaaaaaaaaaaaaaaaaaaa AKIAABCDEFGHIJKLMNOP xoxp-0123456789", []byte{1, 1, 30})
	f.Fuzz(func(t *testing.T, text string, sizes []byte) {
		if len(text) > 4096 {
			return
		}
		var chunks []string
		for i := 0; len(text) > 0; i++ {
			n := len(text)
			if len(sizes) > 0 {
				n = min(n, int(sizes[i%len(sizes)])%64+1)
			}
			chunks = append(chunks, text[:n])
			text = text[n:]
		}
		requireNoMatchSplit(t, chunks)
	})
}
