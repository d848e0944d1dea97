package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/outputbody"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// bodyFlags are the two outbox configurations every [bodies] scenario runs
// under (workspace.md §12): runnerd's defaults (64 KiB, 32 KiB reserve),
// where a body that does not fit goes as §7.6's fallback, and the
// server's (16 MiB, 1 MiB reserve).
var bodyFlags = []struct {
	name  string
	flags []string
	// room is the non-P0 room of an empty outbox.
	room int
}{
	{"runnerd-defaults", nil, 32 << 10},
	{"server-flags", []string{"--max-outbox-bytes", "16777216", "--p0-reserve-bytes", "1048576"}, 15 << 20},
}

// bigTurnWait bounds the wait for a turn of a 4 MiB message.
const bigTurnWait = time.Minute

// bodyEvent is a committed event with its payload decoded.
type bodyEvent struct {
	raw       json.RawMessage
	eventType string
	payload   map[string]json.RawMessage
}

func (e bodyEvent) str(key string) string {
	var s string
	_ = json.Unmarshal(e.payload[key], &s)
	return s
}

// bodyTurns prepares fakeacp, opens a session and plays each prompt as a
// turn, waiting for its run.terminal; it returns every event the core
// committed.
func bodyTurns(t *testing.T, h *harness, prompts ...string) []bodyEvent {
	t.Helper()
	h.prepareFake()
	require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
	// Scan each committed event once: a turn of megabytes commits many
	// large events, and decoding them all on every change costs more than
	// the turn.
	seen, terminals := 0, 0
	for i, p := range prompts {
		tb, err := json.Marshal(map[string]string{"text": p})
		require.NoError(t, err)
		require.Equal(t, "completed", h.waitResult(h.queue("turn.start", string(tb)).CommandID).Status)
		h.waitCore(func(s control.Snapshot) bool {
			for ; seen < len(s.Events); seen++ {
				if bytes.Contains(s.Events[seen], []byte(`"eventType":"run.terminal"`)) {
					terminals++
				}
			}
			return terminals == i+1
		})
	}
	var out []bodyEvent
	for _, raw := range h.core.Snapshot().Events {
		var env struct {
			Payload struct {
				EventType string                     `json:"eventType"`
				Payload   map[string]json.RawMessage `json:"payload"`
			} `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(raw, &env))
		out = append(out, bodyEvent{raw: raw, eventType: env.Payload.EventType, payload: env.Payload.Payload})
	}
	return out
}

// envelopePayload is the envelope's payload (what the event schemas
// validate).
func envelopePayload(t *testing.T, e bodyEvent) json.RawMessage {
	t.Helper()
	var env struct {
		Payload json.RawMessage `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(e.raw, &env))
	return env.Payload
}

// bodyOf is what the committed events say of the first carrier of
// carrierType: the chunks before it (since the previous carrier), its
// outputBody, and whether an output_body_skipped diagnostic followed it
// within its turn.
type bodyOf struct {
	carrier bodyEvent
	chunks  []outputbody.Chunk
	ref     *outputbody.Ref
	skipped bool
}

func findBody(t *testing.T, evs []bodyEvent, carrierType, kind string) bodyOf {
	t.Helper()
	var pending []outputbody.Chunk
	for i, e := range evs {
		switch {
		case e.eventType == prp.EventOutputBodyChunk:
			var c outputbody.Chunk
			raw, err := json.Marshal(e.payload)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(raw, &c))
			pending = append(pending, c)
		case e.eventType == carrierType && (kind == "" || e.str("kind") == kind):
			b := bodyOf{carrier: e, chunks: pending}
			if raw, ok := e.payload["outputBody"]; ok {
				b.ref = &outputbody.Ref{}
				require.NoError(t, json.Unmarshal(raw, b.ref))
			}
			for _, d := range evs[i+1:] {
				if d.eventType == prp.EventRunTerminal {
					break
				}
				if d.eventType == prp.EventHarnessDiagnostic && d.str("code") == codeBodySkipped {
					b.skipped = true
				}
			}
			return b
		}
	}
	t.Fatalf("no %s %s", carrierType, kind)
	return bodyOf{}
}

