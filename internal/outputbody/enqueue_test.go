package outputbody

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit)) }

var testIdentity = prp.Identity{
	RunnerInstanceID: "runner_1", EnvironmentLeaseID: "env_lease_1", RunID: "run_1",
	NormalizedSessionID: "session_1", TurnID: "turn_1", ItemID: "item_1",
}

// outboxFlags are runnerd's default outbox bounds and the server's
// (workspace.md §12: every [bodies] scenario runs under both).
var outboxFlags = []struct {
	name             string
	maxOutbox, p0Res int
}{
	{"runnerd-defaults", 64 << 10, 32 << 10},
	{"server-flags", 16 << 20, 1 << 20},
}

func openStore(t testing.TB, maxOutbox, p0Reserve int) *state.Store {
	t.Helper()
	s, err := state.Open(state.Config{Dir: filepath.Join(t.TempDir(), "state"), Identity: testIdentity,
		MaxOutboxBytes: maxOutbox, P0ReserveBytes: p0Reserve})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// messageCarrier is item.completed of an assistant message of text.
func messageCarrier(text string) Carrier {
	return Carrier{Event: state.Event{Type: prp.EventItemCompleted, Priority: state.P1,
		Payload: jsonenc.MustMarshal(map[string]any{"kind": "assistant_message", "text": text})},
		Text: text, TextField: "text", TruncatedField: "textTruncated"}
}

func enqueueCarrier(t testing.TB, s *state.Store, c Carrier) Outcome {
	t.Helper()
	var out Outcome
	require.NoError(t, s.Update(func(tx *state.Tx) error {
		var err error
		out, err = Enqueue(tx, c)
		return err
	}))
	return out
}

// stored is what the outbox holds, decoded: the chunk payloads in order,
// the carriers' outputBody references, and every event's type.
type stored struct {
	types    []string
	chunks   []Chunk
	bodies   []Ref
	payloads []map[string]json.RawMessage
}

func readOutbox(t testing.TB, s *state.Store) stored {
	t.Helper()
	return readOutboxFrom(t, s.Unacked())
}

func readOutboxFrom(t testing.TB, events []state.OutboxEvent) stored {
	t.Helper()
	var out stored
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
			var c Chunk
			require.NoError(t, json.Unmarshal(env.Payload.Payload, &c))
			out.chunks = append(out.chunks, c)
		}
		if raw, ok := p["outputBody"]; ok {
			var r Ref
			require.NoError(t, json.Unmarshal(raw, &r))
			out.bodies = append(out.bodies, r)
		}
	}
	return out
}

// TestWorkspace32_Room: with runnerd's defaults a 40,000-byte message goes
// as its carrier without outputBody plus harness.diagnostic
// output_body_skipped; with the server's flags the body is present; a
// 4 MiB message (more than 128 events) is skipped under both.
func TestWorkspace32_Room(t *testing.T) {
	for _, f := range outboxFlags {
		t.Run(f.name, func(t *testing.T) {
			s := openStore(t, f.maxOutbox, f.p0Res)
			out := enqueueCarrier(t, s, messageCarrier(strings.Repeat("m", 40_000)))
			got := readOutbox(t, s)
			if f.maxOutbox < 1<<20 {
				require.Equal(t, Skipped, out)
				require.Equal(t, []string{prp.EventItemCompleted, prp.EventHarnessDiagnostic}, got.types)
				require.Contains(t, string(got.payloads[1]["code"]), CodeSkipped)
				require.Empty(t, got.bodies)
				require.Equal(t, "true", string(got.payloads[0]["textTruncated"]))
			} else {
				require.Equal(t, Attached, out)
				require.Equal(t, []string{prp.EventOutputBodyChunk, prp.EventOutputBodyChunk, prp.EventItemCompleted}, got.types)
				require.Len(t, got.bodies, 1)
			}

			s2 := openStore(t, f.maxOutbox, f.p0Res)
			require.Equal(t, Skipped, enqueueCarrier(t, s2, messageCarrier(strings.Repeat("m", MaxBodyBytes))))
			got = readOutbox(t, s2)
			require.Equal(t, []string{prp.EventItemCompleted, prp.EventHarnessDiagnostic}, got.types)
		})
	}
}

// TestWorkspace33_StoredBytes: the chunks as stored in the outbox (before
// any ACK): each sha256 is that of its stored text, the stored texts
// concatenated hash to bodyId, the carrier references the same body, and
// a credential in the text is in no chunk.
func TestWorkspace33_StoredBytes(t *testing.T) {
	for _, f := range outboxFlags {
		t.Run(f.name, func(t *testing.T) {
			s := openStore(t, f.maxOutbox, f.p0Res)
			text := strings.Repeat("a", 5000) + " ghp_" + strings.Repeat("Z", 36) + " end"
			require.Equal(t, Attached, enqueueCarrier(t, s, messageCarrier(text)))
			got := readOutbox(t, s)
			require.Len(t, got.bodies, 1)
			whole, err := Assemble(got.bodies[0], got.chunks)
			require.NoError(t, err)
			require.NotContains(t, whole, "ghp_")
			require.Equal(t, state.RedactSecrets(text), whole)
		})
	}
}

// TestEnqueueInline: at or below the threshold, and on a v1 lease, the
// carrier goes as it was: no chunk, no outputBody.
func TestEnqueueInline(t *testing.T) {
	s := openStore(t, 16<<20, 1<<20)
	require.Equal(t, Inline, enqueueCarrier(t, s, messageCarrier(strings.Repeat("x", Threshold))))
	got := readOutbox(t, s)
	require.Equal(t, []string{prp.EventItemCompleted}, got.types)
	require.Empty(t, got.bodies)
	require.Equal(t, Attached, enqueueCarrier(t, s, messageCarrier(strings.Repeat("x", Threshold+1))))
}

// FuzzStoredBody: for any text, the body computed from the envelopes as
// stored in the outbox verifies (the server's assembly) and hashes to the
// carrier's reference, and every stored chunk is within bounds.
func FuzzStoredBody(f *testing.F) {
	f.Add(strings.Repeat("x", 4001))
	f.Add(strings.Repeat("\x00é\U0001F600", 3000))
	f.Add(strings.Repeat("Bearer abcdefghijk ", 300))
	f.Add(strings.Repeat("<&>\u2028\"\\", 2000) + "\xff\xfe")
	s := openStore(f, 16<<20, 1<<20)
	f.Fuzz(func(t *testing.T, text string) {
		before := len(s.Unacked())
		out := enqueueCarrier(t, s, messageCarrier(text))
		all := s.Unacked()
		var got stored
		if len(all) > before {
			got = readOutboxFrom(t, all[before:])
		}
		if out != Attached {
			require.Empty(t, got.chunks)
			return
		}
		require.Len(t, got.bodies, 1)
		whole, err := Assemble(got.bodies[0], got.chunks)
		require.NoError(t, err)
		require.Equal(t, got.bodies[0].ByteLength, strconv.Itoa(len(whole)))
		for _, c := range got.chunks {
			require.NoError(t, Admit(c))
			require.LessOrEqual(t, len(jsonenc.MustMarshal(c.Text)), MaxChunkJSONBytes)
		}
		_, err = s.ApplyAck(s.Summary().HighestSourceSeq, 2)
		require.NoError(t, err)
	})
}
