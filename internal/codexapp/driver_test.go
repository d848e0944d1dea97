package codexapp

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCodexHome: CODEX_HOME is <state>/codex-home/<session>/ (0700) with
// config.toml (the allowlisted base URL) and auth.json (the key), both
// 0600 (codex.md §2).
func TestCodexHome(t *testing.T) {
	dir := t.TempDir()
	environ := []string{"OPENAI_BASE_URL=http://127.0.0.1:9/v1", "OPENAI_API_KEY=sk-test-123", "UNRELATED=x"}
	env, err := Env(dir, "sess/1", environ, []string{"PATH=/bin"})
	require.NoError(t, err)
	home := filepath.Join(dir, homeDir, "sess-1")
	require.Contains(t, env, "CODEX_HOME="+home)
	fi, err := os.Stat(home)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	for _, f := range []string{"config.toml", "auth.json"} {
		fi, err := os.Stat(filepath.Join(home, f))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), f)
	}
	cfg, _ := os.ReadFile(filepath.Join(home, "config.toml"))
	require.Contains(t, string(cfg), `base_url = "http://127.0.0.1:9/v1"`)
	auth, _ := os.ReadFile(filepath.Join(home, "auth.json"))
	require.JSONEq(t, `{"OPENAI_API_KEY":"sk-test-123"}`, string(auth))
	// The auth secret wins over the keys.
	_, err = Env(dir, "s2", []string{"PAPERCLIP_ACPX_CODEX_AUTH_JSON_SECRET={\"tokens\":{}}", "OPENAI_API_KEY=k"}, nil)
	require.NoError(t, err)
	auth, _ = os.ReadFile(filepath.Join(dir, homeDir, "s2", "auth.json"))
	require.JSONEq(t, `{"tokens":{}}`, string(auth))
}
