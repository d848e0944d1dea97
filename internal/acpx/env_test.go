package acpx

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
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
	require.ElementsMatch(t, []string{"sk-ant-secret-123456", "http://user:pw123456@proxy:3128",
		"user:pw123456", "pw123456"}, secrets)

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
	r := provider.NewRedactor(secrets...)
	require.Equal(t, "key="+redacted, r.String("key=pi-secret-value"))
}

// gatewayEnviron is an operator's environment with every gateway, proxy
// and config variable set, plus secret-looking variables that are on no
// list.
var gatewayEnviron = []string{
	"PATH=/usr/bin", "HOME=/home/a",
	"ANTHROPIC_BASE_URL=http://127.0.0.1:9/anthropic", "ANTHROPIC_API_KEY=ant-key-0123456789", "ANTHROPIC_AUTH_TOKEN=ant-token-0123456789",
	"OPENAI_BASE_URL=http://127.0.0.1:9/v1", "OPENAI_API_KEY=oai-key-0123456789",
	"GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:9", "GEMINI_API_KEY=gem-key-0123456789", "GOOGLE_API_KEY=goog-key-0123456789",
	"HTTPS_PROXY=http://bob:hunter2secret@proxy:3128", "HTTP_PROXY=http://proxy:3128", "NO_PROXY=127.0.0.1,localhost",
	"https_proxy=http://bob:hunter2secret@proxy:3128", "http_proxy=http://proxy:3128", "no_proxy=127.0.0.1",
	"NODE_EXTRA_CA_CERTS=/etc/ca.pem",
	"OPENCODE_CONFIG=/cfg/opencode.json", "OPENCODE_CONFIG_DIR=/cfg", `OPENCODE_CONFIG_CONTENT={"autoupdate":false}`,
	"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
	"OPENCODE_DISABLE_MODELS_FETCH=1",
	"OPENCODE_SERVER_PASSWORD=server-password-0123", "OPENCODE_SERVER_USERNAME=opencode",
	"MY_SECRET_TOKEN=my-secret-0123456789", "AWS_SECRET_ACCESS_KEY=aws-secret-0123456789", "CLAUDECODE=1",
}

func envNames(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		out = append(out, k)
	}
	return out
}

var proxyNames = []string{"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy", "NODE_EXTRA_CA_CERTS"}

// TestAgentEnvGatewayVariables: each agent gets its model gateway's base
// URL, its keys, the proxies and its config switches, by exact name (issue
// 13 item 5), and nothing else.
func TestAgentEnvGatewayVariables(t *testing.T) {
	want := map[string][]string{
		"claude": {"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"},
		"codex":  {"OPENAI_BASE_URL", "OPENAI_API_KEY"},
		"gemini": {"GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY"},
		"opencode": {"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY",
			"GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENCODE_CONFIG", "OPENCODE_CONFIG_DIR", "OPENCODE_CONFIG_CONTENT",
			"OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_DISABLE_LSP_DOWNLOAD", "OPENCODE_DISABLE_DEFAULT_PLUGINS",
			"OPENCODE_DISABLE_MODELS_FETCH"},
		"unknown": nil,
	}
	for agent, names := range want {
		env, _ := AgentEnv(agent, gatewayEnviron)
		require.ElementsMatch(t, append(append([]string{"PATH", "HOME"}, proxyNames...), names...), envNames(env), agent)
	}
}

// TestAgentEnvSecretLookingNeverPasses: a secret-looking variable on no
// list, and OPENCODE_SERVER_PASSWORD even when Pi's binding names it,
// never reach any agent.
func TestAgentEnvSecretLookingNeverPasses(t *testing.T) {
	environ := append(gatewayEnviron[:len(gatewayEnviron):len(gatewayEnviron)],
		"PAPERCLIP_ACPX_CREDENTIAL_BINDING=PI_KEY,OPENCODE_SERVER_PASSWORD,CLAUDECODE", "PI_KEY=pi-key-0123456789")
	for _, agent := range []string{"claude", "codex", "gemini", "opencode", "pi", "grok", "cursor", "copilot", "", "unknown"} {
		env, secrets := AgentEnv(agent, environ)
		names := envNames(env)
		for _, never := range []string{"MY_SECRET_TOKEN", "AWS_SECRET_ACCESS_KEY", "OPENCODE_SERVER_PASSWORD",
			"OPENCODE_SERVER_USERNAME", "CLAUDECODE", "PAPERCLIP_ACPX_CREDENTIAL_BINDING"} {
			require.NotContains(t, names, never, agent)
		}
		for _, kv := range env {
			require.NotContains(t, kv, "server-password", agent)
		}
		require.NotContains(t, secrets, "server-password-0123", agent)
	}
	env, _ := AgentEnv("pi", environ)
	require.Contains(t, env, "PI_KEY=pi-key-0123456789")
}

// TestAgentEnvProxyUserinfoRedacted: a proxy URL's userinfo is scrubbed
// however the agent prints it: the whole URL, user:password, the password
// alone, or the password percent-decoded.
func TestAgentEnvProxyUserinfoRedacted(t *testing.T) {
	_, secrets := AgentEnv("claude", []string{
		"HTTPS_PROXY=http://bob:hunter2secret@proxy:3128",
		"ANTHROPIC_BASE_URL=https://gw:p%40ss-w0rd-long@gateway.example/v1",
		"HOME=/home/x@y", // not a URL variable: never treated as one
	})
	r := provider.NewRedactor(secrets...)
	for _, leak := range []string{
		"proxy http://bob:hunter2secret@proxy:3128/ refused",
		"auth bob:hunter2secret",
		`{"password":"hunter2secret"}`,
		"gateway https://gw:p%40ss-w0rd-long@gateway.example/v1",
		"password p@ss-w0rd-long",
		"password p%40ss-w0rd-long",
	} {
		out := r.String(leak)
		require.NotContains(t, out, "hunter2secret")
		require.NotContains(t, out, "ss-w0rd-long")
	}
	require.NotContains(t, secrets, "/home/x@y")
	_, secrets = AgentEnv("claude", []string{"HTTPS_PROXY=http://proxy:3128", "NO_PROXY=localhost"})
	require.Empty(t, secrets, "a proxy without userinfo is no secret")
}
