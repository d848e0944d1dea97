package agent

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/acpx"
)

// TestRealAgentHandshake is a handshake-only check of the real adapters
// (acp.md §9 T3) through pcwrap, for each one installed on PATH; it skips
// cleanly for the others. Without credentials session/new may refuse:
// authentication_required or acp_session_init_failed still prove the ACP
// handshake ran; a timeout or a spawn failure does not.
func TestRealAgentHandshake(t *testing.T) {
	for _, agentName := range []string{"claude", "codex", "pi", "opencode"} {
		t.Run(agentName, func(t *testing.T) {
			argv, _ := acpx.AgentCommand(agentName)
			if _, err := exec.LookPath(argv[0]); err != nil {
				t.Skipf("%s not installed; handshake check skipped", argv[0])
			}
			r := newRig(t, func(c *Config) { c.ColdBound = func(a string) time.Duration { return acpx.OpenBound(a, false) } })
			b, _ := json.Marshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": agentName, "cwd": t.TempDir()}})
			_, err := r.m.Prepare(b)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 2*acpx.ColdOpenBoundSlow)
			defer cancel()
			_, err = r.m.Open(ctx, "cmd-open")
			if err != nil {
				var ce *CommandError
				require.ErrorAs(t, err, &ce)
				require.Contains(t, []string{string(acpx.ClassAuthenticationRequired), string(acpx.ClassACPSessionInitFailed)}, ce.Code,
					"%s did not complete the ACP handshake: %s", argv[0], ce.Message)
			}
		})
	}
}
