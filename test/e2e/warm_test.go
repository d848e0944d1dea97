package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// warmNext is the run a rotation hands the runner to.
var warmNext = prp.Identity{
	RunnerInstanceID: identity.RunnerInstanceID, EnvironmentLeaseID: identity.EnvironmentLeaseID,
	RunID: "run_e2e_2", NormalizedSessionID: identity.NormalizedSessionID, TurnID: "turn_e2e_2", ItemID: "item_e2e_2",
}

// asIdentity rewrites a runnerd command line's identity flags, and its
// connect URL's run route, to id.
func asIdentity(args []string, id prp.Identity) []string {
	out := append([]string(nil), args...)
	set := map[string]string{"--runner-id": id.RunnerInstanceID, "--environment-lease-id": id.EnvironmentLeaseID,
		"--run-id": id.RunID, "--session-id": id.NormalizedSessionID, "--turn-id": id.TurnID, "--item-id": id.ItemID}
	for i := 0; i+1 < len(out); i++ {
		if v, ok := set[out[i]]; ok {
			out[i+1] = v
		}
		if out[i] == "--connect-url" { // each run dials its own route (prp.md §1.1)
			out[i+1] = strings.TrimSuffix(out[i+1], prp.ConnectPath(identity.RunID)) + prp.ConnectPath(id.RunID)
		}
	}
	return out
}

// warmE2E is a real runnerd (test-hook build) driving fakeacp under pcwrap,
// dial mode, against the loopback core.
type warmE2E struct {
	c        *coreServer
	bin      string
	dir      string
	args     []string
	provider map[string]any
	meta     string
	pid      any
	// env is added to runnerd's environment at each start (test hooks).
	env []string
}

func newWarmE2E(t *testing.T) *warmE2E {
	c := newCoreServer(t)
	dir := stateDir(t)
	meta := filepath.Join(t.TempDir(), "meta.ndjson")
	return &warmE2E{
		c: c, bin: testbin.Path(t, "runnerd", testbin.HooksTag), dir: dir, meta: meta,
		args: runnerdArgs(dir, "--connect-url", c.connectURL(), "--pcwrap-path", testbin.Path(t, "pcwrap")),
		provider: map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(t),
			"args": []string{"--record-meta", meta}, "cwd": t.TempDir(), "model": "fake-model"},
	}
}

// start launches runnerd as id; kill names a warm kill point ("" none).
func (w *warmE2E) start(t *testing.T, id prp.Identity, kill string) (*exec.Cmd, *syncbuf.Buffer) {
	t.Helper()
	ticket, err := w.c.core.MintTicket()
	require.NoError(t, err)
	buf := &syncbuf.Buffer{}
	cmd := exec.Command(w.bin, asIdentity(w.args, id)...)
	cmd.Env = append(append(os.Environ(), w.env...), "PAPERCLIP_RUNNER_BOOTSTRAP_TICKET="+ticket)
	if kill != "" {
		cmd.Env = append(cmd.Env, "PCRUNNER_TESTHOOK_WARM_KILL="+kill)
	}
	cmd.Stderr = buf
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			waitExit(t, cmd)
		}
		if t.Failed() {
			t.Logf("runnerd (pid %d) stderr:\n%s", cmd.Process.Pid, tail(buf.String(), 30))
		}
	})
	return cmd, buf
}

func (w *warmE2E) run(t *testing.T, typ string, payload any) prp.CommandResultPayload {
	t.Helper()
	b, err := json.Marshal(payload)
	require.NoError(t, err)
	cmd, err := w.c.core.QueueCommand(prp.Command{Type: typ, Payload: b})
	require.NotEmpty(t, cmd.CommandID, "queue %s: %v", typ, err)
	s := w.c.wait(t, func(s control.Snapshot) bool { return s.Results[cmd.CommandID] != nil })
	var res prp.CommandResultPayload
	require.NoError(t, json.Unmarshal(s.Results[cmd.CommandID], &res))
	return res
}

