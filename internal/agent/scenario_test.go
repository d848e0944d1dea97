package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/procsession"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// agentPgid reads the agent's process group from .pcwrap.child.
func agentPgid(t testing.TB, dir string) int {
	t.Helper()
	var rec struct {
		Pgid int `json:"pgid"`
	}
	eventually(t, ".pcwrap.child", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, sessiondir.ChildFile))
		return err == nil && json.Unmarshal(b, &rec) == nil && rec.Pgid > 0
	})
	return rec.Pgid
}

func groupAlive(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }

func (r *rig) cancel(kind CancelKind) map[string]any {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	res, err := r.m.Cancel(ctx, kind)
	require.NoError(r.t, err)
	var out map[string]any
	require.NoError(r.t, json.Unmarshal(res, &out))
	return out
}

// waitStarted waits until the agent has begun the turn (a first delta or
// tool call is committed).
func (r *rig) waitTurnRunning(typ string) {
	r.t.Helper()
	r.sink.waitEvent(r.t, typ)
}

// TestACP08_Interrupt: sleep 10000 then turn.interrupt → session/cancel,
// prompt answered cancelled, turn.interrupted, agent stopped, record
// resetOnNextEnsure (acp.md §11 scenario 8).
func TestACP08_Interrupt(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	r.turn("sleep 10000")
	r.waitTurnRunning("turn.started")
	res := r.cancel(Interrupt)
	require.Equal(t, "interrupt_requested", res["status"])
	require.Equal(t, "turn.interrupt", res["reason"])
	st, evs := r.sink.snapshot()
	require.Equal(t, 1, count(evs, "turn.interrupted"))
	require.Equal(t, 1, count(evs, "run.terminal"))
	require.Equal(t, "interrupted", payloadOf(evs, "run.terminal")["turnTerminalState"])
	require.Equal(t, "cancelled", payloadOf(evs, "turn.interrupted")["stopReason"])
	require.True(t, st.Session.ResetOnNextEnsure)
	require.Nil(t, st.Session.Process, "the agent is stopped")
}

// TestACP09_CancelIgnored: an agent that ignores session/cancel is
// stopped after the grace; the turn ends interrupted (scenario 9).
func TestACP09_CancelIgnored(t *testing.T) {
	r := newRig(t)
	r.prepare("--cancel-mode", "ignore")
	r.open()
	r.turn("sleep 30000")
	pgid := agentPgid(t, r.sessionDir())
	r.waitTurnRunning("turn.started")
	res := r.cancel(StopTurn)
	require.Equal(t, true, res["providerExitConfirmed"])
	_, evs := r.sink.snapshot()
	require.Equal(t, 1, count(evs, "turn.interrupted"))
	require.Equal(t, 1, count(evs, "run.terminal"))
	eventually(t, "agent group gone", func() bool { return !groupAlive(pgid) })
}

// TestACP10_RunCancel: run.cancel settles as turn.cancelled with a
// cancelled run terminal state (scenarios 10 and acp.md §4.4 step 5).
func TestACP10_RunCancel(t *testing.T) {
	for _, mode := range []string{"end-turn", "error"} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t)
			r.prepare("--cancel-mode", mode)
			r.open()
			r.turn("sleep 10000")
			r.waitTurnRunning("turn.started")
			r.cancel(RunCancel)
			_, evs := r.sink.snapshot()
			require.Equal(t, 1, count(evs, "turn.cancelled"))
			term := payloadOf(evs, "run.terminal")
			require.Equal(t, "cancelled", term["turnTerminalState"])
			require.Equal(t, "cancelled", term["runTerminalState"])
		})
	}
}

