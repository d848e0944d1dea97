package runner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// TestTools12_ClientFSThroughRunnerd: runnerd end to end with fakeacp
// reading and writing through the client on every prompt (--read-file,
// --write-file): the read file's content and the write's acknowledgement
// reach the core as the agent's message, a read out of cwd is refused,
// the written file is on disk, and runner-state.json records the
// advertised fs capability; every event (the read and edit tool calls
// among them) validates against the reference schema (tools.md §8, §9
// scenario 12).
func TestTools12_ClientFSThroughRunnerd(t *testing.T) {
	h := newHarness(t, nil)
	run := h.agentRun()
	cwd := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(cwd, "notes.txt"), []byte("line one\nline two\n"), 0o644))
	b, err := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
		"command": fakeacpBin(t), "cwd": cwd, "args": []string{
			"--read-file", filepath.Join(cwd, "notes.txt"),
			"--write-file", filepath.Join(cwd, "made", "by-agent.txt"), "--write-content", "written through runnerd",
		}}})
	require.NoError(t, err)
	require.Equal(t, "completed", h.waitResult(h.queue("run.prepare", string(b)).CommandID).Status)
	require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
	for i, text := range []string{"echo done", "read /etc/passwd"} {
		tb, _ := json.Marshal(map[string]string{"text": text})
		require.Equal(t, "completed", h.waitResult(h.queue("turn.start", string(tb)).CommandID).Status)
		h.waitCore(func(s control.Snapshot) bool {
			return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "run.terminal")) == i+1
		})
	}
	text := map[string]string{}
	for _, e := range prptest.OfType(prptest.DecodeEvents(t, h.core.Snapshot().Events), "item.delta") {
		var p struct {
			Turn string `json:"providerTurnId"`
			Kind string `json:"kind"`
			Text string `json:"text"`
		}
		require.NoError(t, json.Unmarshal(e.Payload, &p))
		if p.Kind == "assistant_message" {
			text[p.Turn] += p.Text
		}
	}
	require.Equal(t, "read "+cwd+"/notes.txt: line one\nline two\n\nwrote "+cwd+"/made/by-agent.txt\ndone", text["pturn-1"])
	require.True(t, strings.HasSuffix(text["pturn-2"], "read /etc/passwd failed -32602: read text file: \"/etc/passwd\": outside the session's directories\n"), text["pturn-2"])
	schemas := prpschema.Load(t)
	for _, raw := range h.core.Snapshot().Events {
		var env struct {
			Payload json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(raw, &env))
		require.NoError(t, prpschema.Validate(schemas.EventV1, env.Payload), "event %s", env.Payload)
	}
	got, err := os.ReadFile(filepath.Join(cwd, "made", "by-agent.txt"))
	require.NoError(t, err)
	require.Equal(t, "written through runnerd", string(got))

	run.cancel()
	require.NoError(t, run.wait(t))
	var rec map[string]any
	ok, err := h.readState().Record(agentRecord, &rec)
	require.NoError(t, err)
	require.True(t, ok)
	raw, _ := json.Marshal(rec)
	require.Contains(t, string(raw), `"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true}`)
}
