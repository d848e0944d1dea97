package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Hot-restart test bounds.
const (
	// hotRestartRuns is the number of kill-and-relaunch rounds (required:
	// at least 20).
	hotRestartRuns = 20
	// hotRestartTurnMs bounds one turn's sleep; the kill lands anywhere in
	// it or shortly after.
	hotRestartTurnMs = 600
	// hotRestartChunks bounds the extra deltas of a streaming turn.
	hotRestartChunks = 3000
	// hotRestartBound bounds the whole test.
	hotRestartBound = 2 * time.Minute
)

// TestACP20_HotRestart kills runnerd with SIGKILL at a seeded random
// point of a running turn (a quiet one, or one streaming thousands of
// deltas), relaunches it with a fresh ticket and the same
// state dir, and checks acp.md §3.5 over the real binaries: the agent keeps
// its process group (never restarted), every turn completes into the same
// turn, the core sees every event exactly once (contiguous sourceSeq, one
// turn.started / run.terminal per turn, each turn's text once), and each
// restart emits P0 runner.reconciled (scenarios 20 and 21: a kill between
// the outbox commit and the file deletion leaves a file the next process
// deletes unread). PCRUNNER_HOTRESTART_SEED replays a run.
func TestACP20_HotRestart(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PCRUNNER_HOTRESTART_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("hot-restart seed %d (PCRUNNER_HOTRESTART_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	deadline := time.Now().Add(hotRestartBound)

	r := newAgentRig(t)
	proc := r.start(t)
	r.prepare(t)
	r.open(t)
	sessions := processSessions(r.dir)
	require.Len(t, sessions, 1)
	sdir := filepath.Join(r.dir, "process-sessions", sessions[0])
	pgid := childPgid(t, sdir)

	want := map[string]string{} // providerTurnId → text
	for i := 1; i <= hotRestartRuns; i++ {
		require.True(t, time.Now().Before(deadline), "hot-restart loop exceeded its bound at round %d", i)
		ms := 100 + rng.IntN(hotRestartTurnMs)
		text, reply := fmt.Sprintf("sleep %d", ms), fmt.Sprintf("slept %d ms", ms)
		if i%2 == 0 {
			// A streaming turn: the kill lands among thousands of deltas.
			n := 500 + rng.IntN(hotRestartChunks)
			var b strings.Builder
			for k := range n {
				b.WriteString(strconv.Itoa(k) + ",")
			}
			text, reply = fmt.Sprintf("chunks %d", n), b.String()
		}
		res := r.run(t, "turn.start", map[string]any{"text": text})
		require.Equal(t, "completed", res.Status, string(res.Result))
		want[fmt.Sprintf("pturn-%d", i)] = reply
		time.Sleep(time.Duration(rng.IntN(ms+100)) * time.Millisecond) // the kill point
		require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
		waitExit(t, proc)
		proc = r.start(t)
		r.waitEvents(t, "run.terminal", i)
		// Each restart reconciles once; its runner.reconciled may come
		// after a run.terminal the previous process already sent.
		r.waitEvents(t, "runner.reconciled", i)
		require.Equal(t, pgid, childPgid(t, sdir), "the agent keeps its process group")
		require.NoError(t, syscall.Kill(-pgid, 0), "the agent still runs")
	}

	evs := r.events(t)
	requireContiguous(t, evs)
	require.Equal(t, hotRestartRuns, countType(evs, "turn.started"))
	require.Equal(t, hotRestartRuns, countType(evs, "turn.completed"))
	require.Equal(t, 0, countType(evs, "run.result.proposed"), "no synthetic result without a completion contract (tools.md §4)")
	require.Equal(t, hotRestartRuns, countType(evs, "run.terminal"))
	require.Equal(t, hotRestartRuns, countType(evs, "runner.reconciled"))
	got := map[string]string{}
	for _, e := range evs {
		if e.EventType == "item.delta" {
			turn, _ := field(t, e, "providerTurnId").(string)
			got[turn] += field(t, e, "text").(string)
		}
	}
	require.Equal(t, want, got, "each turn's text exactly once")
	require.Equal(t, []string{sessions[0]}, processSessions(r.dir), "the same process session throughout")
}