// warmUp prepares fakeacp, opens its session and runs one turn, all ACKed.
func (w *warmE2E) warmUp(t *testing.T) {
	t.Helper()
	res := w.run(t, "run.prepare", map[string]any{"provider": w.provider})
	require.Equal(t, "completed", res.Status, string(res.Result))
	res = w.run(t, "session.open", map[string]any{"reuse": "same_session"})
	require.Equal(t, "completed", res.Status, string(res.Result))
	w.pid = pidOf(t, res.Result)
	require.NotNil(t, w.pid)
	require.Equal(t, "completed", w.run(t, "turn.start", map[string]any{"text": "echo hello"}).Status)
	w.c.wait(t, func(s control.Snapshot) bool {
		return countType(decodeEvents(t, s.Events), "run.terminal") == 1 && s.AckedSourceSeq == int64(len(s.Events))
	})
}

func (w *warmE2E) attachPayload() map[string]any {
	base := strings.TrimSuffix(w.c.connectURL(), prp.ConnectPath(identity.RunID))
	return map[string]any{"provider": w.provider, "paperclipNextAuthority": map[string]any{"identity": warmNext,
		"connection": map[string]any{"mode": "connect", "connectUrl": base + prp.ConnectPath(warmNext.RunID)}}}
}

func pidOf(t *testing.T, result json.RawMessage) any {
	t.Helper()
	var r struct {
		ProcessID any `json:"processId"`
	}
	require.NoError(t, json.Unmarshal(result, &r))
	return r.ProcessID
}

