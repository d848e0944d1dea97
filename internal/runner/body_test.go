package runner

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/outputbody"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
)

// storeBodyFlags are runnerd's default outbox bounds and the server's
// (workspace.md §12: every [bodies] scenario runs under both).
var storeBodyFlags = []struct {
	name             string
	maxOutbox, p0Res int
}{
	{"runnerd-defaults", 64 << 10, 32 << 10},
	{"server-flags", 16 << 20, 1 << 20},
}

func openBodyStore(t testing.TB, maxOutbox, p0Reserve int) *state.Store {
	t.Helper()
	s, err := state.Open(state.Config{Dir: filepath.Join(t.TempDir(), "state"), Identity: testIdentity,
		MaxOutboxBytes: maxOutbox, P0ReserveBytes: p0Reserve})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// messageCarrier is item.completed of an assistant message of text.
func messageCarrier(text string) bodyCarrier {
	return bodyCarrier{Event: state.Event{Type: prp.EventItemCompleted, Priority: state.P1,
		Payload: jsonenc.MustMarshal(map[string]any{"kind": "assistant_message", "text": text})},
		Text: text, TextField: "text", TruncatedField: "textTruncated"}
}

func enqueueCarrierTx(t testing.TB, s *state.Store, c bodyCarrier) bodyOutcome {
	t.Helper()
	var out bodyOutcome
	require.NoError(t, s.Update(func(tx *state.Tx) error {
		var err error
		out, err = enqueueBody(tx, c)
		return err
	}))
	return out
}

// storedBody is what the outbox holds, decoded: the chunk payloads in order,
// the carriers' outputBody references, and every event's type.
type storedBody struct {
	types    []string
	chunks   []outputbody.Chunk
	bodies   []outputbody.Ref
	payloads []map[string]json.RawMessage
}

func readBodyOutbox(t testing.TB, s *state.Store) storedBody {
	t.Helper()
	return readBodyOutboxFrom(t, s.Unacked())
}

func readBodyOutboxFrom(t testing.TB, events []state.OutboxEvent) storedBody {
	t.Helper()
	var out storedBody
	for _, e := range events {
		var env struct {
			Payload struct {
				Payload json.RawMessage `json:"payload"`
			} `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(e.Envelope, &env))
		out.types = append(out.types, e.EventType)
		var p map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(env.Payload.Payload, &p))
		out.payloads = append(out.payloads, p)
		if e.EventType == prp.EventOutputBodyChunk {
			require.Len(t, p, 5, "a chunk payload has exactly five keys")
			var c outputbody.Chunk
			require.NoError(t, json.Unmarshal(env.Payload.Payload, &c))
			out.chunks = append(out.chunks, c)
		}
		if raw, ok := p["outputBody"]; ok {
			var r outputbody.Ref
			require.NoError(t, json.Unmarshal(raw, &r))
			out.bodies = append(out.bodies, r)
		}
	}
	return out
}

// TestWorkspace32_RoomInStore: with runnerd's defaults a 40,000-byte message goes
// as its carrier without outputBody plus harness.diagnostic
// output_body_skipped; with the server's flags the body is present; a
// 4 MiB message (more than 128 events) is skipped under both.
func TestWorkspace32_RoomInStore(t *testing.T) {
	for _, f := range storeBodyFlags {
		t.Run(f.name, func(t *testing.T) {
			s := openBodyStore(t, f.maxOutbox, f.p0Res)
			out := enqueueCarrierTx(t, s, messageCarrier(strings.Repeat("m", 40_000)))
			got := readBodyOutbox(t, s)
			if f.maxOutbox < 1<<20 {
				require.Equal(t, bodySkipped, out)
				require.Equal(t, []string{prp.EventItemCompleted, prp.EventHarnessDiagnostic}, got.types)
				require.Contains(t, string(got.payloads[1]["code"]), codeBodySkipped)
				require.Empty(t, got.bodies)
				require.Equal(t, "true", string(got.payloads[0]["textTruncated"]))
			} else {
				require.Equal(t, bodyAttached, out)
				require.Equal(t, []string{prp.EventOutputBodyChunk, prp.EventOutputBodyChunk, prp.EventItemCompleted}, got.types)
				require.Len(t, got.bodies, 1)
			}

			s2 := openBodyStore(t, f.maxOutbox, f.p0Res)
			require.Equal(t, bodySkipped, enqueueCarrierTx(t, s2, messageCarrier(strings.Repeat("m", outputbody.MaxBodyBytes))))
			got = readBodyOutbox(t, s2)
			require.Equal(t, []string{prp.EventItemCompleted, prp.EventHarnessDiagnostic}, got.types)
		})
	}
}

// TestWorkspace33_StoredBytes: the chunks as storedBody in the outbox (before
// any ACK): each sha256 is that of its storedBody text, the storedBody texts
// concatenated hash to bodyId, the carrier references the same body, and
// a credential in the text is in no chunk.
func TestWorkspace33_StoredBytes(t *testing.T) {
	for _, f := range storeBodyFlags {
		t.Run(f.name, func(t *testing.T) {
			s := openBodyStore(t, f.maxOutbox, f.p0Res)
			text := strings.Repeat("a", 5000) + " ghp_" + strings.Repeat("Z", 36) + " end"
			require.Equal(t, bodyAttached, enqueueCarrierTx(t, s, messageCarrier(text)))
			got := readBodyOutbox(t, s)
			require.Len(t, got.bodies, 1)
			whole, err := outputbody.Assemble(got.bodies[0].BodyID, got.chunks)
			require.NoError(t, err)
			require.NotContains(t, whole, "ghp_")
			require.Equal(t, state.RedactSecrets(text), whole)
		})
	}
}

// TestEnqueueBodyInline: at or below the threshold, and on a v1 lease, the
// carrier goes as it was: no chunk, no outputBody.
func TestEnqueueBodyInline(t *testing.T) {
	s := openBodyStore(t, 16<<20, 1<<20)
	require.Equal(t, bodyInline, enqueueCarrierTx(t, s, messageCarrier(strings.Repeat("x", outputbody.Threshold))))
	got := readBodyOutbox(t, s)
	require.Equal(t, []string{prp.EventItemCompleted}, got.types)
	require.Empty(t, got.bodies)
	require.Equal(t, bodyAttached, enqueueCarrierTx(t, s, messageCarrier(strings.Repeat("x", outputbody.Threshold+1))))
}

// FuzzStoredBody: for any text, the body computed from the envelopes as
// storedBody in the outbox verifies (the server's assembly) and hashes to the
// carrier's reference, and every storedBody chunk is within bounds.
func FuzzStoredBody(f *testing.F) {
	f.Add(strings.Repeat("x", 4001))
	f.Add(strings.Repeat("\x00é\U0001F600", 3000))
	f.Add(strings.Repeat("Bearer abcdefghijk ", 300))
	f.Add(strings.Repeat("<&>\u2028\"\\", 2000) + "\xff\xfe")
	s := openBodyStore(f, 16<<20, 1<<20)
	f.Fuzz(func(t *testing.T, text string) {
		before := len(s.Unacked())
		out := enqueueCarrierTx(t, s, messageCarrier(text))
		all := s.Unacked()
		var got storedBody
		if len(all) > before {
			got = readBodyOutboxFrom(t, all[before:])
		}
		if out != bodyAttached {
			require.Empty(t, got.chunks)
			return
		}
		require.Len(t, got.bodies, 1)
		whole, err := outputbody.Assemble(got.bodies[0].BodyID, got.chunks)
		require.NoError(t, err)
		require.Equal(t, got.bodies[0].ByteLength, strconv.Itoa(len(whole)))
		for _, c := range got.chunks {
			require.NoError(t, outputbody.Check(c, nil))
			require.Equal(t, got.bodies[0], c.Body)
			require.LessOrEqual(t, len(jsonenc.MustMarshal(c.Text)), outputbody.MaxChunkJSONBytes)
		}
		_, err = s.ApplyAck(s.Summary().HighestSourceSeq, 2)
		require.NoError(t, err)
	})
}
