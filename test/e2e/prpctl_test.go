package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// prpctlLine is one JSON line prpctl prints.
type prpctlLine struct {
	Kind        string          `json:"kind"`
	EventType   string          `json:"eventType"`
	SourceSeq   uint64          `json:"sourceSeq"`
	CommandType string          `json:"commandType"`
	Status      string          `json:"status"`
	Result      json.RawMessage `json:"result"`
	Code        *int            `json:"code"`
	// raw is the whole line.
	raw []byte
}

func runPrpctl(t *testing.T, args ...string) (int, []prpctlLine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, testbin.Path(t, "prpctl"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	var lines []prpctlLine
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var l prpctlLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
		l.raw = bytes.Clone(sc.Bytes())
		lines = append(lines, l)
	}
	if t.Failed() || cmd.ProcessState.ExitCode() != 0 {
		t.Logf("prpctl stderr:\n%s", stderr.String())
	}
	return cmd.ProcessState.ExitCode(), lines
}

func linesOf(lines []prpctlLine, kind string) []prpctlLine {
	var out []prpctlLine
	for _, l := range lines {
		if l.Kind == kind {
			out = append(out, l)
		}
	}
	return out
}

// TestPrpctlDrivesRunnerd: prpctl launches the real runnerd in dial and in
// listen mode, runs a script, prints events and results as JSON lines; a
// terminal command ends runnerd with 0, otherwise prpctl stops it with
// SIGTERM, an orderly stop that also exits 0 (prp.md §13).
func TestPrpctlDrivesRunnerd(t *testing.T) {
	runnerd := runnerdBin(t)
	script := filepath.Join(t.TempDir(), "script.jsonl")
	require.NoError(t, os.WriteFile(script, []byte(`# drain, then a refused turn
{"command":"runner.drain"}
{"ping":true}
{"command":"turn.start","payload":{"text":"hello"}}
{"wait":true}
`), 0o600))
	stop := filepath.Join(t.TempDir(), "stop.jsonl")
	require.NoError(t, os.WriteFile(stop, []byte(`{"command":"runner.shutdown"}`+"\n"), 0o600))
	for _, mode := range []string{"dial", "listen"} {
		for _, terminal := range []bool{true, false} {
			name := mode
			if terminal {
				name += "/shutdown"
			}
			t.Run(name, func(t *testing.T) {
				args := []string{"--mode", mode, "--runnerd", runnerd, "--state-dir", stateDir(t),
					"--command", "session.snapshot", "--script", script, "--timeout", "15s"}
				if terminal {
					args[len(args)-3] = script + ".stop"
					require.NoError(t, os.WriteFile(args[len(args)-3], append(mustRead(t, script), mustRead(t, stop)...), 0o600))
				}
				code, lines := runPrpctl(t, args...)
				require.Equal(t, 0, code)
				results := linesOf(lines, "command_result")
				want := []string{"session.snapshot", "runner.drain", "turn.start"}
				if terminal {
					want = append(want, "runner.shutdown")
				}
				require.Len(t, results, len(want))
				for i, r := range results {
					require.Equal(t, want[i], r.CommandType)
				}
				events := linesOf(lines, "event")
				require.Equal(t, "runner.connected", events[0].EventType)
				for i, e := range events {
					require.EqualValues(t, i+1, e.SourceSeq)
				}
				exit := linesOf(lines, "runnerd_exit")
				require.Len(t, exit, 1)
				require.Equal(t, 0, *exit[0].Code)
			})
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// TestPrpctlReturnsWhenRunnerdDies: the real runnerd, launched by prpctl on
// a state file holding a JSON array, exits 1 at once with a message naming
// what is wrong; prpctl stops waiting then (not after its 10-minute
// --timeout, which waitBound would cut) and exits with runnerd's status.
func TestPrpctlReturnsWhenRunnerdDies(t *testing.T) {
	runnerd := runnerdBin(t)
	for _, mode := range []string{"dial", "listen"} {
		t.Run(mode, func(t *testing.T) {
			dir := stateDir(t)
			require.NoError(t, os.Mkdir(dir, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "runner-state.json"), []byte(`[1,2,3]`), 0o600))
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			defer cancel()
			cmd := exec.CommandContext(ctx, testbin.Path(t, "prpctl"), "--mode", mode, "--runnerd", runnerd,
				"--state-dir", dir, "--command", "session.snapshot", "--timeout", "10m")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			_ = cmd.Run()
			require.NoError(t, ctx.Err(), "prpctl waited until killed; stderr:\n%s", stderr.String())
			require.Equal(t, 1, cmd.ProcessState.ExitCode(), "stderr:\n%s", stderr.String())
			require.Contains(t, stderr.String(), "state file: top level is an array, want an object")
			require.Contains(t, stderr.String(), "prpctl: runnerd exited with status 1 before")
		})
	}
}

// TestPrpctlPrintsOutputBodies: a long agent answer reaches prpctl as
// output.body.chunk events and the carrier; prpctl prints, right after the
// carrier, the body its core reassembled and verified: byteLength and the
// digest of the whole answer, status 200 (workspace.md §7).
func TestPrpctlPrintsOutputBodies(t *testing.T) {
	script := filepath.Join(t.TempDir(), "script.jsonl")
	prepare, err := json.Marshal(map[string]any{"command": "run.prepare", "payload": map[string]any{"provider": map[string]any{
		"kind": "acpx", "agent": "claude", "command": fakeacpBin(t), "cwd": t.TempDir()}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(script, append(prepare, []byte(`
{"command":"session.open","payload":{"reuse":"same_session"}}
{"command":"turn.start","payload":{"text":"long 10000"}}
{"waitEvent":"run.terminal"}
`)...), 0o600))
	code, lines := runPrpctl(t, "--mode", "listen", "--runnerd", runnerdBin(t), "--state-dir", stateDir(t),
		"--runnerd-arg=--pcwrap-path="+testbin.Path(t, "pcwrap"), "--script", script, "--timeout", "15s")
	require.Equal(t, 0, code)
	require.Len(t, linesOf(lines, "output_body"), 1)
	var body struct {
		ByteLength int    `json:"byteLength"`
		SHA256     string `json:"sha256"`
		Status     int    `json:"httpStatus"`
	}
	for i, l := range lines {
		if l.Kind == "output_body" {
			require.Equal(t, "item.completed", lines[i-1].EventType, "right after its carrier")
			require.Equal(t, "output.body.chunk", lines[i-2].EventType)
			require.NoError(t, json.Unmarshal(l.raw, &body))
		}
	}
	sum := sha256.Sum256([]byte(strings.Repeat("0123456789", 1000)))
	require.Equal(t, 200, body.Status)
	require.Equal(t, 10_000, body.ByteLength)
	require.Equal(t, hex.EncodeToString(sum[:]), body.SHA256)
}