// TestACP11_Permission: approve-all selects allow_once; deny-all
// reject_once; both answer at once with no PRP event (scenario 11;
// tools.md §6 replaced the policy-resolved runtime_request events).
func TestACP11_Permission(t *testing.T) {
	for mode, want := range map[string]string{"approve-all": "allow", "deny-all": "reject"} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t)
			desc := map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude",
				"command": fakeacpBin(t), "cwd": t.TempDir(), "permissionMode": mode}}
			b, _ := json.Marshal(desc)
			_, err := r.m.Prepare(b)
			require.NoError(t, err)
			r.open()
			r.turn("permission " + want)
			evs := r.sink.waitEvent(t, "run.terminal")
			require.Zero(t, count(evs, "runtime_request.created"))
			require.Zero(t, count(evs, "runtime_request.resolved"))
			require.Contains(t, said(evs), "permission outcome "+want)
			require.Equal(t, "completed", payloadOf(evs, "run.terminal")["turnTerminalState"])
		})
	}
}

// TestACP13_CrashMidTurn: the agent dies mid-turn (stdout EOF or
// SIGKILL) → harness.exited, turn.failed, session.failed
// (agent_disconnected), one result and one terminal (scenario 13).
func TestACP13_CrashMidTurn(t *testing.T) {
	for _, mode := range []string{"eof", "sigkill"} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t)
			r.prepare("--crash-mid-turn", mode)
			r.open()
			r.turn("echo boom")
			evs := r.sink.waitEvent(t, "session.failed")
			require.Equal(t, 1, count(evs, "harness.exited"))
			require.Equal(t, 1, count(evs, "turn.failed"))
			require.Equal(t, 0, count(evs, "run.result.proposed"), "no synthetic result without a completion contract (tools.md §4)")
			require.Equal(t, 1, count(evs, "run.terminal"))
			require.Equal(t, "agent_disconnected", payloadOf(evs, "session.failed")["code"])
			require.Equal(t, "provider_exit", payloadOf(evs, "harness.diagnostic")["lossReason"])
		})
	}
}

// TestACP05_StdoutBanner: three banner lines are skipped and the
// session works; a line over 10 MiB fails the session with "stdout frame
// exceeded" on runnerd's stderr (scenario 5).
func TestACP05_StdoutBanner(t *testing.T) {
	r := newRig(t)
	r.prepare("--stdout-banner", "3")
	r.open()
	r.turn("echo ok")
	evs := r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, "completed", payloadOf(evs, "run.terminal")["turnTerminalState"])

	t.Run("huge line", func(t *testing.T) {
		// An 11 MB line arrives as ~170 event files, and every commit
		// persists the growing partial line with the session record, so
		// under -race on a loaded 2-core machine this took over the
		// claude cold bound (60 s) once. The bound under test is the
		// line's size, not the open's time: give the open room.
		const hugeLineBound = 3 * time.Minute
		stderr := &syncbuf.Buffer{}
		r := newRig(t, func(c *Config) {
			c.Stderr = stderr
			c.ColdBound = func(string) time.Duration { return hugeLineBound }
		})
		r.prepare("--huge-line-bytes", "11000000")
		require.Equal(t, string(provider.ClassProviderFrameTooLarge), r.openErrWithin(hugeLineBound).Code)
		require.Contains(t, stderr.String(), "stdout frame exceeded\n")
		entries, _ := os.ReadDir(filepath.Join(r.state, processSessionsDir))
		require.Empty(t, entries, "the agent is stopped")
	})

	t.Run("too many", func(t *testing.T) {
		r := newRig(t, func(c *Config) { c.ColdBound = func(string) time.Duration { return 3 * time.Second } })
		r.prepare("--stdout-banner", strconv.Itoa(provider.MaxConsecutiveBadLines))
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		_, err := r.m.Open(ctx, "cmd-open")
		require.Error(t, err)
	})
}

// TestACP29_LossBetweenTurns: the agent exits while idle; the next
// turn.start fails at once with provider_exit (scenario 29).
func TestACP29_LossBetweenTurns(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	pgid := agentPgid(t, r.sessionDir())
	require.NoError(t, syscall.Kill(-pgid, syscall.SIGKILL))
	r.sink.waitEvent(t, "harness.exited")
	eventually(t, "process forgotten", func() bool { st, _ := r.sink.snapshot(); return st.Session.Process == nil })
	n := len(func() []provider.Event { _, e := r.sink.snapshot(); return e }())
	r.turn("echo late")
	_, evs := r.sink.snapshot()
	evs = since(evs, n)
	require.Equal(t, []string{"turn.submitted", "turn.started", "harness.diagnostic", "turn.failed", "run.terminal"}, types(evs))
	require.Equal(t, "provider_exit", payloadOf(evs, "harness.diagnostic")["lossReason"])
}

