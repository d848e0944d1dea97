package e2e

import (
	"bufio"
	"encoding/json"
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

	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// Bounds of the turn.start kill test.
const (
	// turnStartKills is the number of SIGKILLed turn.starts (required: 50).
	turnStartKills = 50
	// turnStartPublishPauseMs holds each prompt between the write that
	// records it and its rename (the testhooks build), so a kill
	// can land exactly there.
	turnStartPublishPauseMs = 150
	// turnStartBound bounds the whole test.
	turnStartBound = 3 * time.Minute
)

// Kill points of one turn.start.
const (
	killEarly  = iota // a few ms after the command is queued: before or around its journal entry
	killStaged        // the prompt's temp name and reservation are durable, the rename not done
	killLate          // after the result reached the core
	killPoints
)

// TestTurnStartResultAfterKill SIGKILLs runnerd at a seeded point of each
// of 50 turn.starts (including the moment between the prompt's reservation
// and its rename), relaunches it, and checks prp.md §7.2 item 8 over the
// real binaries: the result is completed exactly when the prompt reached
// the agent (fakeacp's transcript, in order), failed prompt_not_delivered
// otherwise, and never execution_indeterminate (the session dir never
// goes away here, so the delivery can always be known).
// PCRUNNER_TURNSTART_SEED replays a run.
func TestTurnStartResultAfterKill(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PCRUNNER_TURNSTART_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("turn.start kill seed %d (PCRUNNER_TURNSTART_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
	deadline := time.Now().Add(turnStartBound)
	t.Setenv("PCRUNNER_TEST_PAUSE_BEFORE_PUBLISH_MS", strconv.Itoa(turnStartPublishPauseMs))

	r := newAgentRig(t)
	r.bin = testbin.Path(t, "runnerd", testbin.HooksTag)
	transcript := filepath.Join(t.TempDir(), "wire.ndjson")
	proc, stderr := r.startLogged(t)
	r.prepare(t, "--transcript", transcript)
	r.open(t)

	var delivered []string // markers whose turn.start completed, in order
	counts := map[string]int{}
	for i := 1; i <= turnStartKills; i++ {
		require.True(t, time.Now().Before(deadline), "kill loop exceeded its bound at round %d", i)
		marker := fmt.Sprintf("round-%d", i)
		point := rng.IntN(killPoints)
		pauses := strings.Count(stderr.String(), hookPaused)
		id := r.queue(t, "turn.start", map[string]any{"text": "echo " + marker})
		switch point {
		case killEarly:
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		case killStaged:
			// The pause begins once the write that records the staged
			// prompt is durable.
			waitOutput(t, stderr, hookPaused, pauses+1)
		case killLate:
			r.result(t, id)
			time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
		}
		require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
		waitExit(t, proc)
		// Inside the window: the prompt's pause began and never ended.
		inWindow := strings.Count(stderr.String(), hookPublishing) < strings.Count(stderr.String(), hookPaused)
		proc, stderr = r.startLogged(t)

		res := r.result(t, id)
		var body struct{ Code string }
		_ = json.Unmarshal(res.Result, &body)
		switch res.Status {
		case "completed":
			delivered = append(delivered, marker)
			counts["completed"]++
		case "failed":
			require.Equal(t, "prompt_not_delivered", body.Code, "round %d (kill point %d): %s", i, point, res.Result)
			counts["prompt_not_delivered"]++
		default:
			t.Fatalf("round %d (kill point %d): status %s %s", i, point, res.Status, res.Result)
		}
		if point == killStaged {
			if inWindow {
				require.Equal(t, "failed", res.Status, "round %d: killed before the rename", i)
				counts["killed in the window"]++
			} else { // the machine was slower than the pause
				counts["window missed"]++
			}
		}
		if res.Status == "completed" {
			// Prompts are serialized per session: the turn ends before the
			// next one starts.
			var out struct {
				ProviderTurnID string `json:"providerTurnId"`
			}
			require.NoError(t, json.Unmarshal(res.Result, &out))
			r.c.wait(t, func(s control.Snapshot) bool {
				for _, e := range decodeEvents(t, s.Events) {
					if e.EventType == "run.terminal" && fieldOf(e, "providerTurnId") == out.ProviderTurnID {
						return true
					}
				}
				return false
			})
		}
	}
	t.Logf("results over %d kills: %v", turnStartKills, counts)
	if counts["window missed"] > 0 {
		require.Positive(t, counts["killed in the window"], "no kill landed between a prompt's reservation and its rename")
	}
	// The agent saw exactly the completed prompts, in order (each one's
	// turn has ended, so it has read them all): a prompt reported not
	// delivered never reached it, before or after.
	require.Equal(t, delivered, promptsSeen(t, transcript))
}

// The lines the testhooks build writes to stderr around its pause before
// a prompt's rename (internal/agent/hooks_testhooks.go).
const (
	hookPaused     = "testhook: paused before publish"
	hookPublishing = "testhook: publishing"
)

// waitOutput waits until line occurs at least n times in out.
func waitOutput(t *testing.T, out *syncbuf.Buffer, line string, n int) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for strings.Count(out.String(), line) < n {
		require.True(t, time.Now().Before(deadline), "%q did not appear %d times", line, n)
		time.Sleep(time.Millisecond)
	}
}

// fieldOf returns a top-level payload field of e, or nil.
func fieldOf(e event, key string) any {
	var p map[string]any
	_ = json.Unmarshal(e.Payload, &p)
	return p[key]
}

// promptsSeen lists the round markers of the session/prompt requests the
// agent read, in order.
func promptsSeen(t *testing.T, transcript string) []string {
	t.Helper()
	f, err := os.Open(transcript)
	require.NoError(t, err)
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Dir string `json:"dir"`
			Msg struct {
				Method string `json:"method"`
				Params struct {
					Prompt []struct {
						Text string `json:"text"`
					} `json:"prompt"`
				} `json:"params"`
			} `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Dir != "in" || l.Msg.Method != "session/prompt" {
			continue
		}
		for _, p := range l.Msg.Params.Prompt {
			out = append(out, strings.TrimPrefix(p.Text, "echo "))
		}
	}
	return out
}
