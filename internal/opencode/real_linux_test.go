package opencode

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/testutil/netns"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// envRealOpenCode names the real opencode binary (opencode-ai's
// platform package: node_modules/opencode-linux-x64/bin/opencode) for
// TestOpenCodeRealServer; unset, the test is skipped.
const envRealOpenCode = "PCRUNNER_OPENCODE_BIN"

// realTurnBound bounds the real server's turn: its first start loads its
// provider catalog and plugins (seconds here).
const realTurnBound = 60 * time.Second

// startFakeLLM runs test/fakellm and returns its URL.
func startFakeLLM(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(testbin.Build(t, "test/fakellm"), "--exit-on-stdin-eof", "--idle", "5m")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		line <- sc.Text()
		for sc.Scan() {
		}
	}()
	select {
	case l := <-line:
		u, ok := strings.CutPrefix(l, "FAKELLM_URL=")
		require.True(t, ok, l)
		return u
	case <-time.After(waitBound):
		t.Fatal("fakellm did not start")
	}
	return ""
}

// TestOpenCodeRealServer runs the real `opencode serve` (opencode-ai
// 1.18.33) under pcwrap, offline, its model an OpenAI-compatible
// provider served by test/fakellm: a text turn and a shell tool turn,
// every PRP event schema-valid.
func TestOpenCodeRealServer(t *testing.T) {
	exe := os.Getenv(envRealOpenCode)
	if exe == "" {
		netns.SkipOrFail(t, envRealOpenCode+" not set; the real opencode server is not tried")
	}
	// Offline, as test/realagents: the real server sees only loopback.
	if !netns.Isolate(t) {
		return
	}
	llm := startFakeLLM(t)
	home, cwd := t.TempDir(), t.TempDir()
	cfg := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{"fake": map[string]any{
			"npm": "@ai-sdk/openai-compatible", "name": "Fake",
			"options": map[string]any{"baseURL": llm + "/v1", "apiKey": "unused"},
			"models":  map[string]any{"fake-model": map[string]any{"name": "Fake model"}},
		}},
		"model": "fake/fake-model", "autoupdate": false, "share": "disabled",
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(cwd, "opencode.json"), b, 0o600))
	password, err := newPassword()
	require.NoError(t, err)
	srv, err := startServer(context.Background(), serverSpec{
		StateDir: t.TempDir(), Pcwrap: testbin.Path(t, "pcwrap"), Executable: exe, Cwd: cwd,
		Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home,
			"XDG_CONFIG_HOME=" + home + "/.config", "XDG_DATA_HOME=" + home + "/.local/share",
			"XDG_CACHE_HOME=" + home + "/.cache", "XDG_STATE_HOME=" + home + "/.local/state"},
		Password: password,
		Tuning:   []string{sessiondir.EnvGraceMS + "=2000"},
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Stop()) }()

	cl, err := newClient(srv.URL, password)
	require.NoError(t, err)
	defer cl.Close()
	col := newCollector()
	c := NewConn(cl, State{}, col.sink)
	_, err = c.Open(context.Background(), "")
	require.NoError(t, err)
	stop := runConn(t, c)
	defer stop()

	turns := 0
	wait := func(what string) []provider.Inbound {
		t.Helper()
		deadline := time.After(realTurnBound)
		for {
			in, _ := col.snapshot()
			n := 0
			for _, m := range in {
				if m.Kind == provider.KindTurnSettled {
					n++
				}
			}
			if n == turns {
				return in
			}
			select {
			case <-col.wake:
			case <-deadline:
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	require.NoError(t, c.prompt(context.Background(), "turn-1", Prompt{ProviderID: "fake", ModelID: "fake-model",
		System: "Answer briefly.", Text: "FAKELLM: text hello from the real server"}))
	turns++
	in := wait("the text turn")
	require.Equal(t, "hello from the real server", textOf(in, provider.UpdateAgentMessageChunk))
	evs := mapEvents(t, "turn-1", in, false)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, 1, count(evs, "turn.completed"), "%v", eventTypes(evs))

	require.NoError(t, c.prompt(context.Background(), "turn-2", Prompt{ProviderID: "fake", ModelID: "fake-model",
		Text: "FAKELLM: shell echo pcrunner-was-here"}))
	turns++
	all := wait("the shell turn")
	evs = mapEvents(t, "turn-2", all[len(in):], false)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, 1, count(evs, "tool.execution.completed"), "%v", eventTypes(evs))
	for _, e := range evs {
		if e.EventType == "tool.execution.completed" {
			require.Contains(t, e.Payload["output"], "pcrunner-was-here")
		}
	}
}
