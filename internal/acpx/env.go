package acpx

import (
	"slices"
	"strings"
)

// commonEnv passes to every agent (acp.md §2.2); LC_* and SSL_CERT_* are
// prefixes.
var commonEnv = []string{
	"PATH", "HOME", "LANG", "TZ", "NODE_EXTRA_CA_CERTS", "RUST_BACKTRACE",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
}

var commonEnvPrefixes = []string{"LC_", "SSL_CERT_"}

// agentCredentialEnv are the credential variables each agent may see
// (acp.md §2.2). Their values are secrets: scrubbed from every payload,
// log and stderr tail.
var agentCredentialEnv = map[string][]string{
	"claude":  {"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN", "AWS_BEARER_TOKEN_BEDROCK"},
	"codex":   {"OPENAI_API_KEY", "CODEX_API_KEY", "PAPERCLIP_AI_PROVIDER_KEY"},
	"grok":    {"XAI_API_KEY"},
	"cursor":  {"CURSOR_API_KEY"},
	"copilot": {"COPILOT_GITHUB_TOKEN"},
}

// piCredentialBinding names the variable listing Pi's credential variables
// (comma or space separated).
const piCredentialBinding = "PAPERCLIP_ACPX_CREDENTIAL_BINDING"

// neverPass are refused even when listed: a nested Claude refuses to start
// with CLAUDECODE set.
var neverPass = []string{"CLAUDECODE"}

// AgentEnv builds the agent's environment from environ (KEY=VALUE
// entries): cleared, then the common allowlist plus the agent's own
// credential variables. It returns the env and the secret values to hand to
// NewRedactor. Env values never enter the record or a log.
func AgentEnv(agent string, environ []string) (env, secrets []string) {
	vars := map[string]string{}
	var order []string
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if _, seen := vars[k]; !seen {
			order = append(order, k)
		}
		vars[k] = v
	}
	creds := append([]string(nil), agentCredentialEnv[agent]...)
	if agent == "pi" {
		creds = append(creds, strings.FieldsFunc(vars[piCredentialBinding], func(r rune) bool { return r == ',' || r == ' ' })...)
	}
	for _, k := range order {
		v := vars[k]
		switch {
		case slices.Contains(neverPass, k):
			continue
		case slices.Contains(creds, k):
			env = append(env, k+"="+v)
			secrets = append(secrets, v)
		case slices.Contains(commonEnv, k) || hasAnyPrefix(k, commonEnvPrefixes):
			env = append(env, k+"="+v)
			if strings.Contains(v, "@") && strings.Contains(strings.ToLower(k), "proxy") {
				secrets = append(secrets, v) // a proxy URL may carry user:password
			}
		}
	}
	return env, secrets
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
