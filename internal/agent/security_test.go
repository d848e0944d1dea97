package agent

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
)

// TestSecretsNeverLeave: the agent's credential reaches the agent's env
// (acp.md §2.2), but when the agent echoes it back it is redacted in every
// event; it never appears in the durable record, in runnerd's logs or in
// the session directory's files runnerd writes.
func TestSecretsNeverLeave(t *testing.T) {
	const secret = "sk-ant-test-0123456789abcdefghij"
	logs := &syncbuf.Buffer{}
	r := newRig(t, func(c *Config) {
		c.Environ = append(c.Environ, "ANTHROPIC_API_KEY="+secret, "UNRELATED_TOKEN=do-not-pass-1234567")
		c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	r.prepare()
	r.open()
	dir := r.sessionDir()
	pgid := agentPgid(t, dir)
	env, err := os.ReadFile("/proc/" + itoa(pgid) + "/environ")
	require.NoError(t, err)
	require.Contains(t, string(env), "ANTHROPIC_API_KEY="+secret, "the agent gets its credential")
	require.NotContains(t, string(env), "UNRELATED_TOKEN", "the env is an allowlist")

	r.turn("echo my key is " + secret)
	evs := r.sink.waitEvent(t, "run.terminal")
	b, err := json.Marshal(evs)
	require.NoError(t, err)
	require.NotContains(t, string(b), secret, "events are redacted")
	require.Contains(t, string(b), "[REDACTED]")
	st, _ := r.sink.snapshot()
	rb, _ := json.Marshal(st)
	require.NotContains(t, string(rb), secret, "the record holds no env value")
	require.NotContains(t, logs.String(), secret, "logs hold no env value")
	require.NotContains(t, logs.String(), "my key is", "logs hold no payload text")
	// The stderr file next to the session dir is the agent's own output;
	// the launch payload passed no env in the environment's clear text.
	_, err = os.Stat(filepath.Join(dir, "command.b64"))
	require.True(t, os.IsNotExist(err))
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestEventsDirSwapRefused: events/ swapped for a symlink to a directory of
// planted files mid-turn → the reader never reads through it; the turn
// ends with transport_closed (path-swap race, acp.md §5.1).
func TestEventsDirSwapRefused(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	r.turn("sleep 20000")
	r.sink.waitEvent(t, "turn.started")
	dir := r.sessionDir()
	planted := t.TempDir()
	line := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-0001","update":{"sessionUpdate":"agent_message_chunk","messageId":"x","content":{"type":"text","text":"PLANTED"}}}}` + "\n"
	body := frame.DataFrame(frame.StreamStdout, []byte(line)).AppendJSON(nil)
	require.NoError(t, os.WriteFile(filepath.Join(planted, sessiondir.SeqName(999)), body, 0o600))
	ev := filepath.Join(dir, sessiondir.EventsDir)
	require.NoError(t, os.Rename(ev, ev+".old"))
	require.NoError(t, os.Symlink(planted, ev))
	evs := r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, "transport_closed", payloadOf(evs, "harness.diagnostic")["lossReason"])
	b, _ := json.Marshal(evs)
	require.NotContains(t, string(b), "PLANTED")
	_, err := os.Stat(filepath.Join(planted, sessiondir.SeqName(999)))
	require.NoError(t, err, "nothing was consumed through the symlink")
}