// sessionCalls lists the session/new, load and resume calls fakeacp saw.
func (w *warmE2E) sessionCalls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(w.meta)
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m struct {
			Method string `json:"method"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		out = append(out, m.Method)
	}
	return out
}

// finishOnSameAgent runs a turn under the identity that now owns the
// registration and checks the agent survived everything: same pid on a
// session.open adopt, one session/new in all.
func (w *warmE2E) finishOnSameAgent(t *testing.T) {
	t.Helper()
	before := countType(decodeEvents(t, w.c.core.Snapshot().Events), "run.terminal")
	res := w.run(t, "turn.start", map[string]any{"text": "echo again"})
	require.Equal(t, "completed", res.Status, string(res.Result))
	w.c.wait(t, func(s control.Snapshot) bool {
		return countType(decodeEvents(t, s.Events), "run.terminal") == before+1
	})
	res = w.run(t, "session.open", map[string]any{"reuse": "same_session"})
	require.Equal(t, "completed", res.Status, string(res.Result))
	require.Equal(t, w.pid, pidOf(t, res.Result), "the agent pid is unchanged across the rotation")
	require.Equal(t, []string{"session/new"}, w.sessionCalls(t), "no session/new or session/load after the first")
	s := w.c.core.Snapshot()
	for _, ep := range s.Epochs {
		requireContiguous(t, decodeEvents(t, ep.Events))
	}
	requireContiguous(t, decodeEvents(t, s.Events))
}

// TestPRP24_WarmAttachE2E: scenario 24 over the real runnerd binary and
// the core half on loopback (dial mode): the rotation completes without a
// restart, and the next run's turn runs on the same agent process.
func TestPRP24_WarmAttachE2E(t *testing.T) {
	w := newWarmE2E(t)
	w.start(t, identity, "")
	w.warmUp(t)
	attach, err := w.c.core.QueueCommand(prp.Command{Type: prp.CommandRunAttach, Payload: mustJSON(t, w.attachPayload())})
	require.NoError(t, err)
	s := w.c.wait(t, func(s control.Snapshot) bool { return s.Identity == warmNext && s.Warm == nil })
	require.Len(t, s.Epochs, 1)
	require.NotNil(t, s.Epochs[0].Results[attach.CommandID])
	w.finishOnSameAgent(t)
	require.Equal(t, warmNext, w.c.core.Snapshot().Identity)
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestWarmAttachCrashMatrix kills runnerd with SIGKILL at each phase
// boundary of a rotation, then relaunches it with a fresh ticket under the
// identity the core knows, as the server does (prp.md §9.5):
//
//	kill point    core state at the kill                 next ticket for  attach outcome
//	prepared      result never sent; attach pending      old              execution_indeterminate (replayed)
//	result-sent   result maybe admitted                  old if not, else new (either, as the core says)
//	acked         receipt acknowledged                   new              completed (old epoch)
//	activating    receipt acknowledged                   new              completed (old epoch)
//	reconnected   activating (maybe activated)           new              completed (old epoch)
//	activated     activated                              new              completed (old epoch)
//
// Where the core acknowledged the receipt but saw no activation, it
// settles forward (control.Core.SettleWarmForward) before minting the ticket.
// In every case the relaunched runner holds exactly that identity, the
// next turn runs on the same agent process (no session/new or
// session/load), the attach is never applied twice, and each identity's
// events are contiguous from 1 with none delivered twice.
func TestWarmAttachCrashMatrix(t *testing.T) {
	want := map[string]string{"prepared": "old", "result-sent": "", "acked": "new", "activating": "new",
		"reconnected": "new", "activated": "new"}
	for _, point := range []string{"prepared", "result-sent", "acked", "activating", "reconnected", "activated"} {
		t.Run(point, func(t *testing.T) {
			w := newWarmE2E(t)
			proc, _ := w.start(t, identity, point)
			w.warmUp(t)
			attach, err := w.c.core.QueueCommand(prp.Command{Type: prp.CommandRunAttach, Payload: mustJSON(t, w.attachPayload())})
			require.NotEmpty(t, attach.CommandID, "queue run.attach: %v", err)
			waitExit(t, proc)
			require.Equal(t, syscall.SIGKILL, proc.ProcessState.Sys().(syscall.WaitStatus).Signal(), "killed at %s", point)

			w.c.core.SettleWarmForward()
			s := w.c.core.Snapshot()
			got := "old"
			if s.Identity == warmNext {
				got = "new"
			}
			if want[point] != "" {
				require.Equal(t, want[point], got, "the identity the core issues the next ticket for")
			}
			t.Logf("kill at %s: next ticket for the %s identity", point, got)
			w.start(t, s.Identity, "")
			w.c.wait(t, func(s control.Snapshot) bool { return countType(decodeEvents(t, s.Events), "runner.reconciled") == 1 })

			if got == "old" {
				res := w.run(t, "session.snapshot", map[string]any{}) // behind the re-delivered attach
				require.Equal(t, "completed", res.Status)
				var attachRes prp.CommandResultPayload
				require.NoError(t, json.Unmarshal(w.c.core.Snapshot().Results[attach.CommandID], &attachRes))
				require.Equal(t, "failed", attachRes.Status)
				require.Contains(t, string(attachRes.Result), "execution_indeterminate")
			} else {
				s := w.c.core.Snapshot()
				require.Len(t, s.Epochs, 1)
				var attachRes prp.CommandResultPayload
				require.NoError(t, json.Unmarshal(s.Epochs[0].Results[attach.CommandID], &attachRes))
				require.Equal(t, "completed", attachRes.Status)
			}
			w.finishOnSameAgent(t)
		})
	}
}

// TestPRP24_WarmAttachE2EListen: scenario 24 in listen mode over the real
// runnerd binary: the core dials the listener; after the receipt's ack the
// same socket accepts only the new run's path, where the core's redial
// (the server's ingress loop) finds the runner activating.
func TestPRP24_WarmAttachE2EListen(t *testing.T) {
	w := newWarmE2E(t)
	w.args = runnerdArgs(w.dir, "--listen-address", "127.0.0.1", "--listen-port", "0",
		"--listen-path", prp.ConnectPath(identity.RunID), "--pcwrap-path", testbin.Path(t, "pcwrap"))
	ticket, err := w.c.core.MintTicket()
	require.NoError(t, err)
	cmd := exec.Command(w.bin, w.args...)
	cmd.Env = append(os.Environ(), "PAPERCLIP_RUNNER_BOOTSTRAP_TICKET="+ticket)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	addr := make(chan string, 1)
	logs := &logTail{}
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			_, _ = logs.Write(append(sc.Bytes(), '\n'))
			var rec struct {
				Msg     string `json:"msg"`
				Address string `json:"address"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
				addr <- rec.Address
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-eof
		waitExit(t, cmd)
		if t.Failed() {
			t.Logf("runnerd stderr:\n%s", logs.String())
		}
	})
	var a string
	select {
	case a = <-addr:
	case <-time.After(waitBound):
		t.Fatal("runnerd did not listen")
	}
	wg.Add(1)
	go func() { // the ingress loop: dial the run that owns, or takes over, the registration
		defer wg.Done()
		for ctx.Err() == nil {
			s := w.c.core.Snapshot()
			run := s.Identity.RunID
			if s.Warm != nil {
				run = s.Warm.NewIdentity.RunID
			}
			if w.c.core.Connect(ctx, "ws://"+a+prp.ConnectPath(run)) == nil {
				_ = w.c.core.Wait(ctx, func(s control.Snapshot) bool { return !s.Connected })
			}
			select {
			case <-ctx.Done():
			case <-time.After(crashRedial):
			}
		}
	}()
	w.warmUp(t)
	host, port, err := net.SplitHostPort(a)
	require.NoError(t, err)
	portNum, err := strconv.Atoi(port)
	require.NoError(t, err)
	payload := w.attachPayload()
	payload["paperclipNextAuthority"].(map[string]any)["connection"] = map[string]any{"mode": "listen",
		"listenAddress": host, "listenPort": portNum, "listenPath": prp.ConnectPath(warmNext.RunID)}
	attach, err := w.c.core.QueueCommand(prp.Command{Type: prp.CommandRunAttach, Payload: mustJSON(t, payload)})
	require.NoError(t, err)
	s := w.c.wait(t, func(s control.Snapshot) bool { return s.Identity == warmNext && s.Warm == nil })
	require.Len(t, s.Epochs, 1)
	require.NotNil(t, s.Epochs[0].Results[attach.CommandID])
	w.finishOnSameAgent(t)
}

