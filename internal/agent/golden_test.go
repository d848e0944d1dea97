package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// TestACP23_GoldenTranscriptThroughPcwrap: the agent-side wire
// transcript of scenario 2 driven by the executor through pcwrap equals
// fakeacp's golden file once timestamps and the cwd are normalised: what
// runnerd writes through stdin files is byte-for-byte what the in-process
// client writes (acp.md §11 scenario 23). The in-process client
// advertises no client capability, so runnerd's fs and terminal switches
// are off here (TestTools12_ClientFSThroughAgent checks the default
// advertisement).
func TestACP23_GoldenTranscriptThroughPcwrap(t *testing.T) {
	wire := filepath.Join(t.TempDir(), "wire.ndjson")
	r := newRig(t)
	r.prepareDesc(map[string]any{"clientCapabilities": map[string]any{"fs": false, "terminal": false}}, "--transcript", wire)
	r.open()
	r.turn("echo hi")
	r.sink.waitEvent(t, "run.terminal")
	raw, err := os.ReadFile(wire)
	require.NoError(t, err)
	var got bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var e map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		delete(e, "ts")
		b, err := json.Marshal(e)
		require.NoError(t, err)
		got.Write(append(b, '\n'))
	}
	norm := strings.ReplaceAll(got.String(), `"cwd":"`+r.cwd+`"`, `"cwd":"/work/repo"`)
	want, err := os.ReadFile(filepath.Join(testbin.RepoRoot(t), "test", "fakeacp", "testdata", "scenario02.golden.ndjson"))
	require.NoError(t, err)
	require.Equal(t, string(want), norm)
}