// TestACP26_PcwrapKilled: kill -9 pcwrap (not the agent) mid-turn →
// harness.diagnostic{transport_closed}, turn.failed, one result, one
// terminal; the agent group is gone (scenario 26).
func TestACP26_PcwrapKilled(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	r.turn("sleep 30000")
	pgid := agentPgid(t, r.sessionDir())
	r.waitTurnRunning("turn.started")
	r.m.mu.Lock()
	pid := r.m.proc.pid
	r.m.mu.Unlock()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	evs := r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, "transport_closed", payloadOf(evs, "harness.diagnostic")["lossReason"])
	require.Equal(t, 1, count(evs, "turn.failed"))
	require.Equal(t, 0, count(evs, "run.result.proposed"), "no synthetic result without a completion contract (tools.md §4)")
	eventually(t, "agent group gone", func() bool { return !groupAlive(pgid) })
}

// TestACP27_SessionDirRemoved: rm -rf of the session directory
// mid-turn → transport_closed, the same terminal sequence (scenario 27).
func TestACP27_SessionDirRemoved(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	r.turn("sleep 30000")
	dir := r.sessionDir()
	pgid := agentPgid(t, dir)
	r.waitTurnRunning("turn.started")
	require.NoError(t, os.RemoveAll(dir))
	evs := r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, "transport_closed", payloadOf(evs, "harness.diagnostic")["lossReason"])
	require.Equal(t, "failed", payloadOf(evs, "run.terminal")["turnTerminalState"])
	eventually(t, "agent group gone", func() bool { return !groupAlive(pgid) })
}

// TestACP17_StubbornGrandchildClose: session.close with a grandchild
// that ignores SIGTERM → the whole agent group is dead after the pcwrap
// grace (scenario 17).
func TestACP17_StubbornGrandchildClose(t *testing.T) {
	r := newRig(t)
	r.prepare("--stubborn-grandchild")
	r.open()
	pgid := agentPgid(t, r.sessionDir())
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err := r.m.CloseSession(ctx)
	require.NoError(t, err)
	eventually(t, "agent group gone", func() bool { return !groupAlive(pgid) })
	st, _ := r.sink.snapshot()
	require.Nil(t, st.Session.Process)
	require.Equal(t, "sess-0001", st.Session.ACPSessionID, "session.close keeps the record")
}

// TestACP20_RestartMidTurn: runnerd goes away mid-turn (the manager
// closes without stopping the agent) and a new one re-adopts the live
// pcwrap: same agent group, the turn completes, no event twice (scenario
// 20 at the executor level).
func TestACP20_RestartMidTurn(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	r.turn("sleep 1500")
	dir := r.sessionDir()
	pgid := agentPgid(t, dir)
	r.waitTurnRunning("turn.started")
	r.m.Close()

	st, before := r.sink.snapshot()
	require.NotNil(t, st.Session.Process)
	m2 := NewManager(r.cfg, st)
	r.m = m2 // the rig's cleanup shuts it down
	require.NoError(t, m2.Start())
	evs := r.sink.waitEvent(t, "run.terminal")
	require.Equal(t, pgid, agentPgid(t, dir), "the agent keeps its process group")
	require.True(t, groupAlive(pgid))
	require.Equal(t, 1, count(evs, "turn.started"))
	require.Equal(t, 1, count(evs, "turn.completed"))
	require.Equal(t, 1, count(evs, "run.terminal"))
	require.GreaterOrEqual(t, len(evs), len(before))
}

