package acpxtest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// mapTurn maps every inbound message of a turn through the Mapper, the
// way runnerd's session loop will, and settles it.
func mapTurn(mp provider.Mapper, st *provider.MapState, msgs []provider.Inbound, byRunCancel bool) []provider.Event {
	var evs []provider.Event
	for _, m := range msgs {
		switch m.Kind {
		case provider.KindUpdate:
			evs = append(evs, mp.Update(st, m.TurnID, *m.Update)...)
		case provider.KindRequest:
			if m.Permission != nil {
				rr, e := mp.PermissionRequest(st, m.TurnID, m.ID, *m.Permission)
				evs = append(evs, e...)
				if m.Result != nil {
					var r acpx.PermissionResponse
					_ = json.Unmarshal(m.Result, &r)
					evs = append(evs, mp.RequestResolved(rr, provider.ActionOf(rr.Choices, r.Outcome))...)
				}
			}
		case provider.KindTurnSettled:
			evs = append(evs, mp.Settle(st, provider.SettlementOf(*m.Outcome, byRunCancel))...)
		}
	}
	return evs
}

// TestACP01_ColdOpen: initialize (v1, runnerd's clientInfo), then
// session/new with the absolute cwd; the record holds sess-0001; the
// session events validate.
func TestACP01_ColdOpen(t *testing.T) {
	p := startAgent(t, ConnOptions{}, "--runtime-session-id", "harness-42")
	openCold(t, p, "claude")
	rec := p.conn.Record()
	require.Equal(t, "sess-0001", rec.ACPSessionID)
	require.Equal(t, "harness-42", rec.AgentSessionID)
	require.Equal(t, 1, rec.ProtocolVersion)
	require.Equal(t, "/work/repo", rec.Cwd)
	require.Equal(t, "claude", rec.Agent)
	init := p.received(t, provider.MethodInitialize)
	require.Len(t, init, 1)
	params := init[0]["params"].(map[string]any)
	require.EqualValues(t, 1, params["protocolVersion"])
	require.Equal(t, "paperclip-runnerd", params["clientInfo"].(map[string]any)["name"])
	nw := p.received(t, provider.MethodSessionNew)
	require.Len(t, nw, 1)
	require.Equal(t, "/work/repo", nw[0]["params"].(map[string]any)["cwd"])
	evs := testMapper().SessionOpened(rec, false, provider.Descriptor{Agent: "claude", ProviderVersion: "test"})
	require.Equal(t, []string{"harness.ready", "session.started"}, types(evs))
	require.Equal(t, "sess-0001", evs[1].Payload["providerSessionId"])
	prpschema.RequireValidEvents(t, evs)
}

// TestACP02_EchoTurnOverPipes: "echo hi" → turn.started, item.delta
// "hi", turn.completed, one run.result.proposed, one run.terminal. The
// result is the synthesised one of a run with a completion contract
// (tools.md §4: without one, no run.result.proposed).
func TestACP02_EchoTurnOverPipes(t *testing.T) {
	p := startAgent(t, ConnOptions{})
	openCold(t, p, "claude")
	mp, st := testMapper(), &provider.MapState{}
	mp.ContractRevision, mp.CriterionIDs = "rev-1", []string{"crit-1"}
	evs := mp.TurnStarted(st, "turn-1")
	done, err := p.conn.Prompt("turn-1", "echo hi")
	require.NoError(t, err)
	evs = append(evs, mapTurn(mp, st, p.until(t, settled), false)...)
	out := first(t, done)
	require.Equal(t, provider.StopEndTurn, out.StopReason)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, []string{"turn.started", "item.started", "item.delta", "item.completed", "turn.completed", "run.result.proposed", "run.terminal"}, types(evs))
	require.Equal(t, "hi", evs[2].Payload["text"])
	require.Equal(t, "hi", evs[5].Payload["summary"])
}

