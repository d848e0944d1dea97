package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// Crash test bounds.
const (
	// crashKills is the minimum number of SIGKILLs in one run (required: at least 50).
	crashKills = 50
	// crashBatch bounds the commands queued before each life, so kills land
	// mid-script; 50 lives stay well under the core's 500-command journal.
	crashBatch = 6
	// crashSuspendEvery puts a runner.suspend (which ends the process
	// cleanly) among the commands.
	crashSuspendEvery = 17
	// crashRedial spaces the core's dials of a listening runnerd in the
	// listen-mode run (kept short: lives last milliseconds).
	crashRedial = 5 * time.Millisecond
	// crashMaxLife bounds how long one runnerd life lasts before its SIGKILL;
	// long enough to authenticate and make progress, short enough that 50
	// lives fit in seconds.
	crashMaxLife = 120 * time.Millisecond
)

// TestCrashKill9Recovery drives the real runnerd through a script of
// commands while killing it with SIGKILL at random points, restarting it
// each time with a fresh ticket and the same state dir (prp.md §9.4). The
// core then checks exactly-once: sourceSeq contiguous without gap or
// duplicate, no command effect twice, every indeterminate command reported
// as failed/execution_indeterminate. Scenarios 11 (replay without a second
// effect), 14 (crash between journal and effect) and 49's runnerd half
// (relaunch with a fresh ticket and the same state dir → P0
// runner.reconciled) over real processes. Set PCRUNNER_CRASH_SEED to replay
// a run.
func TestCrashKill9Recovery(t *testing.T) { crashRun(t, false) }

// TestCrashKill9RecoveryListen is the same in listen mode, the production
// mode on Daytona: each life binds a fresh loopback port and the core dials
// it (prp.md §1.2, §6.2).
func TestCrashKill9RecoveryListen(t *testing.T) { crashRun(t, true) }

