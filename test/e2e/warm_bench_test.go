package e2e

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// Warm rotation benchmark bounds.
const (
	// warmBenchRotations is how many rotations one runnerd makes in a row.
	warmBenchRotations = 20
	// coldBenchStarts is how many cold session.open + turn.start a run
	// makes; each costs the fake agent's 2 s initialize delay.
	coldBenchStarts = 3
	// benchInitDelayMs is fakeacp's initialize delay: the low end of the
	// 0.5–9 s cold starts measured for the five real agents.
	benchInitDelayMs = "2000"
)

// BenchmarkWarmAttachVsCold: the time from run.attach queued until the
// new run's first turn.started (a turn.start queued right behind the
// attach, delivered after activation), and until the core acknowledged
// warm_transition_activated, next to a cold session.open + turn.start
// against the same fake agent (fakeacp --init-delay-ms 2000) in the same
// run. Figures only; the target is warm ≤ 10% of cold.
//
//	go test -run '^$' -bench BenchmarkWarmAttachVsCold -benchtime 1x ./test/e2e/
func BenchmarkWarmAttachVsCold(b *testing.B) {
	for range b.N {
		warmTurn, warmActivated := benchWarm(b)
		cold := benchCold(b)
		slices.Sort(warmTurn)
		slices.Sort(warmActivated)
		slices.Sort(cold)
		b.ReportMetric(msf(pct(warmTurn, 50)), "warm-turn-p50-ms")
		b.ReportMetric(msf(pct(warmActivated, 50)), "warm-activated-p50-ms")
		b.ReportMetric(msf(pct(cold, 50)), "cold-turn-p50-ms")
		b.ReportMetric(100*float64(pct(warmTurn, 50))/float64(pct(cold, 50)), "warm/cold-%")
		b.Logf("warm attach→turn.started p50 %.1f ms max %.1f ms; attach→activated ack p50 %.1f ms; cold session.open+turn.start→turn.started p50 %.1f ms (%d warm, %d cold)",
			msf(pct(warmTurn, 50)), msf(warmTurn[len(warmTurn)-1]), msf(pct(warmActivated, 50)), msf(pct(cold, 50)), len(warmTurn), len(cold))
	}
}

// benchProvider is the fake agent both halves use.
func benchProvider(b *testing.B) map[string]any {
	return map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(b),
		"args": []string{"--init-delay-ms", benchInitDelayMs}, "cwd": b.TempDir()}
}

// benchWarm rotates one runnerd warmBenchRotations times.
func benchWarm(b *testing.B) (toTurn, toActivated []time.Duration) {
	w := &warmE2E{}
	c := newCoreServer(b)
	dir := stateDir(b)
	w.c, w.dir = c, dir
	w.args = runnerdArgs(dir, "--connect-url", c.connectURL(), "--pcwrap-path", testbin.Path(b, "pcwrap"))
	w.bin = runnerdBin(b)
	w.provider = benchProvider(b)
	benchStart(b, w, identity)
	warmBenchRun(b, w, "run.prepare", fmt.Sprintf(`{"provider":%s}`, mustJSONB(b, w.provider)))
	warmBenchRun(b, w, "session.open", `{"reuse":"same_session"}`)
	base := strings.TrimSuffix(c.connectURL(), prp.ConnectPath(identity.RunID))
	cur := identity
	for i := range warmBenchRotations {
		next := cur
		next.RunID, next.TurnID, next.ItemID = fmt.Sprintf("run_w%d", i), fmt.Sprintf("turn_w%d", i), fmt.Sprintf("item_w%d", i)
		payload := fmt.Sprintf(`{"provider":%s,"paperclipNextAuthority":{"identity":%s,"connection":{"mode":"connect","connectUrl":%q}}}`,
			mustJSONB(b, w.provider), mustJSONB(b, next), base+prp.ConnectPath(next.RunID))
		// The previous run's turn must be over and ACKed: the attach waits
		// for exactly that, and this measures the rotation, not the turn.
		c.wait(b, func(s control.Snapshot) bool {
			return s.AckedSourceSeq == int64(len(s.Events)) && (i == 0 || countType(decodeEvents(b, s.Events), "run.terminal") == 1)
		})
		start := time.Now()
		if _, err := c.core.QueueCommand(prp.Command{Type: prp.CommandRunAttach, Payload: []byte(payload)}); err != nil {
			b.Fatalf("queue run.attach: %v", err)
		}
		if _, err := c.core.QueueCommand(prp.Command{Type: "turn.start", Payload: []byte(`{"text":"echo warm"}`)}); err != nil && !strings.Contains(err.Error(), "not connected") {
			b.Logf("queue turn.start: %v", err) // journaled; delivered after activation
		}
		c.wait(b, func(s control.Snapshot) bool { return s.Identity == next && s.Warm == nil })
		toActivated = append(toActivated, time.Since(start))
		c.wait(b, func(s control.Snapshot) bool { return countType(decodeEvents(b, s.Events), "turn.started") == 1 })
		toTurn = append(toTurn, time.Since(start))
		cur = next
	}
	return toTurn, toActivated
}

// benchCold measures coldBenchStarts cold starts, each on a fresh runnerd.
func benchCold(b *testing.B) []time.Duration {
	var out []time.Duration
	for range coldBenchStarts {
		w := &warmE2E{}
		c := newCoreServer(b)
		dir := stateDir(b)
		w.c, w.dir = c, dir
		w.args = runnerdArgs(dir, "--connect-url", c.connectURL(), "--pcwrap-path", testbin.Path(b, "pcwrap"))
		w.bin = runnerdBin(b)
		w.provider = benchProvider(b)
		benchStart(b, w, identity)
		warmBenchRun(b, w, "run.prepare", fmt.Sprintf(`{"provider":%s}`, mustJSONB(b, w.provider)))
		start := time.Now()
		for _, cmd := range []struct{ typ, payload string }{{"session.open", `{"reuse":"same_session"}`}, {"turn.start", `{"text":"echo cold"}`}} {
			if _, err := c.core.QueueCommand(prp.Command{Type: cmd.typ, Payload: []byte(cmd.payload)}); err != nil {
				b.Fatalf("queue %s: %v", cmd.typ, err)
			}
		}
		c.wait(b, func(s control.Snapshot) bool { return countType(decodeEvents(b, s.Events), "turn.started") == 1 })
		out = append(out, time.Since(start))
	}
	return out
}

func benchStart(b *testing.B, w *warmE2E, id prp.Identity) {
	b.Helper()
	cmd := w.c.startRunnerd(b, w.bin, asIdentity(w.args, id))
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		waitExit(b, cmd)
	})
}

func warmBenchRun(b *testing.B, w *warmE2E, typ, payload string) {
	b.Helper()
	cmd, err := w.c.core.QueueCommand(prp.Command{Type: typ, Payload: []byte(payload)})
	if cmd.CommandID == "" {
		b.Fatalf("queue %s: %v", typ, err)
	}
	w.c.wait(b, func(s control.Snapshot) bool { return s.Results[cmd.CommandID] != nil })
}

func mustJSONB(b *testing.B, v any) string {
	b.Helper()
	return string(mustJSON(b, v))
}
