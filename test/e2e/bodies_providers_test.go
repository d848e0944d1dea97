package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/outputbody"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// TestBodiesCodexAndOpenCode: a long answer from Codex's app-server
// (item/agentMessage/delta) and from OpenCode's server (text parts) travels
// as output.body.chunk events before the item.completed carrying
// outputBody, as an ACP agent's does (workspace.md §7.2: "Codex and
// OpenCode text alike"); the body the core assembles is the whole answer,
// and every event is valid against the reference schema of its version.
// It runs with the server's outbox flags: OpenCode's events arrive beside
// pcwrap's files, not gated on ACKs, so under runnerd's defaults its
// deltas may fill the room and the body falls back as §7.6 allows
// (TestWorkspace32_BodyRoom covers the fallback).
func TestBodiesCodexAndOpenCode(t *testing.T) {
	serverFlags := []string{"--max-outbox-bytes", "16777216", "--p0-reserve-bytes", "1048576"}
	var codexText strings.Builder
	for k := range 3000 {
		codexText.WriteString(strconv.Itoa(k) + ",")
	}
	// OpenCode's answer: 50 words of 100 bytes, one delta each, so the
	// turn is 50 durable writes rather than a thousand (which a loaded
	// disk stretches past the test's wait).
	ocWords := make([]string, 50)
	for i := range ocWords {
		ocWords[i] = fmt.Sprintf("w%02d", i) + strings.Repeat("o", 97)
	}
	for _, tc := range []struct {
		name    string
		flags   []string
		prepare func(r *agentRig)
		prompt  string
		want    string
	}{
		{"codex", serverFlags, func(r *agentRig) { r.prepareCodex(t) }, "chunks 3000", codexText.String()},
		{"opencode", append([]string{"--opencode-executable", testbin.Build(t, "test/fakeopencode")}, serverFlags...), func(r *agentRig) {
			r.prepareDescriptor(t, map[string]any{"kind": "opencode", "provider": "opencode", "driver": "opencode_server",
				"providerVersion": "opencode-server-v1", "command": "node", "args": []string{"opencode-app-server-proxy.js"},
				"cwd": t.TempDir(), "approvalPolicy": "never", "model": "fake/fake-model"})
		}, "FAKEOC: text " + strings.Join(ocWords, " "), strings.Join(ocWords, " ")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newAgentRig(t, tc.flags...)
			r.start(t)
			tc.prepare(r)
			r.open(t)
			res := r.run(t, "turn.start", map[string]any{"text": tc.prompt})
			require.Equal(t, "completed", res.Status, string(res.Result))
			evs := r.waitEvents(t, "run.terminal", 1)
			var chunks []outputbody.Chunk
			var ref *outputbody.Ref
			for _, e := range evs {
				switch e.EventType {
				case prp.EventOutputBodyChunk:
					var c outputbody.Chunk
					require.NoError(t, json.Unmarshal(e.Payload, &c))
					chunks = append(chunks, c)
				case prp.EventItemCompleted:
					var p struct {
						OutputBody *outputbody.Ref `json:"outputBody"`
					}
					require.NoError(t, json.Unmarshal(e.Payload, &p))
					if p.OutputBody != nil {
						require.NotEmpty(t, chunks, "the chunks come first")
						ref = p.OutputBody
					}
				}
			}
			require.NotNil(t, ref, "an item.completed carries outputBody")
			got, err := outputbody.Assemble(ref.BodyID, chunks)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			requireContiguous(t, evs)
			schemas := prpschema.Load(t)
			for i, raw := range r.c.core.Snapshot().Events {
				var env struct {
					Payload json.RawMessage `json:"payload"`
				}
				require.NoError(t, json.Unmarshal(raw, &env))
				require.NoError(t, prpschema.Validate(schemas.Event(env.Payload), env.Payload), "event %d", i)
			}
		})
	}
}
