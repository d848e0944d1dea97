// Package peers runs internal/acpx against real ACP agents. T1 is the
// TypeScript SDK's example agent (acp.md §9), installed by
// `npm ci --prefix test/peers`; the tests skip with a clear message when
// node or the install is absent.
package peers

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/acpx/acpxtest"
	"github.com/pcrunner/pcrunner/internal/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// exampleAgent is the SDK example agent, pinned by package.json (1.8.0 is
// the last release that ships it).
var exampleAgent = filepath.Join("node_modules", "@agentclientprotocol", "sdk", "dist", "examples", "agent.js")

// peerWait bounds every wait on the node process: the example turn takes
// about five seconds by design (five 1 s model pauses).
const peerWait = 30 * time.Second

type peer struct {
	cmd   *exec.Cmd
	conn  *acpxtest.Conn
	stdin io.WriteCloser
}

func startPeer(t *testing.T, opts acpxtest.ConnOptions) *peer {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not on PATH; the T1 real-peer test needs Node 20+")
	}
	if _, err := os.Stat(exampleAgent); err != nil {
		t.Skipf("%s missing; install the real peer with `npm ci --prefix test/peers`", exampleAgent)
	}
	p := &peer{cmd: exec.Command(node, exampleAgent)}
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.WaitDelay = time.Second
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	p.conn = acpxtest.NewConn(stdout, p.stdin, opts)
	t.Cleanup(func() {
		_ = p.stdin.Close()
		select {
		case <-p.conn.Done():
		case <-time.After(peerWait):
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.conn.Done()
		_ = p.cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), peerWait)
	defer cancel()
	cwd, err := os.Getwd()
	require.NoError(t, err)
	require.NoError(t, p.conn.Open(ctx, acpxtest.OpenOptions{Agent: "example", Command: "node", Cwd: cwd}))
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{32}$`), p.conn.Record().ACPSessionID)
	return p
}

func (p *peer) until(t *testing.T, pred func(provider.Inbound) bool) []provider.Inbound {
	t.Helper()
	var got []provider.Inbound
	deadline := time.After(peerWait)
	for {
		select {
		case m, ok := <-p.conn.Inbox():
			if !ok {
				t.Fatalf("connection ended: %v", p.conn.Err())
			}
			got = append(got, m)
			if pred(m) {
				return got
			}
		case <-deadline:
			t.Fatalf("no matching message after %d", len(got))
		}
	}
}

// TestACP25_SDKExampleAgent drives T1 through acpx over plain pipes:
// a full turn whose permission request is answered by approve-all ends
// end_turn; a cancel during its permission request and one during a model
// pause both settle as cancelled.
func TestACP25_SDKExampleAgent(t *testing.T) {
	t.Run("full-turn", func(t *testing.T) {
		t.Parallel()
		p := startPeer(t, acpxtest.ConnOptions{Permissions: provider.ApproveAll})
		mp, st := provider.Mapper{Provider: "example"}, &provider.MapState{}
		evs := mp.TurnStarted(st, "turn-1")
		done, err := p.conn.Prompt("turn-1", "hello")
		require.NoError(t, err)
		var sawPermission bool
		for _, m := range p.until(t, func(m provider.Inbound) bool { return m.Kind == provider.KindTurnSettled }) {
			switch {
			case m.Kind == provider.KindUpdate:
				evs = append(evs, mp.Update(st, m.TurnID, *m.Update)...)
			case m.Permission != nil:
				sawPermission = true
				require.Equal(t, "call_2", m.Permission.ToolCall.ToolCallID)
				var r acpx.PermissionResponse
				require.NoError(t, json.Unmarshal(m.Result, &r))
				require.Equal(t, provider.PermissionOutcome{Outcome: "selected", OptionID: "allow"}, r.Outcome)
				rr, e := mp.PermissionRequest(st, m.TurnID, m.ID, *m.Permission)
				evs = append(evs, e...)
				evs = append(evs, mp.RequestResolved(rr, provider.ActionOf(rr.Choices, r.Outcome))...)
			case m.Kind == provider.KindTurnSettled:
				evs = append(evs, mp.Settle(st, provider.SettlementOf(*m.Outcome, false))...)
			}
		}
		require.True(t, sawPermission)
		out := <-done
		require.Equal(t, provider.StopEndTurn, out.StopReason)
		n := map[string]int{}
		for _, e := range evs {
			n[e.EventType]++
		}
		require.Equal(t, 2, n["tool.execution.started"], "call_1 and call_2")
		require.Equal(t, 2, n["tool.execution.completed"])
		require.Equal(t, 1, n["runtime_request.created"])
		require.Equal(t, 1, n["turn.completed"])
		require.Equal(t, 0, n["run.result.proposed"], "no synthetic result without a completion contract (tools.md §4)")
		require.Equal(t, 1, n["run.terminal"])
	})
	t.Run("cancel-during-permission", func(t *testing.T) {
		t.Parallel()
		p := startPeer(t, acpxtest.ConnOptions{})
		_, err := p.conn.Prompt("turn-1", "hello")
		require.NoError(t, err)
		p.until(t, func(m provider.Inbound) bool { return m.Permission != nil })
		ctx, cancel := context.WithTimeout(context.Background(), peerWait)
		defer cancel()
		out, err := p.conn.Cancel(ctx)
		require.NoError(t, err)
		require.True(t, out.Cancelled, "the agent answers end_turn; after a cancel that is cancelled")
		require.Equal(t, provider.StopCancelled, out.StopReason)
	})
	t.Run("cancel-during-pause", func(t *testing.T) {
		t.Parallel()
		p := startPeer(t, acpxtest.ConnOptions{})
		_, err := p.conn.Prompt("turn-1", "hello")
		require.NoError(t, err)
		p.until(t, func(m provider.Inbound) bool { return m.Kind == provider.KindUpdate })
		ctx, cancel := context.WithTimeout(context.Background(), peerWait)
		defer cancel()
		out, err := p.conn.Cancel(ctx)
		require.NoError(t, err)
		require.True(t, out.Cancelled)
		// An unknown session is an internal error in this agent (-32603).
		_, err = p.conn.Call(ctx, provider.MethodSessionPrompt, acpx.PromptParams{SessionID: "nope", Prompt: []provider.ContentBlock{{Type: "text", Text: "x"}}})
		var rpcErr *provider.RPCError
		require.ErrorAs(t, err, &rpcErr)
		require.Equal(t, provider.CodeInternalError, rpcErr.Code)
	})
}