func crashRun(t *testing.T, listen bool) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PCRUNNER_CRASH_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("crash seed %d (PCRUNNER_CRASH_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	bin := runnerdBin(t)
	logs := &logTail{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runnerd stderr, last %d bytes of all lives:\n%s", maxLogTail, logs.String())
		}
	})
	c := newCoreServer(t)
	dir := stateDir(t)
	args := runnerdArgs(dir, "--connect-url", c.connectURL())
	if listen {
		args = runnerdArgs(dir, "--listen-address", "127.0.0.1", "--listen-port", "0",
			"--listen-path", prp.ConnectPath(identity.RunID))
	}

	// The script: drains carry an observable effect (runner.draining names
	// its command), snapshots complete without one, budget increases are
	// refused (not implemented), suspends end a life cleanly.
	types := map[string]string{}
	queue := func(n int) {
		for range n {
			typ := [...]string{"runner.drain", "session.snapshot", "runner.drain", "session.budget.increase"}[len(types)%4]
			if len(types)%crashSuspendEvery == crashSuspendEvery-1 {
				typ = "runner.suspend" // a terminal fence under fire; the next life resumes
			}
			// A send error only means the runnerd just died: the command is
			// journaled and the next welcome re-delivers it.
			cmd, err := c.core.QueueCommand(prp.Command{Type: typ, Payload: json.RawMessage(`{}`)})
			require.NotEmpty(t, cmd.CommandID, "queue command: %v", err)
			types[cmd.CommandID] = typ
		}
	}

	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	kills, suspends := 0, 0
	for kills < crashKills {
		require.True(t, time.Now().Before(deadline), "crash loop exceeded its bound after %d kills", kills)
		queue(1 + rng.IntN(crashBatch))
		l := c.startLife(t, bin, args, listen, logs)
		time.Sleep(time.Duration(rng.Int64N(int64(crashMaxLife))))
		_ = l.proc.Process.Signal(syscall.SIGKILL)
		switch code := l.wait(t); {
		case code == -1 && l.proc.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
			kills++
		case code == 0:
			suspends++ // it had already stopped by itself
		default:
			t.Fatalf("runnerd exited with status %d", code)
		}
	}
	mid := c.core.Snapshot()
	t.Logf("after %d kills in %s: %d of %d commands have results, %d events committed",
		kills, time.Since(start).Round(time.Millisecond), len(mid.Results), len(types), len(mid.Events))

	// Undisturbed lives finish the script and the shutdown queued after it.
	// Every such life ends by itself with 0: at a suspend, after
	// reconciling a fence left by a kill, or at the shutdown.
	stop, err := c.core.QueueCommand(prp.Command{Type: "runner.shutdown", Payload: json.RawMessage(`{}`)})
	require.NotEmpty(t, stop.CommandID, "queue shutdown: %v", err)
	for lives := 0; c.core.Snapshot().Results[stop.CommandID] == nil; lives++ {
		require.Less(t, lives, crashKills, "the script does not finish")
		l := c.startLife(t, bin, args, listen, logs)
		if code := l.wait(t); code != 0 {
			// The one real-time bound a loaded machine can miss: the 2 s
			// terminal ack wait (prp.md §7.4). The fence stays; the next
			// life reconciles it.
			require.Contains(t, l.out.String(), "not acknowledged within", "an undisturbed life ends cleanly (status %d)", code)
		}
	}
	final := c.core.Snapshot()
	require.NotNil(t, final.Results[stop.CommandID])

	// sourceSeq contiguous from 1, ids unique (the core also enforces it).
	evs := decodeEvents(t, final.Events)
	ids := map[string]bool{}
	for i, e := range evs {
		require.EqualValues(t, i+1, e.SourceSeq, "gap or duplicate at position %d", i)
		require.False(t, ids[e.SourceEventID], "duplicate sourceEventId %s", e.SourceEventID)
		ids[e.SourceEventID] = true
	}

	// Effects per command.
	effects := map[string]int{}
	reconciled := 0
	for _, e := range evs {
		switch e.EventType {
		case "runner.draining":
			var p struct {
				CommandID string `json:"commandId"`
			}
			require.NoError(t, json.Unmarshal(e.Payload, &p))
			effects[p.CommandID]++
		case "runner.reconciled":
			reconciled++
		case "runner.suspended":
			var p struct {
				CommandID string `json:"commandId"`
			}
			require.NoError(t, json.Unmarshal(e.Payload, &p))
			effects[p.CommandID]++
		}
	}
	indeterminate := 0
	for id, typ := range types {
		var res prp.CommandResultPayload
		require.NoError(t, json.Unmarshal(final.Results[id], &res), id)
		var body struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(res.Result, &body)
		require.LessOrEqual(t, effects[id], 1, "command %s (%s) took effect twice", id, typ)
		switch res.Status {
		case "completed":
			if typ == "runner.drain" || typ == "runner.suspend" {
				require.Equal(t, 1, effects[id], "completed %s %s without its effect", typ, id)
			}
		case "rejected":
			require.Equal(t, "session.budget.increase", typ, id)
			require.Zero(t, effects[id])
		case "failed":
			require.Equal(t, "execution_indeterminate", body.Code, "command %s failed for another reason", id)
			indeterminate++
		default:
			t.Fatalf("command %s: unexpected status %q", id, res.Status)
		}
		if typ != "runner.drain" && typ != "runner.suspend" {
			require.Zero(t, effects[id], "command %s (%s) has an effect", id, typ)
		}
	}
	require.Positive(t, reconciled, "a restarted runnerd emits runner.reconciled")

	// The runner's journal agrees with what the core was told: every entry
	// it marked indeterminate reached the core as failed/execution_indeterminate.
	b, err := os.ReadFile(filepath.Join(dir, "runner-state.json"))
	require.NoError(t, err)
	var st struct {
		Lifecycle         string `json:"lifecycle"`
		ProcessedCommands map[string]struct {
			Status string `json:"status"`
		} `json:"processedCommands"`
	}
	require.NoError(t, json.Unmarshal(b, &st))
	require.Equal(t, "stopped", st.Lifecycle)
	for id, e := range st.ProcessedCommands {
		var res prp.CommandResultPayload
		require.NoError(t, json.Unmarshal(final.Results[id], &res), id)
		switch e.Status {
		case "indeterminate":
			require.Equal(t, "failed", res.Status, id)
			require.Contains(t, string(res.Result), "execution_indeterminate", id)
		case "completed":
			require.Equal(t, "completed", res.Status, id)
		case "pending":
			t.Fatalf("command %s still pending after a clean stop", id)
		}
	}
	t.Logf("%d kills, %d clean suspends, %d events, %d runner.reconciled, %d indeterminate commands",
		kills, suspends, len(evs), reconciled, indeterminate)

	// The state is final: a relaunch exits at once (prp.md §9.4).
	require.Equal(t, 0, c.startLife(t, bin, args, listen, logs).wait(t))
}

