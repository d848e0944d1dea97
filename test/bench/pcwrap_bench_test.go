// Package bench measures pcwrap against a plain pipe to cat on this
// machine. The figures are printed (b.ReportMetric), never asserted: the
// machine is shared and noisy. Run them with scripts/bench; a plain
// `go test` runs only the smoke test.
//
// Targets (issue "pcwrap: a drop-in process-session wrapper"): stdin latency
// p50 < 1 ms and p99 < 5 ms, start < 10 ms median, peak RSS < 10 MiB, idle
// CPU < 10 ms per 5 s, throughput ≥ 110 MB/s.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/testbin"
)

const (
	latencySamples  = 2000             // stdin round trips per latency run
	latencyBytes    = 100              // payload of one latency probe (issue text)
	startSamples    = 50               // launches per start-time run
	throughputTotal = 32 << 20         // bytes per throughput run (issue text)
	throughputChunk = 64 << 10         // bytes per stdin file (issue text)
	idleWindow      = 5 * time.Second  // idle CPU window (issue text)
	opTimeout       = 30 * time.Second // bound on any one wait in a run
	clockTicks      = 100              // USER_HZ: /proc/<pid>/stat time unit on Linux
)

// child is what the benchmarks run under pcwrap or on a pipe.
type child interface {
	send(p []byte) error // queue p for the child's stdin
	recv(n int) error    // read n bytes of the child's stdout
	pid() int            // the process whose CPU and RSS are measured
	close(tb testing.TB) // end the child and wait for it
}

// wrapped ("pcwrap") is cat under pcwrap in stdout mode: input as stdin-queue files
// through the sessiondir Writer, output as frame lines on pcwrap's stdout.
type wrapped struct {
	cmd    *exec.Cmd
	w      *sessiondir.Writer
	lines  *bufio.Reader
	stdout io.ReadCloser
	buf    []byte // data received but not yet consumed by recv
}