// requireBody checks a body arrived whole: each chunk passes the runner's
// own check and names the carrier's body, and the assembly the server
// does gives want.
func requireBody(t *testing.T, b bodyOf, want string) {
	t.Helper()
	require.NotNil(t, b.ref, "the carrier has outputBody")
	require.False(t, b.skipped)
	for _, c := range b.chunks {
		require.NoError(t, outputbody.Check(c, nil))
		require.Equal(t, *b.ref, c.Body, "the carrier references the chunks' body")
	}
	got, err := outputbody.Assemble(b.ref.BodyID, b.chunks)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// requireSkipped checks §7.6's fallback: the carrier without outputBody,
// its preview only, and harness.diagnostic output_body_skipped.
func requireSkipped(t *testing.T, b bodyOf) {
	t.Helper()
	require.Nil(t, b.ref)
	require.Empty(t, b.chunks)
	require.True(t, b.skipped, "harness.diagnostic output_body_skipped")
}

// TestWorkspace15_MessageBody: a message of 10,000 ASCII bytes → one chunk
// (offset "0") before the item.completed carrying outputBody, byteLength
// "10000", the body digest the chunk's; the chunk is valid against
// event-v2. It fits both outbox configurations. (durability.md §11
// scenario 22 is this one.)
func TestWorkspace15_MessageBody(t *testing.T) {
	schemas := prpschema.Load(t)
	for _, f := range bodyFlags {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.agentRun(f.flags...)
			evs := bodyTurns(t, h, "long 10000")
			b := findBody(t, evs, prp.EventItemCompleted, "assistant_message")
			require.Len(t, b.chunks, 1)
			require.Equal(t, "0", b.chunks[0].Offset)
			requireBody(t, b, strings.Repeat("0123456789", 1000))
			require.Equal(t, "10000", b.ref.ByteLength)
			require.Equal(t, b.chunks[0].SHA256, b.ref.SHA256)
			require.Equal(t, "true", string(b.carrier.payload["textTruncated"]))
			require.Len(t, b.carrier.str("text"), outputbody.Threshold, "the carrier keeps a preview")
			for _, e := range evs {
				if e.eventType == prp.EventOutputBodyChunk {
					require.NoError(t, prpschema.Validate(schemas.EventV2, envelopePayload(t, e)))
				}
			}
			require.NoError(t, prpschema.Validate(schemas.EventV1, envelopePayload(t, b.carrier)), "the carrier with outputBody")
		})
	}
}

// TestWorkspace16_EmojiAndToken: 100,000 bytes of 4-byte emoji and text
// with a ghp_ token across byte 32,766 → chunks on UTF-8 boundaries, each
// within 32,766 bytes and 32,768 as JSON, offsets contiguous, the token in
// no chunk, the concatenation hashing to bodyId (server flags; under the
// defaults 100 KB does not fit and the fallback applies).
func TestWorkspace16_EmojiAndToken(t *testing.T) {
	for _, f := range bodyFlags {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.agentRun(f.flags...)
			evs := bodyTurns(t, h, "long-emoji 100000")
			b := findBody(t, evs, prp.EventItemCompleted, "assistant_message")
			for _, e := range evs {
				require.NotContains(t, string(e.raw), "ghp_TTTT", "the token is in no event")
			}
			if f.room < 100_000 {
				requireSkipped(t, b)
				return
			}
			require.Greater(t, len(b.chunks), 3)
			whole, err := outputbody.Assemble(b.ref.BodyID, b.chunks)
			require.NoError(t, err)
			require.Contains(t, whole, "[REDACTED]")
			for _, c := range b.chunks {
				require.LessOrEqual(t, len(c.Text), outputbody.MaxChunkBytes)
				require.LessOrEqual(t, len(jsonenc.MustMarshal(c.Text)), outputbody.MaxChunkJSONBytes)
			}
		})
	}
}

// TestWorkspace17_ControlCharacters: a message of 40,000 NUL and control
// characters (6 bytes each as JSON) → chunks shrink until each text's JSON
// string is within 32,768 bytes, and the body reassembles exactly (server
// flags; under the defaults the ten chunks do not fit and the fallback
// applies).
func TestWorkspace17_ControlCharacters(t *testing.T) {
	for _, f := range bodyFlags {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.agentRun(f.flags...)
			evs := bodyTurns(t, h, "long-ctl 40000")
			b := findBody(t, evs, prp.EventItemCompleted, "assistant_message")
			if f.room < 6*40_000 {
				requireSkipped(t, b)
				return
			}
			requireBody(t, b, strings.Repeat("\x00\x01\x1f", 40_000/3+1)[:40_000])
			require.Greater(t, len(b.chunks), 7)
			for _, c := range b.chunks {
				require.LessOrEqual(t, len(jsonenc.MustMarshal(c.Text)), outputbody.MaxChunkJSONBytes)
			}
		})
	}
}

// TestWorkspace18_ToolOutputBody: a tool output of 5,000 bytes → chunks,
// then tool.execution.completed with outputBody and its output preview;
// outputBytes and outputDigest still describe the whole output.
func TestWorkspace18_ToolOutputBody(t *testing.T) {
	schemas := prpschema.Load(t)
	for _, f := range bodyFlags {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.agentRun(f.flags...)
			evs := bodyTurns(t, h, "tool-out 5000")
			b := findBody(t, evs, prp.EventToolExecutionCompleted, "")
			want := strings.Repeat("0123456789", 500)
			requireBody(t, b, want)
			require.Equal(t, want[:outputbody.Threshold], b.carrier.str("output"))
			require.Equal(t, "true", string(b.carrier.payload["outputTruncated"]))
			require.Equal(t, "5000", string(b.carrier.payload["outputBytes"]))
			require.NoError(t, prpschema.Validate(schemas.EventV1, envelopePayload(t, b.carrier)), "outputBody is in the toolExecution schema")
		})
	}
}