// TestWarmAttachReceiptLost: the core admits the run.attach result and
// sends its receipt, but the connection drops with the receipt (as a
// half-open link that dies would). The runner reconnects under the old
// identity; the core, its transition pending, delivers nothing more there.
// The runner sends the prepared attach's result again on the new
// connection, the core answers a replayed attach result with its receipt
// (prp.md §9.5), and the rotation completes in the same process: runnerd
// does not give up after its ack wait and exit non-zero.
func TestWarmAttachReceiptLost(t *testing.T) {
	var lost atomic.Bool
	w := newWarmE2E(t)
	w.c = newCoreServerWith(t, func(cfg *control.Config) {
		cfg.Outbound = func(_ string, payload any) (any, error) {
			if p, ok := payload.(prp.CommandResultAckPayload); ok && len(p.WarmTransition) > 0 && lost.CompareAndSwap(false, true) {
				return nil, errors.New("the receipt is lost with the connection")
			}
			return payload, nil
		}
	})
	w.args = runnerdArgs(w.dir, "--connect-url", w.c.connectURL(), "--pcwrap-path", testbin.Path(t, "pcwrap"))
	proc, _ := w.start(t, identity, "")
	w.warmUp(t)
	_, err := w.c.core.QueueCommand(prp.Command{Type: prp.CommandRunAttach, Payload: mustJSON(t, w.attachPayload())})
	require.NoError(t, err)
	w.c.wait(t, func(s control.Snapshot) bool { return s.Identity == warmNext && s.Warm == nil })
	require.True(t, lost.Load(), "the first receipt was lost")
	require.NoError(t, proc.Process.Signal(syscall.Signal(0)), "the same runnerd rotated")
	w.finishOnSameAgent(t)
}
