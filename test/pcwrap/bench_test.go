package pcwrap_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcrunner/pcrunner/internal/testbin"
)

// Benchmarks of the performance targets (issue "pcwrap: a drop-in
// process-session wrapper"). They print figures; nothing asserts a time.
//
//	go test -run '^$' -bench . -benchtime 1x ./test/pcwrap

// procStat returns the CPU time (ns, from schedstat, summed over the
// threads) and VmHWM (KiB) of pid.
func procStat(pid int) (cpuNs uint64, hwmKiB uint64) {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, tk := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, tk.Name()))
		if err == nil {
			f := strings.Fields(string(b))
			if len(f) > 0 {
				v, _ := strconv.ParseUint(f[0], 10, 64)
				cpuNs += v
			}
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				hwmKiB, _ = strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			}
		}
	}
	return cpuNs, hwmKiB
}

// BenchmarkStdinLatency: atomic rename of a 100-byte stdin file until
// the child has read its bytes (the child, cat, copies them into a FIFO
// the benchmark reads, so pcwrap's output path is not measured).
func BenchmarkStdinLatency(b *testing.B) {
	fifo := filepath.Join(b.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		b.Fatal(err)
	}
	s := start(b, opts{env: benchEnv(), payload: sh("exec cat > " + fifo)})
	r, err := os.Open(fifo)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	chunk := strings.Repeat("x", 54)
	body := strings.TrimSuffix(stdinMsg(chunk), "\n") + " \n" // JSON white space pads to 100 bytes
	if len(body) != 100 {
		b.Fatalf("body is %d bytes", len(body))
	}
	buf := make([]byte, len(chunk))
	var lat []time.Duration
	tmp := filepath.Join(s.dir, "stdin", "upload.tmp")
	for seq := int64(1); seq <= int64(max(b.N, 300)); seq++ {
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := os.Rename(tmp, s.stdinPath(seq)); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, buf); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		if seq%50 == 0 {
			time.Sleep(100 * time.Millisecond) // let pcwrap fall idle (idle tick) now and then
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	s.put(int64(max(b.N, 300))+1, stdinEndMsg)
	s.wait(waitBound)
}

// BenchmarkStart: exec of pcwrap until its first frame, the exit frame
// of a `true` child, arrives on stdout (setup, identity capture, spawn,
// reap). Process teardown is not included: closing the inotify instance
// costs the kernel an SRCU grace period (~15-20 ms) after the last frame.
func BenchmarkStart(b *testing.B) {
	bin := testbin.Path(b, "pcwrap")
	var total time.Duration
	n := max(b.N, 20)
	for range n {
		dir := filepath.Join(b.TempDir(), "s")
		cmd := exec.Command(bin, "--session-dir", dir, "--output=stdout", "--", "true")
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		el := time.Since(t0)
		if err != nil || !strings.Contains(line, `"type":"exit"`) {
			b.Fatalf("first frame %q: %v", line, err)
		}
		total += el
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}
	b.ReportMetric(float64(total.Microseconds())/float64(n)/1000, "ms/start")
}

// BenchmarkIdleCPU: CPU time pcwrap spends over 5 idle seconds.
func BenchmarkIdleCPU(b *testing.B) {
	s := start(b, opts{env: benchEnv()})
	s.childPgid()
	pid := s.cmd.Process.Pid
	t0, _ := procStat(pid)
	time.Sleep(5 * time.Second)
	t1, hwm := procStat(pid)
	b.ReportMetric(float64(t1-t0)/1e6, "ms-cpu/5s")
	b.ReportMetric(float64(hwm)/1024, "MiB-peak-rss")
	s.put(1, stdinEndMsg)
	s.wait(waitBound)
}

// BenchmarkThroughput: 32 MiB as 64 KiB stdin files into `cat >/dev/null`.
func BenchmarkThroughput(b *testing.B) {
	const total, chunk = 32 << 20, 64 << 10
	data := stdinMsg(strings.Repeat("y", chunk))
	s := start(b, opts{payload: sh("cat >/dev/null"), env: benchEnv()})
	s.childPgid()
	stdin := filepath.Join(s.dir, "stdin")
	c0, _ := procStat(s.cmd.Process.Pid)
	t0 := time.Now()
	n := int64(0)
	for sent := 0; sent < total; sent += chunk {
		n++
		tmp := filepath.Join(stdin, "upload.tmp")
		if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, s.stdinPath(n)); err != nil {
			b.Fatal(err)
		}
	}
	s.put(n+1, stdinEndMsg)
	var c1, hwm uint64
	for !s.exited() { // sample until exit: the last figures are the totals
		if c, h := procStat(s.cmd.Process.Pid); h > 0 {
			c1, hwm = c, h
		}
		time.Sleep(time.Millisecond)
	}
	el := time.Since(t0)
	s.wait(waitBound)
	b.ReportMetric(float64(total)/el.Seconds()/1e6, "MB/s")
	// Throughput per CPU-second of pcwrap itself: meaningful on a shared,
	// loaded machine where wall-clock MB/s mostly measures the neighbours.
	if c1 > c0 {
		b.ReportMetric(float64(total)/(float64(c1-c0)/1e9)/1e6, "MB/cpu-s")
	}
	b.ReportMetric(float64(hwm)/1024, "MiB-peak-rss")
}

// benchEnv passes PCWRAP_BENCH_ENV (space-separated K=V) to pcwrap, to
// compare runtime settings such as GOMAXPROCS.
func benchEnv() []string { return strings.Fields(os.Getenv("PCWRAP_BENCH_ENV")) }