// TestACP03_StartupBounds: the bound follows the agent name on the
// injected clock: codex (and unknown agents) 30 s, claude 60 s; a slow
// initialize inside the bound completes.
func TestACP03_StartupBounds(t *testing.T) {
	for _, tc := range []struct {
		agent string
		bound time.Duration
	}{{"codex", 30 * time.Second}, {"claude", 60 * time.Second}, {"my-agent", 30 * time.Second}} {
		t.Run(tc.agent, func(t *testing.T) {
			clk := newFakeClock()
			p := startAgent(t, ConnOptions{Clock: clk}, "--hang-on-initialize")
			errc := make(chan error, 1)
			go func() {
				errc <- p.conn.Open(context.Background(), OpenOptions{Agent: tc.agent, Command: "/opt/bin/fakeacp", Args: []string{"--secret"}, Cwd: "/w"})
			}()
			clk.waitArmed(t, tc.bound)
			clk.advance(tc.bound - time.Millisecond)
			select {
			case err := <-errc:
				t.Fatalf("open ended before the bound: %v", err)
			default:
			}
			clk.advance(time.Millisecond)
			err := first(t, errc)
			require.Equal(t, provider.ClassSessionHandshakeTimeout, provider.ClassOf(err))
			require.Equal(t, "ACP agent fakeacp did not complete ACP initialization within "+strconv.FormatInt(tc.bound.Milliseconds(), 10)+"ms", err.(*provider.Failure).Message)
			require.True(t, p.conn.Record().ResetOnNextEnsure)
		})
	}
	t.Run("slow-init-completes", func(t *testing.T) {
		p := startAgentEnv(t, ConnOptions{Clock: newFakeClock()}, []string{"FAKEACP_INIT_DELAY_MS=200"})
		openCold(t, p, "claude")
		require.Equal(t, "sess-0001", p.conn.Record().ACPSessionID)
	})
}

// TestACP04_HangOnNewSession: at the bound the open fails with
// session_handshake_timeout and no provider event; the record is not
// reusable, so the next session.open runs session/new, never session/load.
func TestACP04_HangOnNewSession(t *testing.T) {
	clk := newFakeClock()
	p := startAgent(t, ConnOptions{Clock: clk}, "--hang-on-new-session", "--supports-load-session")
	errc := make(chan error, 1)
	go func() {
		errc <- p.conn.Open(context.Background(), OpenOptions{Agent: "codex", Command: "fakeacp", Cwd: "/w"})
	}()
	clk.waitArmed(t, acpx.ColdOpenBoundDefault)
	deadline := time.After(testWait)
	for len(p.received(t, provider.MethodSessionNew)) == 0 {
		select {
		case <-deadline:
			t.Fatal("session/new never sent")
		case <-time.After(10 * time.Millisecond):
		}
	}
	clk.advance(acpx.ColdOpenBoundDefault)
	require.Equal(t, provider.ClassSessionHandshakeTimeout, provider.ClassOf(first(t, errc)))
	rec := p.conn.Record()
	require.True(t, rec.ResetOnNextEnsure)
	require.False(t, rec.Reusable("/w", "fakeacp", nil))
	p.killGroup()
	first(t, p.conn.Done())
	select {
	case m, ok := <-p.conn.Inbox():
		require.False(t, ok, "no provider message may surface: %+v", m)
	default:
	}
}

