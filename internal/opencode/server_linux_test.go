package opencode

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/procsession"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// startUnderPcwrap starts test/fakeopencode (or exe) as `opencode serve`
// under pcwrap, the way runnerd runs every agent.
func startUnderPcwrap(t *testing.T, exe, password string) (*server, string) {
	t.Helper()
	state := t.TempDir()
	srv, err := startServer(context.Background(), serverSpec{
		StateDir: state, Pcwrap: testbin.Path(t, "pcwrap"), Executable: exe, Cwd: t.TempDir(),
		Env:      []string{"PATH=" + os.Getenv("PATH")},
		Password: password,
		Tuning:   []string{sessiondir.EnvGraceMS + "=500"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	return srv, state
}

// childPid is the server's pid (its group leader) from pcwrap's child
// record.
func childPid(t *testing.T, dir string) int {
	t.Helper()
	rec, err := procsession.ReadChildRecord(dir)
	require.NoError(t, err)
	return rec.Pgid
}

// TestOpenCodeUnderPcwrap: `opencode serve --hostname 127.0.0.1 --port 0`
// runs under pcwrap; its port comes from its listening line; the
// password reaches the server's environment and nowhere on disk or in
// pcwrap's own environment; a turn runs end to end; Stop ends the group.
func TestOpenCodeUnderPcwrap(t *testing.T) {
	password, err := newPassword()
	require.NoError(t, err)
	srv, state := startUnderPcwrap(t, testbin.Build(t, "test/fakeopencode"), password)
	require.NotZero(t, srv.Port)
	require.Equal(t, "http://127.0.0.1:"+strconv.Itoa(srv.Port), srv.URL)

	cl, err := newClient(srv.URL, password)
	require.NoError(t, err)
	defer cl.Close()
	col := newCollector()
	c := NewConn(cl, State{}, col.sink)
	_, err = c.Open(context.Background(), "")
	require.NoError(t, err)
	runConn(t, c)
	require.NoError(t, c.prompt(context.Background(), "turn-1", Prompt{Text: "FAKEOC: tool make test"}))
	in := col.waitFor(t, "settlement", settled)
	evs := mapEvents(t, "turn-1", in, false)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, 1, count(evs, "tool.execution.completed"), "%v", eventTypes(evs))

	pid := childPid(t, srv.Dir)
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	require.NoError(t, err)
	require.Contains(t, string(env), serverEnv(password), "the server gets its password")
	wrapperEnv, err := os.ReadFile("/proc/" + strconv.Itoa(srv.pid()) + "/environ")
	require.NoError(t, err)
	require.NotContains(t, string(wrapperEnv), password, "pcwrap's environment holds it only base64-encoded in the payload")
	require.NoError(t, filepath.Walk(state, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil {
			require.NotContains(t, string(b), password, "file %s", p)
		}
		return nil
	}))

	require.NoError(t, srv.Stop())
	select {
	case <-srv.Exited():
	case <-time.After(waitBound):
		t.Fatal("no exit frame")
	}
	require.Error(t, syscall.Kill(pid, 0), "the server is gone")
}

// TestOpenCodeServerExitBeforeListen: a server that exits before its
// listening line fails the start, clearly.
func TestOpenCodeServerExitBeforeListen(t *testing.T) {
	_, err := startServer(context.Background(), serverSpec{
		StateDir: t.TempDir(), Pcwrap: testbin.Path(t, "pcwrap"), Executable: "/bin/false", Cwd: "/",
		Env: []string{"PATH=" + os.Getenv("PATH")}, Password: "x",
	})
	require.ErrorIs(t, err, errServerExited)
}
