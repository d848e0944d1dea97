package agent

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAgentEnvThroughPcwrap: through pcwrap, the agent's process sees its
// gateway, proxy and config variables and none of the
// secret-looking variables on no list, nor OPENCODE_SERVER_PASSWORD.
func TestAgentEnvThroughPcwrap(t *testing.T) {
	pass := []string{
		"OPENAI_BASE_URL=http://127.0.0.1:9/v1", "OPENAI_API_KEY=oai-key-0123456789",
		"OPENCODE_CONFIG_CONTENT={}", "OPENCODE_DISABLE_AUTOUPDATE=1",
		"HTTPS_PROXY=http://bob:hunter2secret@127.0.0.1:9", "NO_PROXY=127.0.0.1", "NODE_EXTRA_CA_CERTS=/etc/ca.pem",
	}
	never := []string{
		"MY_SECRET_TOKEN=my-secret-0123456789", "AWS_SECRET_ACCESS_KEY=aws-secret-0123456789",
		"OPENCODE_SERVER_PASSWORD=server-password-0123",
	}
	r := newRig(t, func(c *Config) { c.Environ = append(append(c.Environ, pass...), never...) })
	r.prepareAs("opencode")
	r.open()
	b, err := os.ReadFile("/proc/" + itoa(agentPgid(t, r.sessionDir())) + "/environ")
	require.NoError(t, err)
	env := strings.Split(string(b), "\x00")
	for _, kv := range pass {
		require.Contains(t, env, kv)
	}
	for _, kv := range never {
		name, _, _ := strings.Cut(kv, "=")
		require.NotContains(t, string(b), name)
	}
}