// life is one runnerd process; in listen mode the core keeps dialling its
// listener (the server's ingress loop) until the process ends.
type life struct {
	proc   *exec.Cmd
	cancel context.CancelFunc
	wg     sync.WaitGroup // the stderr reader and the dialler
	eof    chan struct{}  // stderr reached EOF: the process is gone
	out    *logTail       // this life's stderr
}

func (c *coreServer) startLife(t *testing.T, bin string, args []string, listen bool, logs *logTail) *life {
	t.Helper()
	ticket, err := c.core.MintTicket()
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "PAPERCLIP_RUNNER_BOOTSTRAP_TICKET="+ticket)
	_, _ = logs.Write([]byte("--- new life\n"))
	own := &logTail{}
	both := io.MultiWriter(logs, own)
	if !listen {
		cmd.Stderr = both
		require.NoError(t, cmd.Start())
		return &life{proc: cmd, out: own}
	}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	ctx, cancel := context.WithCancel(context.Background())
	l := &life{proc: cmd, cancel: cancel, eof: make(chan struct{}), out: own}
	addr := make(chan string, 1)
	l.wg.Add(2)
	go func() {
		defer l.wg.Done()
		defer close(l.eof)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			_, _ = both.Write(append(sc.Bytes(), '\n'))
			var rec struct {
				Msg     string `json:"msg"`
				Address string `json:"address"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
				addr <- rec.Address
			}
		}
	}()
	go func() {
		defer l.wg.Done()
		var url string
		select {
		case a := <-addr:
			url = "ws://" + a + prp.ConnectPath(identity.RunID)
		case <-ctx.Done():
			return
		}
		for ctx.Err() == nil {
			if c.core.Connect(ctx, url) == nil {
				_ = c.core.Wait(ctx, func(s control.Snapshot) bool { return !s.Connected })
			}
			select {
			case <-ctx.Done():
			case <-time.After(crashRedial):
			}
		}
	}()
	return l
}

// wait waits for the process (bounded), stops the dialler and returns the
// exit code.
func (l *life) wait(t *testing.T) int {
	t.Helper()
	if l.cancel == nil {
		return waitExit(t, l.proc)
	}
	select {
	case <-l.eof: // all output read before Wait, as os/exec requires
	case <-time.After(waitBound):
		_ = l.proc.Process.Kill()
		<-l.eof
		l.cancel()
		l.wg.Wait()
		_ = l.proc.Wait()
		t.Fatal("runnerd did not exit in time")
	}
	l.cancel()
	l.wg.Wait()
	return waitExit(t, l.proc)
}

// maxLogTail bounds the runnerd output a failed crash run prints.
const maxLogTail = 32 * 1024

// logTail keeps the last maxLogTail bytes written to it; safe for
// concurrent use.
type logTail struct {
	mu sync.Mutex
	b  []byte
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	if len(l.b) > maxLogTail {
		l.b = append([]byte(nil), l.b[len(l.b)-maxLogTail:]...)
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
