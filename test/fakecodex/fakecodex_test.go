package main

import (
	"bufio"
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite golden transcripts")

// testWait bounds every wait here: a safety net, never a figure.
const testWait = 10 * time.Second

// TestGoldenTranscript: initialize, initialized, thread/start and one turn
// with plan, command, usage, two deltas and one junk banner line record
// the golden transcript byte for byte.
func TestGoldenTranscript(t *testing.T) {
	tr := filepath.Join(t.TempDir(), "t.ndjson")
	cfg, err := parseConfig([]string{"--plan", "--usage", "--command", "--deltas", "2", "--junk", "1", "--transcript", tr}, func(string) string { return "" })
	require.NoError(t, err)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() { done <- run(cfg, inR, outW, io.Discard); outW.Close() }()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitFor := func(sub string) {
		t.Helper()
		deadline := time.After(testWait)
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "stdout closed before %q", sub)
				if strings.Contains(l, sub) {
					return
				}
			case <-deadline:
				t.Fatalf("timed out waiting for %q", sub)
			}
		}
	}
	send := func(s string) { _, err := io.WriteString(inW, s+"\n"); require.NoError(t, err) }
	send(`{"id":1,"method":"initialize","params":{"clientInfo":{"name":"paperclip-runnerd","title":"Paperclip Runner","version":"1"},"capabilities":{"experimentalApi":true}}}`)
	waitFor(`"id":1`)
	send(`{"method":"initialized"}`)
	send(`{"id":2,"method":"thread/start","params":{"cwd":"/w","model":null,"approvalPolicy":"never","dynamicTools":[],"developerInstructions":null,"sandbox":"danger-full-access","experimentalRawEvents":false}}`)
	waitFor(`"id":2`)
	send(`{"id":3,"method":"turn/start","params":{"threadId":"thread-0001","cwd":"/w","input":[{"type":"text","text":"hi","text_elements":[]}]}}`)
	waitFor(`turn/completed`)
	require.NoError(t, inW.Close())
	select {
	case code := <-done:
		require.Equal(t, 0, code)
	case <-time.After(testWait):
		t.Fatal("fakecodex did not exit on stdin EOF")
	}
	for range lines {
	}
	got, err := os.ReadFile(tr)
	require.NoError(t, err)
	golden := filepath.Join("testdata", "turn.golden.ndjson")
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "transcript differs from %s:\n%s", golden, got)
}

// TestEarlyExit: --exit-early exits at once with the code asked for.
func TestEarlyExit(t *testing.T) {
	cfg, err := parseConfig(nil, func(k string) string {
		if k == "FAKECODEX_EXIT_EARLY" {
			return "3"
		}
		return ""
	})
	require.NoError(t, err)
	require.Equal(t, 3, run(cfg, strings.NewReader(""), io.Discard, io.Discard))
}
