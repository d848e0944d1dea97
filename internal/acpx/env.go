package acpx

import (
	"net/url"
	"slices"
	"strings"
)

// commonEnv passes to every agent (acp.md §2.2); LC_* and SSL_CERT_* are
// prefixes. Every other name is exact: a wildcard such as OPENCODE_* would
// let OPENCODE_SERVER_PASSWORD through. TMPDIR goes beyond §2.2's list: a
// sandbox (or a test) that points it somewhere keeps the agent's scratch
// files there, not in a shared /tmp.
var commonEnv = []string{
	"PATH", "HOME", "LANG", "TZ", "TMPDIR", "NODE_EXTRA_CA_CERTS", "RUST_BACKTRACE",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
}

var commonEnvPrefixes = []string{"LC_", "SSL_CERT_"}

// agentConfigEnv are the non-credential variables each agent may see: the
// model gateway's base URL and the agent's own config switches (the names are the ones the agents read: Claude Code and the
// Anthropic SDK ANTHROPIC_BASE_URL, the OpenAI SDK OPENAI_BASE_URL, Gemini
// CLI GOOGLE_GEMINI_BASE_URL, OpenCode its documented OPENCODE_CONFIG* and
// OPENCODE_DISABLE_* switches). OpenCode talks to any provider, so it gets
// the Anthropic and OpenAI base URLs too.
var agentConfigEnv = map[string][]string{
	"claude": {"ANTHROPIC_BASE_URL"},
	"codex":  {"OPENAI_BASE_URL"},
	"gemini": {"GOOGLE_GEMINI_BASE_URL"},
	"opencode": {
		"ANTHROPIC_BASE_URL", "OPENAI_BASE_URL",
		"OPENCODE_CONFIG", "OPENCODE_CONFIG_DIR",
		"OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_DISABLE_LSP_DOWNLOAD",
		"OPENCODE_DISABLE_DEFAULT_PLUGINS", "OPENCODE_DISABLE_MODELS_FETCH",
	},
}

// agentCredentialEnv are the credential variables each agent may see
// (acp.md §2.2). Their values are secrets: scrubbed from every payload,
// log and stderr tail. OPENCODE_CONFIG_CONTENT is inline JSON config that
// may hold provider keys, so it counts as one.
var agentCredentialEnv = map[string][]string{
	"claude":   {"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN", "AWS_BEARER_TOKEN_BEDROCK"},
	"codex":    {"OPENAI_API_KEY", "CODEX_API_KEY", "PAPERCLIP_AI_PROVIDER_KEY"},
	"gemini":   {"GEMINI_API_KEY", "GOOGLE_API_KEY"},
	"opencode": {"OPENCODE_CONFIG_CONTENT", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"},
	"grok":     {"XAI_API_KEY"},
	"cursor":   {"CURSOR_API_KEY"},
	"copilot":  {"COPILOT_GITHUB_TOKEN"},
}

// piCredentialBinding names the variable listing Pi's credential variables
// (comma or space separated).
const piCredentialBinding = "PAPERCLIP_ACPX_CREDENTIAL_BINDING"

// neverPass are refused even when listed (also through Pi's binding): a
// nested Claude refuses to start with CLAUDECODE set, and
// OPENCODE_SERVER_PASSWORD guards an OpenCode server the agent must not
// reach.
var neverPass = []string{"CLAUDECODE", "OPENCODE_SERVER_PASSWORD"}

// AgentEnv builds the agent's environment from environ (KEY=VALUE
// entries): cleared, then the common allowlist plus the agent's own
// config and credential variables. It returns the env and the secret
// values to hand to NewRedactor. Env values never enter the record or a
// log.
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
		case slices.Contains(commonEnv, k) || hasAnyPrefix(k, commonEnvPrefixes) || slices.Contains(agentConfigEnv[agent], k):
			env = append(env, k+"="+v)
			secrets = append(secrets, URLUserinfoSecrets(k, v)...)
		}
	}
	return env, secrets
}

// URLUserinfoSecrets returns what of variable k's value v must never be
// logged when k holds a URL (a proxy, or a model gateway's *_BASE_URL) that
// may carry user:password: the whole value, the userinfo and the password
// (raw and decoded), so neither a program printing the URL nor one printing
// only its credentials leaks them. Other variables give nil.
func URLUserinfoSecrets(k, v string) []string {
	if !isURLVar(k) || !strings.Contains(v, "@") {
		return nil
	}
	out := []string{v}
	u, err := url.Parse(v)
	if err != nil || u.User == nil {
		return out // unparsable but holding '@': scrub the whole value
	}
	out = append(out, u.User.String())
	if pw, ok := u.User.Password(); ok {
		out = append(out, pw)
		if raw := strings.SplitN(u.User.String(), ":", 2); len(raw) == 2 && raw[1] != pw {
			out = append(out, raw[1])
		}
	}
	return out
}

// isURLVar reports whether k holds a URL that may carry userinfo: a proxy
// or a model gateway's base URL.
func isURLVar(k string) bool {
	return strings.Contains(strings.ToLower(k), "proxy") || strings.HasSuffix(k, "_BASE_URL")
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// EnvAllowlist returns the exact names AgentEnv may pass, per agent ("" is
// the list every agent gets, LC_* and SSL_CERT_* aside; Pi's bound names
// come on top), and the names
// it never passes, so documentation can be checked against the code.
func EnvAllowlist() (perAgent map[string][]string, never []string) {
	perAgent = map[string][]string{"": slices.Clone(commonEnv)}
	for a, names := range agentConfigEnv {
		perAgent[a] = append(perAgent[a], names...)
	}
	for a, names := range agentCredentialEnv {
		perAgent[a] = append(perAgent[a], names...)
	}
	return perAgent, slices.Clone(neverPass)
}