func startWrapped(tb testing.TB, args ...string) *wrapped {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "session")
	if err := os.MkdirAll(filepath.Join(dir, sessiondir.StdinDir), 0o700); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(testbin.Path(tb, "pcwrap"), append([]string{"--session-dir", dir, "--output", "stdout", "--"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	w, err := sessiondir.OpenWriter(dir, 1, sessiondir.WriterOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return &wrapped{cmd: cmd, w: w, lines: bufio.NewReaderSize(out, 256<<10), stdout: out}
}

func (s *wrapped) send(p []byte) error {
	_, err := s.w.Stdin(context.Background(), p)
	return err
}

// frame reads one stdout-mode line.
func (s *wrapped) frame() (sessiondir.Frame, error) {
	line, err := s.lines.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return sessiondir.Frame{}, fmt.Errorf("frame line over %d bytes", s.lines.Size())
	}
	if err != nil {
		return sessiondir.Frame{}, err
	}
	return sessiondir.ParseFrame(line)
}

func (s *wrapped) recv(n int) error {
	for len(s.buf) < n {
		f, err := s.frame()
		if err != nil {
			return err
		}
		switch f.Type {
		case sessiondir.FrameData:
			if f.Stream == sessiondir.StreamStdout {
				s.buf = append(s.buf, f.Data...)
			}
		case sessiondir.FrameExit, sessiondir.FrameError:
			return fmt.Errorf("unexpected %s frame: %q", f.Type, f.Message)
		}
	}
	s.buf = s.buf[n:]
	return nil
}

func (s *wrapped) pid() int { return s.cmd.Process.Pid }

func (s *wrapped) close(tb testing.TB) {
	_, err := s.w.StdinEnd(context.Background())
	s.w.Close()
	if err != nil {
		tb.Error(err)
	}
	go io.Copy(io.Discard, s.stdout) // drain exit and shutdownAck
	waitBounded(tb, s.cmd)
}

// evented is cat under pcwrap in events mode, read the way runnerd reads
// it: the sessiondir EventReader (inotify + 100 ms poll), deleting each file.
type evented struct {
	cmd    *exec.Cmd
	w      *sessiondir.Writer
	fs     *sessiondir.DirFS
	data   chan []byte
	cancel context.CancelFunc
	done   chan error
	buf    []byte
}

func startEvented(tb testing.TB, args ...string) *evented {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "session")
	for _, sub := range []string{sessiondir.StdinDir, sessiondir.EventsDir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			tb.Fatal(err)
		}
	}
	cmd := exec.Command(testbin.Path(tb, "pcwrap"), append([]string{"--session-dir", dir, "--"}, args...)...)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	w, err := sessiondir.OpenWriter(dir, 1, sessiondir.WriterOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	fs, err := sessiondir.OpenEventsDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &evented{cmd: cmd, w: w, fs: fs, data: make(chan []byte, 1024), cancel: cancel, done: make(chan error, 1)}
	r := sessiondir.NewEventReader(sessiondir.EventReaderOptions{
		FS: fs, Watch: filepath.Join(dir, sessiondir.EventsDir), Logger: slog.New(slog.DiscardHandler),
	})
	go func() {
		e.done <- r.Run(ctx, func(ev sessiondir.Event) error {
			switch ev.Frame.Type {
			case sessiondir.FrameData:
				if ev.Frame.Stream == sessiondir.StreamStdout {
					e.data <- ev.Frame.Data
				}
			case sessiondir.FrameExit:
				return sessiondir.ErrStopReading
			}
			return nil
		})
	}()
	return e
}

func (e *evented) send(p []byte) error {
	_, err := e.w.Stdin(context.Background(), p)
	return err
}

func (e *evented) recv(n int) error {
	for len(e.buf) < n {
		select {
		case b := <-e.data:
			e.buf = append(e.buf, b...)
		case <-time.After(opTimeout):
			return fmt.Errorf("no output within %v", opTimeout)
		}
	}
	e.buf = e.buf[n:]
	return nil
}

func (e *evented) pid() int { return e.cmd.Process.Pid }

func (e *evented) close(tb testing.TB) {
	_, err := e.w.StdinEnd(context.Background())
	e.w.Close()
	if err != nil {
		tb.Error(err)
	}
	waitBounded(tb, e.cmd)
	e.cancel()
	<-e.done
	e.fs.Close()
}

// piped is cat on plain pipes: the baseline.
type piped struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out io.ReadCloser
	buf []byte
}

func startPiped(tb testing.TB, args ...string) *piped {
	tb.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return &piped{cmd: cmd, in: in, out: out, buf: make([]byte, throughputChunk)}
}

func (p *piped) send(b []byte) error { _, err := p.in.Write(b); return err }

func (p *piped) recv(n int) error {
	for n > 0 {
		m, err := p.out.Read(p.buf[:min(n, len(p.buf))])
		if err != nil {
			return err
		}
		n -= m
	}
	return nil
}

func (p *piped) pid() int { return p.cmd.Process.Pid }

func (p *piped) close(tb testing.TB) {
	p.in.Close()
	go io.Copy(io.Discard, p.out)
	waitBounded(tb, p.cmd)
}

func waitBounded(tb testing.TB, cmd *exec.Cmd) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(opTimeout):
		_ = cmd.Process.Kill()
		<-done
		tb.Errorf("%s did not exit within %v", cmd.Path, opTimeout)
	}
}

// variants are the two subjects of every benchmark.
var variants = []struct {
	name  string
	start func(tb testing.TB, args ...string) child
}{
	{"pcwrap", func(tb testing.TB, args ...string) child { return startWrapped(tb, args...) }},
	{"pcwrap-events", func(tb testing.TB, args ...string) child { return startEvented(tb, args...) }},
	{"pipe", func(tb testing.TB, args ...string) child { return startPiped(tb, args...) }},
}