// TestACP05_StdoutBanner: three banner lines are skipped and counted
// and the session works; ten fail it; an 11 MB line fails with
// "stdout frame exceeded".
func TestACP05_StdoutBanner(t *testing.T) {
	p := startAgent(t, ConnOptions{}, "--stdout-banner", "3")
	openCold(t, p, "claude")
	require.EqualValues(t, 3, p.conn.Record().Process.Wire.SkippedLines)

	p = startAgentEnv(t, ConnOptions{}, []string{"FAKEACP_STDOUT_BANNER=10"})
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	err := p.conn.Open(ctx, OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/w"})
	require.ErrorIs(t, err, provider.ErrTooManyBadLines)
	require.Equal(t, provider.LossRPCFailure, provider.LossReasonOf(p.conn.Err()))

	p = startAgent(t, ConnOptions{}, "--huge-line-bytes", "11000000")
	err = p.conn.Open(ctx, OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/w"})
	require.ErrorIs(t, err, provider.ErrFrameExceeded)
	require.Equal(t, "stdout frame exceeded", p.conn.Err().Error())
}

// TestACP06_AuthAndVersion: -32000 on session/new is
// authentication_required (one session/new, no retry); protocol version 2
// is acp_session_init_failed before any session/new.
func TestACP06_AuthAndVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	p := startAgent(t, ConnOptions{}, "--auth-required-on-new")
	err := p.conn.Open(ctx, OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/w"})
	require.Equal(t, provider.ClassAuthenticationRequired, provider.ClassOf(err))
	require.Len(t, p.received(t, provider.MethodSessionNew), 1)

	p = startAgent(t, ConnOptions{}, "--protocol-version", "2")
	err = p.conn.Open(ctx, OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/w"})
	require.Equal(t, provider.ClassACPSessionInitFailed, provider.ClassOf(err))
	require.Empty(t, p.received(t, provider.MethodSessionNew))
}

// TestACP07_ExitDuringStartup: the agent exits 1 with a stderr line
// before answering → agent_startup_*; a missing command → agent_spawn_failed.
func TestACP07_ExitDuringStartup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	p := startAgent(t, ConnOptions{}, "--exit-during-startup", "1")
	err := p.conn.Open(ctx, OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/w"})
	require.Error(t, err)
	first(t, p.conn.Done())
	var ee *exec.ExitError
	require.ErrorAs(t, p.wait(), &ee)
	f := provider.ClassifyStartupExit(ee.ExitCode(), false, true, p.stderr.String() != "")
	require.Equal(t, provider.ClassAgentStartupExitNonzero, f.Class)
	require.True(t, strings.HasPrefix(string(f.Class), "agent_startup_"))

	// pcwrap reports a spawn failure as exit 127 before initialize.
	require.Equal(t, provider.ClassAgentSpawnFailed, provider.ClassifyStartupExit(127, false, true, false).Class)
	_, err = exec.LookPath("does-not-exist")
	require.Error(t, err)
}

// TestACP08_CancelSleep: session/cancel during "sleep 10000" → the
// prompt answers cancelled, the turn is interrupted, the record is reset.
func TestACP08_CancelSleep(t *testing.T) {
	p := startAgent(t, ConnOptions{})
	openCold(t, p, "claude")
	mp, st := testMapper(), &provider.MapState{}
	evs := mp.TurnStarted(st, "turn-1")
	_, err := p.conn.Prompt("turn-1", "sleep 10000")
	require.NoError(t, err)
	waitReceived(t, p, provider.MethodSessionPrompt, 1)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	out, err := p.conn.Cancel(ctx)
	require.NoError(t, err)
	require.True(t, out.Cancelled)
	require.Equal(t, provider.StopCancelled, out.StopReason)
	require.Len(t, p.received(t, provider.MethodSessionCancel), 1)
	require.True(t, p.conn.Record().ResetOnNextEnsure)
	evs = append(evs, mapTurn(mp, st, p.until(t, settled), false)...)
	prpschema.RequireValidEvents(t, evs)
	n := countTypes(evs)
	require.Equal(t, 1, n["turn.interrupted"])
	require.Equal(t, 0, n["run.result.proposed"], "no synthetic result without a contract (tools.md §4)")
	require.Equal(t, 1, n["run.terminal"])
}

func waitReceived(t *testing.T, p *agentProc, method string, n int) {
	t.Helper()
	deadline := time.After(testWait)
	for len(p.received(t, method)) < n {
		select {
		case <-deadline:
			t.Fatalf("fakeacp never received %d %s", n, method)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestACP09_CancelIgnored: an agent that ignores session/cancel is
// given CancelGrace on the injected clock, then the turn is abandoned as
// interrupted and its group killed; its late answer is dropped as stale.
func TestACP09_CancelIgnored(t *testing.T) {
	clk := newFakeClock()
	p := startAgent(t, ConnOptions{Clock: clk}, "--cancel-mode", "ignore")
	openCold(t, p, "claude")
	_, err := p.conn.Prompt("turn-1", "sleep 60000")
	require.NoError(t, err)
	waitReceived(t, p, provider.MethodSessionPrompt, 1)
	type res struct {
		out provider.TurnOutcome
		err error
	}
	rc := make(chan res, 1)
	go func() {
		out, err := p.conn.Cancel(context.Background())
		rc <- res{out, err}
	}()
	clk.waitArmed(t, acpx.CancelGrace)
	clk.advance(acpx.CancelGrace)
	r := first(t, rc)
	require.ErrorIs(t, r.err, errCancelGraceExpired)
	require.True(t, r.out.Cancelled)
	require.Equal(t, provider.EndInterrupted, provider.SettlementOf(r.out, false).Ending)
	p.killGroup()
	first(t, p.conn.Done())
	require.Error(t, p.wait())
	require.Empty(t, p.conn.Record().Process.Wire.Turn)
}

// TestACP10_CancelModes: end-turn and error answers after a cancel
// both settle as cancelled.
func TestACP10_CancelModes(t *testing.T) {
	for _, mode := range []string{"end-turn", "error", "cancelled"} {
		t.Run(mode, func(t *testing.T) {
			p := startAgent(t, ConnOptions{}, "--cancel-mode", mode)
			openCold(t, p, "claude")
			_, err := p.conn.Prompt("turn-1", "sleep 10000")
			require.NoError(t, err)
			waitReceived(t, p, provider.MethodSessionPrompt, 1)
			ctx, cancel := context.WithTimeout(context.Background(), testWait)
			defer cancel()
			out, err := p.conn.Cancel(ctx)
			require.NoError(t, err)
			require.True(t, out.Cancelled)
			require.Equal(t, provider.StopCancelled, out.StopReason)
		})
	}
}

// TestACP11_Permissions: approve-all selects allow_once, deny-all
// reject_once; a permission pending at cancel is answered cancelled.
func TestACP11_Permissions(t *testing.T) {
	for _, tc := range []struct {
		mode   provider.PermissionMode
		option string
	}{{provider.ApproveAll, "allow"}, {provider.DenyAll, "reject"}} {
		t.Run(string(tc.mode), func(t *testing.T) {
			p := startAgent(t, ConnOptions{Permissions: tc.mode})
			openCold(t, p, "claude")
			mp, st := testMapper(), &provider.MapState{}
			evs := mp.TurnStarted(st, "turn-1")
			_, err := p.conn.Prompt("turn-1", "permission allow")
			require.NoError(t, err)
			evs = append(evs, mapTurn(mp, st, p.until(t, settled), false)...)
			prpschema.RequireValidEvents(t, evs)
			n := countTypes(evs)
			require.Equal(t, 1, n["runtime_request.created"])
			require.Equal(t, 1, n["runtime_request.resolved"])
			var answered bool
			for _, l := range p.wire(t) {
				if l.Dir == "in" && strings.Contains(string(l.Msg), `"optionId":"`+tc.option+`"`) {
					answered = true
				}
			}
			require.True(t, answered, "fakeacp never received optionId %q", tc.option)
		})
	}
	t.Run("pending-at-cancel", func(t *testing.T) {
		p := startAgent(t, ConnOptions{})
		openCold(t, p, "claude")
		_, err := p.conn.Prompt("turn-1", "permission allow")
		require.NoError(t, err)
		p.until(t, func(m provider.Inbound) bool { return m.Permission != nil })
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		out, err := p.conn.Cancel(ctx)
		require.NoError(t, err)
		require.True(t, out.Cancelled)
		var sawCancelled bool
		for _, l := range p.wire(t) {
			if l.Dir == "in" && strings.Contains(string(l.Msg), `"outcome":{"outcome":"cancelled"}`) {
				sawCancelled = true
			}
		}
		require.True(t, sawCancelled)
	})
}

// TestACP12_LateUpdates: updates after the prompt answer are dropped
// and counted; the next turn sees only its own output.
func TestACP12_LateUpdates(t *testing.T) {
	p := startAgent(t, ConnOptions{}, "--late-updates", "3")
	openCold(t, p, "claude")
	_, err := p.conn.Prompt("turn-1", "echo one")
	require.NoError(t, err)
	p.until(t, settled)
	waitLate := time.After(testWait)
	for p.conn.Record().Process.Wire.LateUpdates < 3 {
		select {
		case <-waitLate:
			t.Fatal("late updates not counted")
		case <-time.After(10 * time.Millisecond):
		}
	}
	mp, st := testMapper(), &provider.MapState{}
	_, err = p.conn.Prompt("turn-2", "echo two")
	require.NoError(t, err)
	msgs := p.until(t, settled)
	evs := mapTurn(mp, st, msgs, false)
	var text string
	for _, e := range evs {
		if e.EventType == "item.delta" {
			require.Equal(t, "turn-2", e.TurnID)
			text += e.Payload["text"].(string)
		}
	}
	require.Equal(t, "two", text)
}

// TestACP13_CrashMidTurn: stdout EOF or SIGKILL mid-turn ends the
// connection as agent_disconnected; the mapping yields harness.exited, a
// failed turn with one result and one terminal, and session.failed.
func TestACP13_CrashMidTurn(t *testing.T) {
	for _, mode := range []string{"eof", "sigkill"} {
		t.Run(mode, func(t *testing.T) {
			p := startAgent(t, ConnOptions{}, "--crash-mid-turn", mode)
			openCold(t, p, "claude")
			done, err := p.conn.Prompt("turn-1", "echo never")
			require.NoError(t, err)
			_, ok := recv(t, done)
			require.False(t, ok, "no outcome: the agent is gone")
			first(t, p.conn.Done())
			require.Equal(t, provider.ClassAgentDisconnected, provider.ClassOf(p.conn.Err()))
			werr := p.wait()
			var code *int
			signal := ""
			var ee *exec.ExitError
			if errors.As(werr, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					signal = ws.Signal().String()
				} else {
					c := ee.ExitCode()
					code = &c
				}
			} else {
				zero := 0
				code = &zero
			}
			if mode == "sigkill" {
				require.Equal(t, "killed", signal)
			}
			mp, st := testMapper(), &provider.MapState{}
			evs := mp.TurnStarted(st, "turn-1")
			evs = append(evs, mp.AgentExited(st, "turn-1", code, signal)...)
			prpschema.RequireValidEvents(t, evs)
			require.Equal(t, "harness.exited", evs[1].EventType)
			require.Equal(t, "provider_exit", evs[2].Payload["lossReason"])
			require.Equal(t, "session.failed", evs[len(evs)-1].EventType)
			require.Equal(t, "agent_disconnected", evs[len(evs)-1].Payload["code"])
		})
	}
}

// TestACP14_BusyPrompt: a second turn while one is outstanding is
// refused locally; fakeacp sees exactly one session/prompt.
func TestACP14_BusyPrompt(t *testing.T) {
	p := startAgent(t, ConnOptions{}, "--busy-prompt", "reject")
	openCold(t, p, "claude")
	_, err := p.conn.Prompt("turn-1", "sleep 10000")
	require.NoError(t, err)
	_, err = p.conn.Prompt("turn-2", "echo x")
	require.ErrorIs(t, err, provider.ErrTurnActive)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err = p.conn.Cancel(ctx)
	require.NoError(t, err)
	require.Len(t, p.received(t, provider.MethodSessionPrompt), 1)
}

// TestACP15_LoadAfterLoss: a prompted record resumes on a new agent
// via session/load; its 5 replayed updates are not forwarded; with
// --load-fail-code -32002 the open fails session_resume_required. An agent
// advertising resume gets session/resume instead.
func TestACP15_LoadAfterLoss(t *testing.T) {
	first := startAgent(t, ConnOptions{})
	openCold(t, first, "claude")
	_, err := first.conn.Prompt("turn-1", "echo remember")
	require.NoError(t, err)
	first.until(t, settled)
	rec := first.conn.Record()
	require.True(t, rec.Prompted)
	rec.Process = nil // the agent is gone
	require.True(t, rec.Reusable("/work/repo", "fakeacp", nil))

	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	p := startAgent(t, ConnOptions{Record: rec}, "--supports-load-session", "--load-replay", "5")
	require.NoError(t, p.conn.Open(ctx, OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/work/repo", Resume: true}))
	require.EqualValues(t, 5, p.conn.Record().Process.Wire.ReplayedUpdates)
	require.Len(t, p.received(t, provider.MethodSessionLoad), 1)
	require.Empty(t, p.received(t, provider.MethodSessionNew))
	select {
	case m := <-p.conn.Inbox():
		t.Fatalf("replayed update forwarded: %+v", m)
	default:
	}
	evs := testMapper().SessionOpened(p.conn.Record(), true, provider.Descriptor{Agent: "claude"})
	require.Equal(t, "session.resumed", evs[1].EventType)

	p = startAgent(t, ConnOptions{Record: rec}, "--supports-load-session", "--load-fail-code", "-32002")
	err = p.conn.Open(ctx, OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/work/repo", Resume: true})
	require.Equal(t, provider.ClassSessionResumeRequired, provider.ClassOf(err))

	p = startAgent(t, ConnOptions{Record: rec}, "--supports-resume")
	require.NoError(t, p.conn.Open(ctx, OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/work/repo", Resume: true}))
	require.Len(t, p.received(t, provider.MethodSessionResume), 1)

	p = startAgent(t, ConnOptions{Record: rec})
	err = p.conn.Open(ctx, OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/work/repo", Resume: true})
	require.Equal(t, provider.ClassSessionResumeRequired, provider.ClassOf(err), "neither load nor resume advertised")
}

// TestACP17_StubbornGrandchild: the grandchild ignores SIGTERM and
// survives a group SIGTERM; the group SIGKILL that follows the grace
// leaves nothing alive.
func TestACP17_StubbornGrandchild(t *testing.T) {
	p := startAgent(t, ConnOptions{}, "--stubborn-grandchild")
	openCold(t, p, "claude")
	m := regexp.MustCompile(`grandchild pid (\d+)`).FindStringSubmatch(p.stderr.String())
	require.NotNil(t, m, p.stderr.String())
	pid, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	pgid, err := syscall.Getpgid(pid)
	require.NoError(t, err)
	require.Equal(t, p.cmd.Process.Pid, pgid, "the grandchild stays in the agent's group")
	require.NoError(t, syscall.Kill(-pgid, syscall.SIGTERM))
	first(t, p.conn.Done())
	_ = p.wait()
	require.NoError(t, syscall.Kill(pid, 0), "the grandchild ignored SIGTERM")
	require.NoError(t, syscall.Kill(-pgid, syscall.SIGKILL))
	deadline := time.After(testWait)
	for syscall.Kill(pid, 0) == nil && !isZombie(pid) {
		select {
		case <-deadline:
			t.Fatal("grandchild survived SIGKILL")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// isZombie reports a dead process not yet reaped by its (re)parent.
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// TestACP18_CancelOwnTerminal: fakeacp cancels its own pending
// terminal/create during a cancel; runnerd answers it -32800.
func TestACP18_CancelOwnTerminal(t *testing.T) {
	p := startAgent(t, ConnOptions{HoldUnsupported: true}, "--cancel-own-terminal")
	openCold(t, p, "claude")
	_, err := p.conn.Prompt("turn-1", "terminal echo hi")
	require.NoError(t, err)
	req := p.until(t, func(m provider.Inbound) bool { return m.Method == "terminal/create" })
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	out, err := p.conn.Cancel(ctx)
	require.NoError(t, err)
	require.True(t, out.Cancelled)
	id := string(req[len(req)-1].ID)
	var answered bool
	for _, l := range p.wire(t) {
		if l.Dir == "in" && strings.Contains(string(l.Msg), `"code":-32800`) && strings.Contains(string(l.Msg), `"id":`+id) {
			answered = true
		}
	}
	require.True(t, answered, "terminal/create %s was not answered -32800", id)
}

// TestUnsupportedMethodsAnswered: fs/* and terminal/* get -32601 (runnerd
// advertises neither) and the turn completes.
func TestUnsupportedMethodsAnswered(t *testing.T) {
	p := startAgent(t, ConnOptions{})
	openCold(t, p, "claude")
	for i, prompt := range []string{"read /etc/hostname", "write /tmp/x y", "terminal true", "plan", "think hard", "usage", "refuse", "max_tokens", "fail -32603"} {
		turn := "turn-" + strconv.Itoa(i)
		mp, st := testMapper(), &provider.MapState{}
		evs := mp.TurnStarted(st, turn)
		_, err := p.conn.Prompt(turn, prompt)
		require.NoError(t, err)
		evs = append(evs, mapTurn(mp, st, p.until(t, settled), false)...)
		prpschema.RequireValidEvents(t, evs)
		require.Equal(t, 1, countTypes(evs)["run.terminal"], prompt)
	}
	require.NotEmpty(t, p.received(t, ""), "fakeacp received -32601 answers")
}
