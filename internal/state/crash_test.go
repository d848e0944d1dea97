package state

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	// crashChildEnv names the state dir of a re-executed test binary that
	// writes state in a loop until it is killed.
	crashChildEnv = "PCRUNNER_STATE_CRASH_CHILD_DIR"
	// crashRounds is how many SIGKILLs the crash test delivers.
	crashRounds = 6
	// crashReadyTimeout bounds the wait for the child's first commit.
	crashReadyTimeout = 20 * time.Second
	// crashBlobBytes makes each write large enough to be killed mid-write.
	crashBlobBytes = 256 * 1024
)

func crashConfig(dir string) Config {
	cfg := testConfig(dir)
	cfg.MaxOutboxBytes = 1 << 20
	cfg.P0ReserveBytes = 64 << 10
	return cfg
}

// crashChild runs in the re-executed binary: it commits a growing counter
// with an event and a large record, forever, and announces its first commit.
func crashChild() {
	dir := os.Getenv(crashChildEnv)
	s, err := Open(crashConfig(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	blob := strings.Repeat("x", crashBlobBytes)
	for i := 0; ; i++ {
		err := s.Update(func(tx *Tx) error {
			var n int
			if _, err := tx.Record("counter", &n); err != nil {
				return err
			}
			if _, err := tx.Enqueue(Event{Type: "item.delta", Priority: P1, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n+1))}); err != nil {
				return err
			}
			if err := tx.ApplyAck(tx.HighestSourceSeq()-1, 2); err != nil {
				return err
			}
			if err := tx.SetRecord("blob", blob); err != nil {
				return err
			}
			return tx.SetRecord("counter", n+1)
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "update:", err)
			os.Exit(3)
		}
		if i == 0 {
			fmt.Println("ready")
		}
	}
}

// A process killed with SIGKILL at random points while writing always
// leaves a state that loads: the old one or the new one, never a mix.
func TestCrashMidWriteAlwaysLeavesLoadableState(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := filepath.Join(t.TempDir(), "state")
	last := 0
	for round := range crashRounds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		pipe := out.(*os.File)
		require.NoError(t, pipe.SetReadDeadline(time.Now().Add(crashReadyTimeout)))
		line, err := bufio.NewReader(pipe).ReadString('\n')
		require.NoError(t, err, "child never committed")
		require.Equal(t, "ready\n", line)
		// Let it write for a random short while, then kill it mid-flight.
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()

		s, err := Open(crashConfig(dir))
		require.NoError(t, err, "round %d: state must load after SIGKILL", round)
		var n int
		ok, err := s.Snapshot().Record("counter", &n)
		require.NoError(t, err)
		require.True(t, ok)
		require.GreaterOrEqual(t, n, last, "committed progress is never lost")
		require.Greater(t, n, 0)
		last = n
		require.NoError(t, s.Close())
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temp file survives a reopen: the store and the projection")
}
