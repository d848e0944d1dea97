package acpx

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAgentEnvAllowlist(t *testing.T) {
	environ := []string{
		"PATH=/usr/bin", "HOME=/home/a", "LC_ALL=C", "SSL_CERT_FILE=/ca.pem", "CLAUDECODE=1",
		"ANTHROPIC_API_KEY=sk-ant-secret-123456", "OPENAI_API_KEY=sk-openai-secret-1234",
		"HTTPS_PROXY=http://user:pw123456@proxy:3128", "PAPERCLIP_BOOTSTRAP_TICKET=ticket-secret",
		"PAPERCLIP_ACPX_CREDENTIAL_BINDING=PI_KEY, OTHER_KEY", "PI_KEY=pi-secret-value", "BROKEN",
	}
	env, secrets := AgentEnv("claude", environ)
	require.Equal(t, []string{"PATH=/usr/bin", "HOME=/home/a", "LC_ALL=C", "SSL_CERT_FILE=/ca.pem",
		"ANTHROPIC_API_KEY=sk-ant-secret-123456", "HTTPS_PROXY=http://user:pw123456@proxy:3128"}, env)
	require.ElementsMatch(t, []string{"sk-ant-secret-123456", "http://user:pw123456@proxy:3128"}, secrets)

	env, secrets = AgentEnv("codex", environ)
	require.Contains(t, env, "OPENAI_API_KEY=sk-openai-secret-1234")
	require.NotContains(t, env, "ANTHROPIC_API_KEY=sk-ant-secret-123456", "another agent's key never passes")
	require.Contains(t, secrets, "sk-openai-secret-1234")

	env, secrets = AgentEnv("pi", environ)
	require.Contains(t, env, "PI_KEY=pi-secret-value")
	require.Contains(t, secrets, "pi-secret-value")

	env, _ = AgentEnv("unknown", environ)
	for _, kv := range env {
		require.NotContains(t, kv, "TICKET")
		require.NotContains(t, kv, "CLAUDECODE")
	}
	r := NewRedactor(secrets...)
	require.Equal(t, "key="+redacted, r.String("key=pi-secret-value"))
}