// TestACP28_StdinWriteFails: a stdin file cannot be written (the
// queue directory is gone; pcwrap is paused so it cannot notice first) →
// write_error, the same terminal sequence, nothing hangs (scenario 28).
func TestACP28_StdinWriteFails(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	dir := r.sessionDir()
	r.m.mu.Lock()
	pid := r.m.proc.pid
	r.m.mu.Unlock()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
	require.NoError(t, os.RemoveAll(filepath.Join(dir, sessiondir.StdinDir)))
	b, _ := json.Marshal(map[string]string{"text": "echo lost"})
	res, err := r.m.StartTurn("cmd-turn", b)
	require.NoError(t, err)
	require.Contains(t, string(res), `"lossReason":"write_error"`)
	_, evs := r.sink.snapshot()
	require.Equal(t, "write_error", payloadOf(evs, "harness.diagnostic")["lossReason"])
	require.Equal(t, 1, count(evs, "turn.failed"))
	require.Equal(t, 0, count(evs, "run.result.proposed"), "no synthetic result without a completion contract (tools.md §4)")
	require.Equal(t, 1, count(evs, "run.terminal"))
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	eventually(t, "agent gone", func() bool { st, _ := r.sink.snapshot(); return st.Session.Process == nil })
}

// TestRestartDuringHandshake: runnerd goes away while session.open waits
// for the agent; the re-adopted agent has no ACP session, so the next
// session.open stops it and starts clean, leaving one process session.
func TestRestartDuringHandshake(t *testing.T) {
	r := newRig(t, func(c *Config) { c.ColdBound = func(string) time.Duration { return 300 * time.Millisecond } })
	r.prepare("--hang-on-new-session")
	st := crashDuringOpen(r) // the reader stops, the agent stays
	m2 := NewManager(r.cfg, st)
	r.m = m2
	require.NoError(t, m2.Start())
	r.prepare()
	res := r.open()
	require.Contains(t, string(res), `"status":"started"`)
	require.Equal(t, 1, r.sessionDirs(), "the stale agent was stopped")
}

// crashDuringOpen starts session.open, and once the launch is recorded
// closes the Manager as a crash would (its readers stop, the agent stays)
// and ends the open. It returns what a restart finds.
func crashDuringOpen(r *rig) Stored {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _, _ = r.m.Open(ctx, "cmd-open") }()
	eventually(r.t, "agent launched", func() bool {
		st, _ := r.sink.snapshot()
		return st.Session != nil && st.Session.Process != nil
	})
	r.m.Close()
	cancel()
	<-done
	st, _ := r.sink.snapshot()
	return st
}

// sessionDirs counts the process session directories in the state dir.
func (r *rig) sessionDirs() int {
	r.t.Helper()
	entries, err := os.ReadDir(filepath.Join(r.state, processSessionsDir))
	require.NoError(r.t, err)
	dirs := 0
	for _, e := range entries {
		if e.IsDir() {
			dirs++
		}
	}
	return dirs
}

// TestRestartBeforeWrapperLocks: runnerd goes away right after it started
// pcwrap, before pcwrap took .pcwrap.lock. The next runnerd must not take
// the unlocked session for a dead one: its pcwrap is still starting, and a
// session removed under it would be recreated and its agent orphaned. The
// recorded pcwrap identity tells; the stale agent is stopped, its pcwrap
// ends, and one process session is left.
func TestRestartBeforeWrapperLocks(t *testing.T) {
	slow, gate := testbin.GatedPcwrap(t)
	r := newRig(t, func(c *Config) {
		c.Pcwrap = slow
		c.ColdBound = func(string) time.Duration { return 300 * time.Millisecond }
	})
	r.prepare()
	st := crashDuringOpen(r) // pcwrap has not taken its lock yet
	rec := st.Session.Process
	wrapper := procsession.Wrapper{Pid: rec.WrapperPID, Start: rec.WrapperStart}
	require.True(t, wrapper.Running(), "the record names the starting pcwrap")
	stale := sessionPath(r.state, rec.UUID)
	require.False(t, wrapperAlive(stale), "pcwrap holds no lock yet")

	m2 := NewManager(r.cfg, st)
	r.m = m2
	require.NoError(t, m2.Start())
	require.NoError(t, os.WriteFile(gate, nil, 0o600)) // pcwrap goes on starting
	r.prepare()
	res := r.open()
	require.Contains(t, string(res), `"status":"started"`)
	eventually(t, "the stale pcwrap ended", func() bool { return !wrapper.Running() })
	eventually(t, "the stale session removed", func() bool { _, err := os.Lstat(stale); return os.IsNotExist(err) })
	require.Equal(t, 1, r.sessionDirs(), "one process session: the new agent's")
}

