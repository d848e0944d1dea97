package terminal

import (
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// reportLatency reports the p50 and p99 of samples.
func reportLatency(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(samples[len(samples)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkTerminalTrue: terminal/create of `true` until wait_for_exit
// answers, then release; compare with
// BenchmarkExecTrue in the same run.
func BenchmarkTerminalTrue(b *testing.B) {
	h := &harness{state: b.TempDir(), answers: make(chan answer, 64), pcwrap: testbin.Path(b, "pcwrap")}
	h.m = h.manager()
	defer h.m.Close()
	samples := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		res, err := h.m.Create(CreateRequest{SessionID: sess, Command: "true"}, h.state, h.env())
		if err != nil {
			b.Fatal(err)
		}
		req := Request{SessionID: sess, TerminalID: res.TerminalID}
		_, done, err := h.m.WaitForExit(req, []byte("1"))
		if err != nil {
			b.Fatal(err)
		}
		if !done {
			select {
			case <-h.answers:
			case <-time.After(waitBound):
				b.Fatal("wait_for_exit was not answered")
			}
		}
		samples = append(samples, time.Since(start))
		if err := h.m.Release(req); err != nil {
			b.Fatal(err)
		}
	}
	reportLatency(b, samples)
}

// BenchmarkExecTrue is the bare exec.Command("true").Run() baseline.
func BenchmarkExecTrue(b *testing.B) {
	samples := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	reportLatency(b, samples)
}