// roundTrip sends one payload and waits until the child echoed it.
func roundTrip(c child, payload []byte) (time.Duration, error) {
	t0 := time.Now()
	if err := c.send(payload); err != nil {
		return 0, err
	}
	if err := c.recv(len(payload)); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkStdinLatency: a 100-byte message until cat echoed it (pcwrap:
// temp file + rename into stdin/, then the data frame on pcwrap's stdout).
func BenchmarkStdinLatency(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), latencyBytes)
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			var samples []time.Duration
			for b.Loop() {
				c := v.start(b, "cat")
				samples = samples[:0]
				for range latencySamples {
					d, err := roundTrip(c, payload)
					if err != nil {
						b.Fatal(err)
					}
					samples = append(samples, d)
				}
				c.close(b)
			}
			b.ReportMetric(ms(percentile(samples, 0.50)), "p50-ms")
			b.ReportMetric(ms(percentile(samples, 0.99)), "p99-ms")
		})
	}
}

// BenchmarkStartTime: from launch until the child ran (its first output
// arrived), median of startSamples launches of `echo ok`.
func BenchmarkStartTime(b *testing.B) {
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			var samples []time.Duration
			for b.Loop() {
				samples = samples[:0]
				for range startSamples {
					t0 := time.Now()
					c := v.start(b, "echo", "ok")
					if err := c.recv(3); err != nil {
						b.Fatal(err)
					}
					samples = append(samples, time.Since(t0))
					c.close(b)
				}
			}
			b.ReportMetric(ms(percentile(samples, 0.50)), "median-ms")
		})
	}
}

// BenchmarkThroughput: 32 MiB as 64 KiB messages through cat; also the
// peak RSS (VmHWM) of the measured process after the run.
func BenchmarkThroughput(b *testing.B) {
	chunk := bytes.Repeat([]byte("0123456789abcdef"), throughputChunk/16)
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			var mbps, rss float64
			for b.Loop() {
				c := v.start(b, "cat")
				errc := make(chan error, 1)
				t0 := time.Now()
				go func() {
					for range throughputTotal / throughputChunk {
						if err := c.send(chunk); err != nil {
							errc <- err
							return
						}
					}
					errc <- nil
				}()
				if err := c.recv(throughputTotal); err != nil {
					b.Fatal(err)
				}
				el := time.Since(t0)
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				mbps = float64(throughputTotal) / 1e6 / el.Seconds()
				kib, err := procStatusKiB(c.pid(), "VmHWM")
				if err != nil {
					b.Fatal(err)
				}
				rss = float64(kib) / 1024
				c.close(b)
			}
			b.ReportMetric(mbps, "MB/s")
			b.ReportMetric(rss, "peak-RSS-MiB")
		})
	}
}

// BenchmarkIdleCPU: utime+stime of the measured process over 5 idle
// seconds with cat waiting for input.
func BenchmarkIdleCPU(b *testing.B) {
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				c := v.start(b, "cat")
				// One round trip first, so startup work is not counted.
				if _, err := roundTrip(c, []byte("warm\n")); err != nil {
					b.Fatal(err)
				}
				before, err := procCPU(c.pid())
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(idleWindow) // the measurement itself: wall-clock idle
				after, err := procCPU(c.pid())
				if err != nil {
					b.Fatal(err)
				}
				cpu = after - before
				c.close(b)
			}
			b.ReportMetric(ms(cpu), "cpu-ms/5s")
		})
	}
}

// procCPU returns utime+stime of pid (fields 14 and 15 of /proc/<pid>/stat).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name, which may hold spaces.
	rest := string(b[bytes.LastIndexByte(b, ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// procStatusKiB returns a kB field of /proc/<pid>/status.
func procStatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// TestBenchSmoke keeps the harness honest under `go test` without running
// the measurements: one round trip through each variant.
func TestBenchSmoke(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			c := v.start(t, "cat")
			if _, err := roundTrip(c, []byte("smoke\n")); err != nil {
				t.Fatal(err)
			}
			if _, err := procCPU(c.pid()); err != nil {
				t.Fatal(err)
			}
			if _, err := procStatusKiB(c.pid(), "VmHWM"); err != nil {
				t.Fatal(err)
			}
			c.close(t)
		})
	}
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