// TestRestartEndsUnrecordedSession: runnerd went away between starting a
// pcwrap and recording it, so no record names the session. The next
// runnerd ends it, whether its pcwrap is still starting (found by its
// environment, before it holds .pcwrap.lock) or runs its child, and
// removes the directory: nothing is left running unread.
func TestRestartEndsUnrecordedSession(t *testing.T) {
	for _, starting := range []bool{true, false} {
		t.Run(map[bool]string{true: "pcwrap-starting", false: "pcwrap-running"}[starting], func(t *testing.T) {
			slow, gate := testbin.GatedPcwrap(t)
			r := newRig(t)
			l, err := procsession.Launch(procsession.Spec{StateDir: r.state, Pcwrap: slow,
				Argv: []string{"sleep", "300"}, Cwd: r.cwd, Env: r.cfg.Environ})
			require.NoError(t, err)
			reaped := make(chan struct{})
			go func() { _ = l.Cmd.Wait(); close(reaped) }() // the test started it: it reaps it
			defer func() { _ = l.Cmd.Process.Kill(); <-reaped }()
			if !starting {
				require.NoError(t, os.WriteFile(gate, nil, 0o600))
				eventually(t, "pcwrap holds its lock", func() bool { return wrapperAlive(l.Dir) })
			}
			require.True(t, l.Wrapper.Running())

			require.NoError(t, r.m.Start())
			require.NoError(t, os.WriteFile(gate, nil, 0o600)) // a starting pcwrap goes on
			eventually(t, "the unrecorded pcwrap ended", func() bool {
				select {
				case <-reaped:
					return true
				default:
					return false
				}
			})
			eventually(t, "its session removed", func() bool { _, err := os.Lstat(l.Dir); return os.IsNotExist(err) })
			require.False(t, procsession.FindWrapper(l.Dir).Known(), "nothing of the session runs")
		})
	}
}

// TestCloseDuringTurn: session.close under a running turn stops the agent
// and ends the turn interrupted, with one result and one terminal.
func TestCloseDuringTurn(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	r.turn("sleep 20000")
	r.sink.waitEvent(t, "turn.started")
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err := r.m.CloseSession(ctx)
	require.NoError(t, err)
	_, evs := r.sink.snapshot()
	require.Equal(t, 1, count(evs, "turn.interrupted"))
	require.Equal(t, 1, count(evs, "run.terminal"))
	require.Equal(t, "interrupted", payloadOf(evs, "run.terminal")["turnTerminalState"])
}

// TestACP20_InterruptAfterRestart: after runnerd goes away mid-turn and a
// new manager re-adopts the live agent, turn.interrupt waits the cancel
// grace for the adopted turn exactly as for a fresh one (acp.md §4.4,
// §3.5): the agent's last words ("interrupted") and its cancelled answer
// reach the turn instead of being dropped as updates outside a turn.
func TestACP20_InterruptAfterRestart(t *testing.T) {
	r := newRig(t, func(c *Config) { c.CancelGrace = testWait })
	r.prepare()
	r.open()
	r.turn("sleep 30000")
	r.waitTurnRunning("turn.started")
	r.m.Close()

	st, _ := r.sink.snapshot()
	m2 := NewManager(r.cfg, st)
	r.m = m2 // the rig's cleanup shuts it down
	require.NoError(t, m2.Start())
	res := r.cancel(Interrupt)
	require.Equal(t, "interrupt_requested", res["status"])
	_, evs := r.sink.snapshot()
	var said string
	for _, e := range evs {
		if e.EventType == "item.delta" {
			said += e.Payload["text"].(string)
		}
	}
	require.Equal(t, "interrupted", said, "the agent's last words reach the turn")
	require.Equal(t, 1, count(evs, "turn.interrupted"))
	require.Equal(t, "cancelled", payloadOf(evs, "turn.interrupted")["stopReason"])
	require.Equal(t, 1, count(evs, "run.terminal"))
}

