package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// prepareDesc binds fakeacp with flags and extra provider members.
func (r *rig) prepareDesc(extra map[string]any, flags ...string) {
	r.t.Helper()
	prov := map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(r.t), "args": flags, "cwd": r.cwd}
	for k, v := range extra {
		prov[k] = v
	}
	b, _ := json.Marshal(map[string]any{"provider": prov})
	_, err := r.m.Prepare(b)
	require.NoError(r.t, err)
}

// say runs one turn and returns the agent's message text of that turn.
func (r *rig) say(text string) string {
	r.t.Helper()
	_, before := r.sink.snapshot()
	n := count(before, "run.terminal")
	turn := r.turn(text)
	evs := r.sink.waitFor(r.t, "turn end", func(_ Stored, evs []provider.Event) bool { return count(evs, "run.terminal") > n })
	out := ""
	for _, e := range evs {
		if e.EventType == "item.delta" && e.TurnID == turn && e.Payload["kind"] == "assistant_message" {
			out += e.Payload["text"].(string)
		}
	}
	return out
}

// TestTools12_ClientFSThroughAgent: with fs advertised, fakeacp's reads
// and writes through the client are served inside cwd and refused with
// clear errors for `../etc/passwd`, a symlink out, an absolute path out
// and a 100 MiB file (tools.md §9 scenario 12). Before, every fs/* request
// got -32601.
func TestTools12_ClientFSThroughAgent(t *testing.T) {
	r := newRig(t)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("outside-secret"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "hello.txt"), []byte("hello from cwd"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(r.cwd, "link")))
	huge, err := os.Create(filepath.Join(r.cwd, "huge.bin"))
	require.NoError(t, err)
	require.NoError(t, huge.Truncate(100<<20))
	require.NoError(t, huge.Close())
	r.prepare()
	r.open()

	require.Equal(t, "read "+r.cwd+"/hello.txt: hello from cwd\n", r.say("read "+r.cwd+"/hello.txt"))
	for _, p := range []string{"../etc/passwd", r.cwd + "/link", outside + "/secret", r.cwd + "/../" + filepath.Base(outside) + "/secret"} {
		got := r.say("read " + p)
		require.Contains(t, got, "read "+p+" failed -32602: ")
		require.NotContains(t, got, "outside-secret")
	}
	require.Contains(t, r.say("read "+r.cwd+"/huge.bin"), "failed -32602: read text file: \""+r.cwd+"/huge.bin\": the content exceeds the 8 MiB response limit")
	require.Contains(t, r.say("read "+r.cwd+"/missing"), "failed -32002: ")

	require.Equal(t, "wrote "+r.cwd+"/out/new.txt\n", r.say("write "+r.cwd+"/out/new.txt fresh"))
	b, err := os.ReadFile(filepath.Join(r.cwd, "out", "new.txt"))
	require.NoError(t, err)
	require.Equal(t, "fresh", string(b))
	require.Contains(t, r.say("write "+outside+"/x nope"), "failed -32602: ")
	require.NoFileExists(t, filepath.Join(outside, "x"))

	st, _ := r.sink.snapshot()
	require.Equal(t, &provider.ClientCapabilities{FS: provider.FSCapabilities{ReadTextFile: true, WriteTextFile: true}, Terminal: true},
		st.Session.ClientCapabilities, "the record holds what was advertised")
	require.Equal(t, `clientCapabilities {"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true}`, r.say("caps"))
}

// TestTools12_WriteDenyAllThroughAgent: under permission mode deny-all a
// write through the client is refused and nothing is created; a read is
// still served (tools.md §8: writes refused only under deny-all).
func TestTools12_WriteDenyAllThroughAgent(t *testing.T) {
	r := newRig(t)
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "a.txt"), []byte("a"), 0o644))
	r.prepareDesc(map[string]any{"permissionMode": "deny-all"})
	r.open()
	got := r.say("write " + r.cwd + "/b.txt x")
	require.Contains(t, got, "failed -32603: ")
	require.Contains(t, got, "deny-all")
	require.NoFileExists(t, filepath.Join(r.cwd, "b.txt"))
	require.Equal(t, "read "+r.cwd+"/a.txt: a\n", r.say("read "+r.cwd+"/a.txt"))
}

// TestClientFSSwitchOff: provider.clientCapabilities.fs false advertises
// no fs capability, records that, and fs/* gets -32601 like any unknown method; a
// non-boolean switch fails run.prepare.
func TestClientFSSwitchOff(t *testing.T) {
	r := newRig(t)
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "a.txt"), []byte("a"), 0o644))
	r.prepareDesc(map[string]any{"clientCapabilities": map[string]any{"fs": false}})
	r.open()
	require.Equal(t, `clientCapabilities {"fs":{"readTextFile":false,"writeTextFile":false},"terminal":true}`, r.say("caps"))
	require.Contains(t, r.say("read "+r.cwd+"/a.txt"), "failed -32601: ")
	st, _ := r.sink.snapshot()
	require.Equal(t, &provider.ClientCapabilities{Terminal: true}, st.Session.ClientCapabilities)

	_, err := parseDescriptor(json.RawMessage(`{"provider":{"kind":"acpx","agent":"claude","clientCapabilities":{"fs":"no"}}}`), testDrivers)
	require.Error(t, err)
}

// TestClientFSResumeKeepsContract: a session resumed after its agent was
// lost advertises what its record says it was promised, even when the
// descriptor bound since turns fs off; the same holds for the answers.
func TestClientFSResumeKeepsContract(t *testing.T) {
	r := newRig(t)
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "a.txt"), []byte("a"), 0o644))
	r.prepare("--supports-load-session")
	r.open()
	r.say("echo before")
	r.killAgent()
	r.prepareDesc(map[string]any{"clientCapabilities": map[string]any{"fs": false}}, "--supports-load-session")
	require.Contains(t, string(r.open()), `"status":"resumed"`)
	require.Equal(t, `clientCapabilities {"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true}`, r.say("caps"))
	require.Equal(t, "read "+r.cwd+"/a.txt: a\n", r.say("read "+r.cwd+"/a.txt"))
}

// TestClientFSAdoptKeepsContract: after a runnerd restart the live agent
// is adopted and its fs requests are still answered by what its record
// says initialize advertised, even when the descriptor bound since turns
// fs off.
func TestClientFSAdoptKeepsContract(t *testing.T) {
	r := newRig(t)
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "a.txt"), []byte("a"), 0o644))
	r.prepare()
	var first struct {
		ProcessID int `json:"processId"`
	}
	require.NoError(t, json.Unmarshal(r.open(), &first))
	r.say("echo before")
	r.m.Close()
	st, _ := r.sink.snapshot()
	r.m = NewManager(r.cfg, st) // the rig's cleanup shuts it down
	require.NoError(t, r.m.Start())
	r.prepareDesc(map[string]any{"clientCapabilities": map[string]any{"fs": false}})
	var again struct {
		Status    string `json:"status"`
		ProcessID int    `json:"processId"`
	}
	require.NoError(t, json.Unmarshal(r.open(), &again))
	require.Equal(t, "resumed", again.Status)
	require.Equal(t, first.ProcessID, again.ProcessID, "the live agent is adopted, not restarted")
	require.Equal(t, "read "+r.cwd+"/a.txt: a\n", r.say("read "+r.cwd+"/a.txt"))
}