// TestWorkspace19_Threshold: a text of exactly 4,000 bytes has no body;
// 4,001 has one.
func TestWorkspace19_Threshold(t *testing.T) {
	for _, f := range bodyFlags {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.agentRun(f.flags...)
			evs := bodyTurns(t, h, "long 4000", "long 4001")
			var carriers []bodyEvent
			chunks := 0
			for _, e := range evs {
				if e.eventType == prp.EventItemCompleted && e.str("kind") == "assistant_message" {
					carriers = append(carriers, e)
				}
				if e.eventType == prp.EventOutputBodyChunk {
					require.Len(t, carriers, 1, "the chunk comes with the second message")
					chunks++
				}
			}
			require.Len(t, carriers, 2)
			require.NotContains(t, carriers[0].payload, "outputBody")
			require.Len(t, carriers[0].str("text"), 4000)
			require.Contains(t, carriers[1].payload, "outputBody")
			require.Equal(t, 1, chunks)
		})
	}
}

// TestWorkspace32_BodyRoom: with runnerd's defaults a 40,000-byte message
// goes as its carrier without outputBody plus harness.diagnostic
// output_body_skipped; with the server's flags the body is present; a
// 4 MiB message (more than 128 events) is skipped under both.
func TestWorkspace32_BodyRoom(t *testing.T) {
	for _, f := range bodyFlags {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(t, nil)
			// A 4 MiB message is some 16 durable writes of 256 KiB deltas
			// and a 4 MiB agent record: a bound for slow (-race) runs.
			h.core.WaitBound = bigTurnWait
			h.agentRun(f.flags...)
			evs := bodyTurns(t, h, "long 40000", "long 4194304")
			first := findBody(t, evs, prp.EventItemCompleted, "assistant_message")
			if f.room < 40_000 {
				requireSkipped(t, first)
			} else {
				requireBody(t, first, strings.Repeat("0123456789", 4000))
			}
			var last []bodyEvent
			for i, e := range evs {
				if e.eventType == prp.EventItemCompleted && e.str("kind") == "assistant_message" {
					last = evs[i:]
				}
			}
			require.NotNil(t, last)
			requireSkipped(t, findBody(t, last, prp.EventItemCompleted, "assistant_message"))
		})
	}
}

// TestWorkspace20_V1LeaseNoBodies: on a PRP v1 lease a 10,000-byte message
// has no output.body.chunk (not even downgraded) and no outputBody: the
// item.completed carries the text inline as before. The same run on v2
// has bodies (TestWorkspace15_MessageBody).
func TestWorkspace20_V1LeaseNoBodies(t *testing.T) {
	for _, f := range bodyFlags {
		t.Run(f.name, func(t *testing.T) {
			core, tr := newVersionCore(t)
			core.maxVersion = 1
			prov, err := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
				"command": fakeacpBin(t), "cwd": t.TempDir()}})
			require.NoError(t, err)
			for i, c := range []struct{ typ, payload string }{
				{"run.prepare", string(prov)},
				{"session.open", `{}`},
				{"turn.start", `{"text":"long 10000"}`},
			} {
				core.commands = append(core.commands, rawCommand(t, prp.Command{Schema: prp.CommandSchemaV1, CommandID: cmdID(i + 1),
					ControllerSeq: uint64(i + 1), Type: c.typ, IssuedAt: fixedIssuedAt, Payload: json.RawMessage(c.payload)}))
			}
			h := &harness{t: t, stateDir: filepath.Join(t.TempDir(), "state"), connectURL: "ws://127.0.0.1:1" + prp.ConnectPath(testIdentity.RunID)}
			cfg := h.config(false, append([]string{"--pcwrap-path", testbin.Path(t, "pcwrap")}, f.flags...)...)
			tok, err := core.store.IssueTicket(time.Minute, time.Now())
			require.NoError(t, err)
			ticket, err := config.NewBootstrapTicket(tok)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			r := &running{cancel: cancel, done: make(chan error, 1)}
			go func() { r.done <- runLoop(ctx, cfg, ticket, testLogger(), options{Transport: tr}) }()
			terminal := func() bool {
				for _, raw := range core.events {
					if strings.Contains(string(raw), `"eventType":"run.terminal"`) {
						return true
					}
				}
				return false
			}
			core.wait(func() bool { return len(core.results) == len(core.commands) && terminal() })
			r.cancel()
			require.NoError(t, r.wait(t))

			core.mu.Lock()
			defer core.mu.Unlock()
			found := false
			for _, raw := range core.events {
				s := string(raw)
				require.NotContains(t, s, prp.EventOutputBodyChunk)
				require.NotContains(t, s, "outputBody")
				if strings.Contains(s, `"eventType":"item.completed"`) && strings.Contains(s, `"kind":"assistant_message"`) {
					require.Contains(t, s, strings.Repeat("0123456789", 1000), "the whole text inline")
					found = true
				}
			}
			require.True(t, found)
		})
	}
}
