package runner

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/acpx"
)

// TestHelpListsAgentEnvironment: --help's AGENT ENVIRONMENT section names
// every variable the allowlist passes and every one it never passes, so
// the documentation cannot fall behind the code.
func TestHelpListsAgentEnvironment(t *testing.T) {
	_, sec, ok := strings.Cut(Help, "\nAGENT ENVIRONMENT\n")
	require.True(t, ok, "no AGENT ENVIRONMENT section in Help")
	sec, _, _ = strings.Cut(sec, "\n\n")
	perAgent, never := acpx.EnvAllowlist()
	for agent, names := range perAgent {
		for _, n := range names {
			require.Regexp(t, `\b`+regexp.QuoteMeta(n)+`\b`, sec, "agent %q", agent)
		}
		if agent != "" {
			require.Contains(t, sec, agent+":")
		}
	}
	_, nev, ok := strings.Cut(sec, "Never:")
	require.True(t, ok)
	for _, n := range never {
		require.Contains(t, nev, n)
	}
}
