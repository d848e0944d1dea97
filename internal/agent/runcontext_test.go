package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/state"
)

func descWith(t *testing.T, extra map[string]any) json.RawMessage {
	t.Helper()
	d := map[string]any{"kind": "acpx", "agent": "claude", "command": "/bin/true", "cwd": "/"}
	for k, v := range extra {
		d[k] = v
	}
	b, err := json.Marshal(map[string]any{"provider": d})
	require.NoError(t, err)
	return b
}

// TestTools08_InstructionsBound: instructions of exactly 1 MiB are
// accepted and stored; one byte more fails run.prepare with a message
// naming the bound (tools.md §5).
func TestTools08_InstructionsBound(t *testing.T) {
	rc, err := parseRunContext(descWith(t, map[string]any{"instructions": strings.Repeat("é", maxInstructionsBytes/2)}))
	require.NoError(t, err)
	dir := t.TempDir()
	b := &Binding{}
	require.NoError(t, storeRunContext(dir, b, rc))
	meta, err := sessionMeta(dir, b)
	require.NoError(t, err)
	require.Contains(t, string(meta), `"systemPrompt":{"append":"éé`)
	_, err = parseRunContext(descWith(t, map[string]any{"instructions": strings.Repeat("x", maxInstructionsBytes+1)}))
	require.EqualError(t, err, "provider descriptor instructions are larger than 1048576 bytes")
}

// TestTools08_RuntimeContextMCPSecretsDropped: secret-looking members,
// credential-shaped strings and URL userinfo/query are dropped from
// runtimeContext.mcp (decision: drop and keep the rest, tools.md §5);
// the other members of runtimeContext are kept as sent.
func TestTools08_RuntimeContextMCPSecretsDropped(t *testing.T) {
	rc, err := parseRunContext(descWith(t, map[string]any{"runtimeContext": map[string]any{
		"prompt": "Bearer keep-me-outside-mcp-0123456789",
		"mcp": map[string]any{
			"servers": []any{map[string]any{"name": "a", "url": "https://u:p@h.example/x?k=v", "headers": map[string]any{"X": "y"},
				"accessToken": "t1", "client_secret": "t2", "args": []any{"--token", "ghp_abcdefghijklmnopqrstuvwxyz0123"}}},
		},
	}}))
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(rc.runtimeContext, &got))
	require.Equal(t, "Bearer keep-me-outside-mcp-0123456789", got["prompt"], "only mcp is scrubbed")
	require.Equal(t, map[string]any{"servers": []any{map[string]any{"name": "a", "url": "https://h.example/x", "args": []any{"--token"}}}}, got["mcp"])
}

// TestTools08_ModelEnv: the model reaches claude as ANTHROPIC_MODEL at
// spawn, replacing an inherited value (acp.md §2.2); other agents get no
// variable.
func TestTools08_ModelEnv(t *testing.T) {
	env := modelEnv("claude", "m-2", []string{"PATH=/bin", "ANTHROPIC_MODEL=old"})
	require.Equal(t, []string{"PATH=/bin", "ANTHROPIC_MODEL=m-2"}, env)
	require.Equal(t, []string{"PATH=/bin"}, modelEnv("pi", "m-2", []string{"PATH=/bin"}))
	require.Equal(t, []string{"PATH=/bin"}, modelEnv("claude", "", []string{"PATH=/bin"}))
}

// FuzzParseRunContext: the run context decoder never panics, and what it
// accepts is bounded, NUL-free, and stores and reads back.
func FuzzParseRunContext(f *testing.F) {
	f.Add([]byte(`{"provider":{"instructions":"x","runtimeContext":{"mcp":{"env":[1]}}}}`))
	f.Add([]byte(`{"provider":{"instructions":null,"runtimeContext":null}}`))
	f.Add([]byte(`{"provider":{"runtimeContext":[]}}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, raw []byte) {
		rc, err := parseRunContext(raw)
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(rc.instructions), maxInstructionsBytes)
		require.NotContains(t, rc.instructions, "\x00")
		b := &Binding{}
		require.NoError(t, storeRunContext(dir, b, rc))
		if b.RuntimeContextSide != "" {
			got, err := state.ReadSide(dir, b.RuntimeContextSide, maxRuntimeContextBytes*2)
			require.NoError(t, err)
			require.True(t, json.Valid(got))
		}
		_, err = sessionMeta(dir, b)
		require.NoError(t, err)
	})
}
