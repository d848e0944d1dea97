package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// Benchmarks of runnerd's targets (issue "runnerd core"): idle RSS < 20 MiB
// and no CPU beyond timers, start until listening < 50 ms, static binary
// < 15 MiB. They print figures; nothing asserts a time.
//
//	scripts/bench-runnerd

// idleWindow is how long BenchmarkRunnerdIdle watches a connected, idle
// runnerd; long enough to cover several liveness timers.
const idleWindow = 3 * time.Second

// BenchmarkRunnerdStartToListening measures exec until runnerd logs its
// listening address (fresh state dir each time: the first state write with
// its fsyncs is included).
func BenchmarkRunnerdStartToListening(b *testing.B) {
	bin := runnerdBin(b)
	var samples []time.Duration
	for i := 0; b.Loop(); i++ {
		dir := filepath.Join(b.TempDir(), "state"+strconv.Itoa(i))
		cmd := exec.Command(bin, runnerdArgs(dir, "--listen-address", "127.0.0.1", "--listen-port", "0",
			"--listen-path", prp.ConnectPath(identity.RunID))...)
		cmd.Env = append(os.Environ(), "PAPERCLIP_RUNNER_BOOTSTRAP_TICKET=bootstrap_bench")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		if !waitListening(stderr) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			b.Fatal("runnerd did not report listening")
		}
		samples = append(samples, time.Since(start))
		_ = cmd.Process.Signal(syscall.SIGTERM)
		go func() { _, _ = io.Copy(io.Discard, stderr) }()
		_ = cmd.Wait()
	}
	slices.Sort(samples)
	b.ReportMetric(ms(samples[len(samples)/2]), "median-ms")
	b.ReportMetric(ms(samples[len(samples)*9/10]), "p90-ms")
}

func waitListening(r io.Reader) bool {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var rec struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
			return true
		}
	}
	return false
}

// BenchmarkRunnerdIdle connects one runnerd (dial mode) and watches it idle
// for idleWindow: RSS (VmRSS, VmHWM) and CPU time per second, and the
// static binary's size.
func BenchmarkRunnerdIdle(b *testing.B) {
	bin := runnerdBin(b)
	c := newCoreServer(b)
	cmd := c.startRunnerd(b, bin, runnerdArgs(stateDir(b), "--connect-url", c.connectURL()))
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		waitExit(b, cmd)
	}()
	c.wait(b, func(s control.Snapshot) bool { return s.Connected && s.AckedSourceSeq >= 1 })
	for b.Loop() {
		cpu0, _ := schedstat(cmd.Process.Pid)
		time.Sleep(idleWindow)
		cpu1, _ := schedstat(cmd.Process.Pid)
		b.ReportMetric(float64(cpu1-cpu0)/1e6/idleWindow.Seconds(), "idle-cpu-ms/s")
	}
	rss, hwm := memKiB(cmd.Process.Pid)
	b.ReportMetric(float64(rss)/1024, "idle-RSS-MiB")
	b.ReportMetric(float64(hwm)/1024, "peak-RSS-MiB")
	if st, err := os.Stat(bin); err == nil {
		b.ReportMetric(float64(st.Size())/(1<<20), "binary-MiB")
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// memKiB reads VmRSS and VmHWM of pid.
func memKiB(pid int) (rss, hwm uint64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		field := func(prefix string) (uint64, bool) {
			v, ok := strings.CutPrefix(line, prefix)
			if !ok {
				return 0, false
			}
			n, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n, true
		}
		if n, ok := field("VmRSS:"); ok {
			rss = n
		}
		if n, ok := field("VmHWM:"); ok {
			hwm = n
		}
	}
	return rss, hwm
}