// TestTurnStartResultRidesWithPrompt: turn.start's result is recorded in
// the write that records the prompt's reservation and its temporary file
// name, so a crash after that write reports the real result (prp.md §7.2
// item 8): the final name present, or both names gone → completed; the
// temporary file present → failed prompt_not_delivered, the file removed,
// the turn ended, and its number reused without a gap; the session dir
// gone → execution_indeterminate. pcwrap is paused, so each crash point
// is laid out exactly.
func TestTurnStartResultRidesWithPrompt(t *testing.T) {
	cases := []struct {
		name  string
		crash func(t *testing.T, dir string, pr PromptDelivery)
		want  OutcomeStatus
		code  string
	}{
		{"published", func(*testing.T, string, PromptDelivery) {}, outcomeCompleted, ""},
		{"consumed", func(t *testing.T, dir string, pr PromptDelivery) {
			require.NoError(t, os.Remove(filepath.Join(dir, sessiondir.StdinDir, sessiondir.SeqName(pr.Seq))))
		}, outcomeCompleted, ""},
		{"before rename", func(t *testing.T, dir string, pr PromptDelivery) {
			stdin := filepath.Join(dir, sessiondir.StdinDir)
			require.NoError(t, os.Rename(filepath.Join(stdin, sessiondir.SeqName(pr.Seq)), filepath.Join(stdin, pr.Tmp)))
		}, outcomeFailed, CodePromptNotDelivered},
		{"session dir gone", func(t *testing.T, dir string, _ PromptDelivery) {
			require.NoError(t, os.RemoveAll(dir))
		}, outcomeIndeterminate, codeExecutionIndeterminate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.prepare()
			r.open()
			dir := r.sessionDir()
			pgid := agentPgid(t, dir)
			pid, resume := r.freezePcwrap(t)

			b, _ := json.Marshal(map[string]string{"text": "echo hi"})
			res, err := r.m.StartTurn("cmd-1", b)
			require.NoError(t, err)
			st, _ := r.sink.snapshot()
			require.NotNil(t, st.Prompt, "the prompt's proof is durable")
			require.Equal(t, "cmd-1", st.Prompt.CommandID)
			r.sink.mu.Lock()
			first := r.sink.outcomes["cmd-1"]
			r.sink.mu.Unlock()
			require.Equal(t, outcomeCompleted, first.Status, "recorded with the evidence")
			require.JSONEq(t, string(res), string(first.Result))
			r.m.Close() // runnerd is SIGKILLed here

			tc.crash(t, dir, *st.Prompt)
			if tc.name == "session dir gone" {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			m2 := NewManager(r.cfg, st)
			r.m = m2 // the rig's cleanup shuts it down
			require.NoError(t, m2.Start())
			r.sink.mu.Lock()
			got := r.sink.outcomes["cmd-1"]
			r.sink.mu.Unlock()
			require.Equal(t, tc.want, got.Status)
			if tc.code != "" {
				var body struct{ Code string }
				require.NoError(t, json.Unmarshal(got.Result, &body))
				require.Equal(t, tc.code, body.Code)
			}
			st2, _ := r.sink.snapshot()
			require.Nil(t, st2.Prompt, "settled at recovery")
			switch tc.name {
			case "published":
				resume()
				evs := r.sink.waitEvent(t, "turn.completed")
				require.Equal(t, 1, count(evs, "run.terminal"))
			case "before rename":
				_, err := os.Stat(filepath.Join(dir, sessiondir.StdinDir, st.Prompt.Tmp))
				require.ErrorIs(t, err, os.ErrNotExist, "the temporary file is removed")
				_, evs := r.sink.snapshot()
				require.Equal(t, 1, count(evs, "turn.failed"), "the started turn ends")
				resume()
				r.turn("echo again") // takes the unpublished number: no gap, no lost input
				evs = r.sink.waitEvent(t, "turn.completed")
				require.Equal(t, 0, count(evs, "harness.diagnostic")-1, "only the failed turn's diagnostic")
			}
		})
	}
}

