package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// fakeacpBin builds test/fakeacp (static) once per test process.
func fakeacpBin(t testing.TB) string {
	t.Helper()
	return testbin.Build(t, "test/fakeacp")
}

// agentRig is a core on loopback, one state dir and the runnerd command
// line that runs agents under the test build of pcwrap.
type agentRig struct {
	c    *coreServer
	bin  string
	dir  string
	args []string
	pid  int // runnerd's, when a benchmark started it
	// env is added to runnerd's environment at each start (test hooks).
	env []string
}

func newAgentRig(t *testing.T, extra ...string) *agentRig {
	t.Helper()
	return newAgentRigWith(t, nil, extra...)
}

// newAgentRigWith is newAgentRig with a tweaked core (newCoreServerWith).
func newAgentRigWith(t *testing.T, tweak func(*control.Config), extra ...string) *agentRig {
	t.Helper()
	c := newCoreServerWith(t, tweak)
	dir := stateDir(t)
	args := runnerdArgs(dir, append([]string{"--connect-url", c.connectURL(), "--pcwrap-path", testbin.Path(t, "pcwrap")}, extra...)...)
	return &agentRig{c: c, bin: runnerdBin(t), dir: dir, args: args}
}

// start launches runnerd; cleanup stops it with SIGTERM (an orderly stop
// stops its agents) if the test did not.
func (r *agentRig) start(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd, _ := r.startLogged(t)
	return cmd
}

// startLogged is start, returning runnerd's stderr as well.
func (r *agentRig) startLogged(t *testing.T) (*exec.Cmd, *syncbuf.Buffer) {
	t.Helper()
	cmd, stderr := r.startCapturing(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runnerd (pid %d) stderr:\n%s", cmd.Process.Pid, tail(stderr.String(), 40))
		}
	})
	return cmd, stderr
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// queue queues a command and returns its id.
func (r *agentRig) queue(t *testing.T, typ string, payload any) string {
	t.Helper()
	b, err := json.Marshal(payload)
	require.NoError(t, err)
	cmd, err := r.c.core.QueueCommand(prp.Command{Type: typ, Payload: b})
	require.NotEmpty(t, cmd.CommandID, "queue %s: %v", typ, err)
	return cmd.CommandID
}

// result waits for a command's result.
func (r *agentRig) result(t *testing.T, id string) prp.CommandResultPayload {
	t.Helper()
	s := r.c.wait(t, func(s control.Snapshot) bool { return s.Results[id] != nil })
	var res prp.CommandResultPayload
	require.NoError(t, json.Unmarshal(s.Results[id], &res))
	return res
}

// run queues a command and waits for its result.
func (r *agentRig) run(t *testing.T, typ string, payload any) prp.CommandResultPayload {
	t.Helper()
	return r.result(t, r.queue(t, typ, payload))
}

// prepare binds fakeacp (as agent claude) with flags.
func (r *agentRig) prepare(t *testing.T, flags ...string) {
	t.Helper()
	r.prepareDescriptor(t, map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(t),
		"args": flags, "cwd": t.TempDir()})
}

func (r *agentRig) prepareDescriptor(t *testing.T, provider map[string]any) {
	t.Helper()
	res := r.run(t, "run.prepare", map[string]any{"provider": provider})
	require.Equal(t, "completed", res.Status, string(res.Result))
}

func (r *agentRig) open(t *testing.T) {
	t.Helper()
	res := r.run(t, "session.open", map[string]any{"reuse": "same_session"})
	require.Equal(t, "completed", res.Status, string(res.Result))
}

// events returns the committed events in order.
func (r *agentRig) events(t *testing.T) []event { return decodeEvents(t, r.c.core.Snapshot().Events) }

// waitEvents waits until n events of type typ are committed at the core.
func (r *agentRig) waitEvents(t *testing.T, typ string, n int) []event {
	t.Helper()
	s := r.c.wait(t, func(s control.Snapshot) bool { return countType(decodeEvents(t, s.Events), typ) >= n })
	return decodeEvents(t, s.Events)
}

func countType(evs []event, typ string) int {
	n := 0
	for _, e := range evs {
		if e.EventType == typ {
			n++
		}
	}
	return n
}

// agentTypes lists the provider event types (runner.* left out).
func agentTypes(evs []event) []string {
	var out []string
	for _, e := range evs {
		if !strings.HasPrefix(e.EventType, "runner.") {
			out = append(out, e.EventType)
		}
	}
	return out
}

func field(t *testing.T, e event, key string) any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(e.Payload, &m))
	return m[key]
}

func find(evs []event, typ string) (event, bool) {
	for _, e := range evs {
		if e.EventType == typ {
			return e, true
		}
	}
	return event{}, false
}

// requireContiguous checks sourceSeq 1..n without gap or duplicate.
func requireContiguous(t *testing.T, evs []event) {
	t.Helper()
	ids := map[string]bool{}
	for i, e := range evs {
		require.EqualValues(t, i+1, e.SourceSeq, "gap or duplicate at %d", i)
		require.False(t, ids[e.SourceEventID])
		ids[e.SourceEventID] = true
	}
}

// processSessions lists the session dirs under the state dir.
func processSessions(dir string) []string {
	ents, _ := os.ReadDir(filepath.Join(dir, "process-sessions"))
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// startCapturing launches runnerd with its stderr captured.
func (r *agentRig) startCapturing(t *testing.T) (*exec.Cmd, *syncbuf.Buffer) {
	t.Helper()
	ticket, err := r.c.core.MintTicket()
	require.NoError(t, err)
	buf := &syncbuf.Buffer{}
	cmd := exec.Command(r.bin, r.args...)
	cmd.Env = append(append(os.Environ(), r.env...), "PAPERCLIP_RUNNER_BOOTSTRAP_TICKET="+ticket)
	cmd.Stderr = buf
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			waitExit(t, cmd)
		}
	})
	return cmd, buf
}

// sessionDir returns the one live process session dir.
func (r *agentRig) sessionDir(t *testing.T) string {
	t.Helper()
	s := processSessions(r.dir)
	require.Len(t, s, 1)
	return filepath.Join(r.dir, "process-sessions", s[0])
}
