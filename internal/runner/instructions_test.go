package runner

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// TestTools08_InstructionsUnsupportedDiagnostic: a run with instructions
// whose agent is known to drop _meta.systemPrompt (Pi, found with the real
// agent in test/realagents) gets harness.diagnostic
// {code: "instructions_unsupported"} at session.open; Claude, which honours
// it, and a run without instructions get none (tools.md §5).
func TestTools08_InstructionsUnsupportedDiagnostic(t *testing.T) {
	schemas := prpschema.Load(t)
	for _, c := range []struct {
		name, agent  string
		instructions bool
		want         int
	}{
		{"pi with instructions", "pi", true, 1},
		{"pi without", "pi", false, 0},
		{"claude with instructions", "claude", true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.agentRun()
			extra := map[string]any{"agent": c.agent}
			if c.instructions {
				extra["instructions"] = "Work on the task."
			}
			res := h.prepareDesc(nil, extra)
			require.Equal(t, "completed", res.Status, string(res.Result))
			require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
			// A turn after the open: events arrive in order, so by its
			// run.terminal any diagnostic of the open is at the core.
			evs := h.runTurn("echo hi", 1)
			n := 0
			for _, e := range prptest.OfType(evs, "harness.diagnostic") {
				var p map[string]any
				require.NoError(t, json.Unmarshal(e.Payload, &p))
				if p["code"] == "instructions_unsupported" {
					n++
				}
			}
			require.Equal(t, c.want, n)
			for _, raw := range h.core.Snapshot().Events {
				var env struct {
					Payload json.RawMessage `json:"payload"`
				}
				require.NoError(t, json.Unmarshal(raw, &env))
				require.NoError(t, prpschema.Validate(schemas.EventV1, env.Payload), "event %s", env.Payload)
			}
		})
	}
}