// freezePcwrap stops the agent's pcwrap (pid, SIGSTOP) and waits until every
// thread of it is stopped; resume lets it go on (once; the test's cleanup
// resumes it in any case).
func (r *rig) freezePcwrap(t *testing.T) (pid int, resume func()) {
	t.Helper()
	r.m.mu.Lock()
	pid = r.m.proc.pid
	r.m.mu.Unlock()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	resume = sync.OnceFunc(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	t.Cleanup(resume)
	eventually(t, "pcwrap stopped", func() bool { return allThreadsStopped(pid) })
	return pid, resume
}

// allThreadsStopped reports whether every thread of pid is in the stopped
// state (a SIGSTOP lands asynchronously).
func allThreadsStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		// The state follows the parenthesised command name.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// TestStdinLineSurvivesCrashAfterCommit: a batch's stdin lines are
// reserved and named in its durable write and published after it; a
// crash in between (here a goal control's request) leaves no gap. After
// the restart the agent gets the line exactly once: a line still staged
// is published under its reserved number, one already published or
// consumed is not written again, and the next turn works (no lost input).
// pcwrap is paused, so each crash point is laid out exactly.
func TestStdinLineSurvivesCrashAfterCommit(t *testing.T) {
	for _, name := range []string{"staged", "published", "consumed"} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t)
			r.prepare("--goal-actions", "set,pause,resume,clear")
			r.open()
			dir := r.sessionDir()
			stdin := filepath.Join(dir, sessiondir.StdinDir)
			_, resume := r.freezePcwrap(t)

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = r.m.Goal(ctx, "cmd-goal", GoalSet, json.RawMessage(`{"objective":"chaos"}`))
			}()
			var line StagedLine
			eventually(t, "the goal request is durable and published", func() bool {
				st, _ := r.sink.snapshot()
				if len(st.Lines) != 1 {
					return false
				}
				line = st.Lines[0]
				_, err := os.Stat(filepath.Join(stdin, sessiondir.SeqName(line.Seq)))
				return err == nil
			})
			st, _ := r.sink.snapshot()
			require.Equal(t, uint64(line.Seq+1), st.Session.Process.NextStdinSeq, "the write reserves the line's number")
			final := filepath.Join(stdin, sessiondir.SeqName(line.Seq))
			switch name {
			case "staged": // runnerd is SIGKILLed before the rename
				require.NoError(t, os.Rename(final, filepath.Join(stdin, line.Tmp)))
			case "consumed":
				resume()
				eventually(t, "pcwrap consumed the line", func() bool {
					_, err := os.Stat(final)
					return errors.Is(err, os.ErrNotExist)
				})
			}
			r.m.Close() // runnerd is SIGKILLed here
			cancel()
			<-done
			if name == "consumed" {
				// The agent answered once pcwrap resumed, and the reader may
				// have committed the answer's event files, then deleted
				// them: the state the crash leaves holds those commits.
				st, _ = r.sink.snapshot()
			}

			m2 := NewManager(r.cfg, st)
			r.m = m2 // the rig's cleanup shuts it down
			require.NoError(t, m2.Start())
			_, err := os.Stat(filepath.Join(stdin, line.Tmp))
			require.ErrorIs(t, err, os.ErrNotExist, "nothing stays staged")
			if name != "consumed" {
				_, err = os.Stat(final)
				require.NoError(t, err, "the line is queued under its reserved number")
			}
			resume()
			r.turn("echo again")
			evs := r.sink.waitEvent(t, "turn.completed")
			require.Zero(t, count(evs, "turn.failed"), "no lost input")
			require.Equal(t, 1, count(evs, prp.EventSessionGoalUpdated), "the agent got the goal request exactly once")
			st2, _ := r.sink.snapshot()
			require.Empty(t, st2.Lines, "a later write drops the names")
		})
	}
}
