package shutdown

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGroupSignalReapStatus(t *testing.T) {
	g, err := Start(exec.Command("sleep", "30"))
	require.NoError(t, err)
	pgid := g.Pgid()
	require.NotZero(t, pgid)
	pg, err := syscall.Getpgid(pgid)
	require.NoError(t, err)
	assert.Equal(t, pgid, pg, "the child leads its own group")
	st, err := g.StartTime()
	require.NoError(t, err)
	assert.NotZero(t, st)
	assert.True(t, g.Signal(syscall.SIGTERM))
	select {
	case <-g.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("child did not exit")
	}
	// Exited but unreaped: the group id is still ours to signal.
	assert.True(t, g.Signal(0))
	ps := g.Reap()
	code, sig := Status(ps)
	assert.Nil(t, code)
	assert.Equal(t, "SIGTERM", sig)
	assert.False(t, g.Signal(syscall.SIGKILL), "nothing is sent after the reap")
	assert.Zero(t, g.Pgid())
}

func TestGroupExitCode(t *testing.T) {
	g, err := Start(exec.Command("sh", "-c", "exit 7"))
	require.NoError(t, err)
	<-g.Exited()
	code, sig := Status(g.Reap())
	require.NotNil(t, code)
	assert.Equal(t, 7, *code)
	assert.Empty(t, sig)
}

func TestGroupStartFailure(t *testing.T) {
	_, err := Start(exec.Command("/nonexistent/binary"))
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestParseStartTime(t *testing.T) {
	line := "1234 (we ird) name)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200"
	v, err := parseStartTime(line)
	require.NoError(t, err)
	assert.Equal(t, uint64(987654), v)
	_, err = parseStartTime("garbage")
	assert.Error(t, err)
	_, err = parseStartTime("1 (x) S 1 2")
	assert.Error(t, err)
}

// TestGroupExitStatusUnreaped: the leader's status is known before the
// reap (the keep-group option emits exit while the zombie keeps the
// group id), for an exit code and for a signal.
func TestGroupExitStatusUnreaped(t *testing.T) {
	g, err := Start(exec.Command("sh", "-c", "exit 5"))
	require.NoError(t, err)
	code, sig := g.ExitStatus()
	require.NotNil(t, code)
	assert.Equal(t, 5, *code)
	assert.Empty(t, sig)
	assert.True(t, g.Signal(0), "still unreaped: the group id is ours")
	g.Reap()

	g, err = Start(exec.Command("sh", "-c", "kill -9 $$"))
	require.NoError(t, err)
	code, sig = g.ExitStatus()
	assert.Nil(t, code)
	assert.Equal(t, "SIGKILL", sig)
	g.Reap()
}
