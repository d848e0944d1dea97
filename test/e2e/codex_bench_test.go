package e2e

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// BenchmarkCodexVsACPMessageOnWire measures, in one run, a delta line
// written by the agent until its event is committed at the core, for a
// Codex app-server (item/agentMessage/delta) and for an ACP agent
// (agent_message_chunk): each stamps the line as it writes it, 20 ms
// apart (per-message overhead, not throughput). The Codex path
// must not be more than 10% slower. Figures only; nothing asserts a time.
func BenchmarkCodexVsACPMessageOnWire(b *testing.B) {
	for _, kind := range []string{"acp", "codex"} {
		b.Run(kind, func(b *testing.B) {
			r := newBenchRig(b, kind)
			s := messageOnWire(b, r, 150)
			b.ReportMetric(msf(pct(s, 50)), "p50-ms")
			b.ReportMetric(msf(pct(s, 99)), "p99-ms")
			fmt.Printf("%s delta line → event committed at the core, %d messages: p50 %v p90 %v p99 %v max %v\n",
				kind, len(s), pct(s, 50), pct(s, 90), pct(s, 99), s[len(s)-1])
		})
	}
}

// messageOnWire runs stamp turns and returns the sorted latencies.
func messageOnWire(b *testing.B, r *agentRig, n int) []time.Duration {
	arr := watchArrivals(r.c.core.Core)
	defer arr.close()
	var samples []time.Duration
	for i := 0; b.Loop(); i++ {
		before := len(r.c.core.Snapshot().Events)
		benchRun(b, r, "turn.start", map[string]any{"text": fmt.Sprintf("stamp %d 20", n)})
		s := waitTerminals(b, r, i+1)
		samples = append(samples, stampLatencies(b, arr, s, before)...)
	}
	if len(samples) == 0 {
		b.Fatal("no samples")
	}
	slices.Sort(samples)
	return samples
}

// newBenchRig starts runnerd with fakeacp ("acp") or fakecodex ("codex")
// prepared and a session open.
func newBenchRig(b *testing.B, kind string) *agentRig {
	b.Helper()
	return newBenchRigWith(b, kind, runnerdBin(b))
}

// newBenchRigWith is newBenchRig with runnerd binary bin, env added to its
// environment.
func newBenchRigWith(b *testing.B, kind, bin string, env ...string) *agentRig {
	b.Helper()
	c := newCoreServer(b)
	dir := stateDir(b)
	r := &agentRig{c: c, bin: bin, dir: dir, env: env,
		args: runnerdArgs(dir, "--connect-url", c.connectURL(), "--pcwrap-path", testbin.Path(b, "pcwrap"))}
	proc := c.startRunnerd(b, r.bin, r.args, env...)
	r.pid = proc.Process.Pid
	b.Cleanup(func() {
		_ = proc.Process.Signal(syscall.SIGTERM)
		waitExit(b, proc)
	})
	prov := map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(b), "cwd": b.TempDir()}
	if kind == "codex" {
		prov = map[string]any{"kind": "codex", "command": fakecodexBin(b), "cwd": b.TempDir(), "approvalPolicy": "never"}
	}
	benchRun(b, r, "run.prepare", map[string]any{"provider": prov})
	benchRun(b, r, "session.open", map[string]any{})
	return r
}

// BenchmarkCodexTenThousandDeltasOnWire: one Codex turn of 10,000
// item/agentMessage/delta notifications; the core receives them all, in
// order, coalesced into fewer P2 events, while a ping every 10 ms is timed
// until its pong (target: p99 within 5 ms). Figures only.
func BenchmarkCodexTenThousandDeltasOnWire(b *testing.B) {
	tenThousandOnWire(b, newBenchRig(b, "codex"), "chunks 10000", "codex 10,000 deltas in one turn")
}
