// Package bench measures pcwrap against a plain pipe to cat on this
// machine. The figures are printed (b.ReportMetric), never asserted: the
// machine is shared and noisy. Run them with scripts/bench-pcwrap; a plain
// `go test` runs only the smoke test.
//
// Targets (issue "pcwrap: a drop-in process-session wrapper"): stdin latency
// p50 < 1 ms and p99 < 5 ms, start < 10 ms median, peak RSS < 10 MiB, idle
// CPU < 10 ms per 5 s, throughput ≥ 110 MB/s.
//
// Wall-clock MB/s on a shared 2-core machine mostly measures the
// neighbours, so every throughput run also reports MB per CPU-second of
// pcwrap itself (schedstat, ns resolution) and of the test's own writer and
// consumer threads: a consumer slower than pcwrap would otherwise be
// misread as pcwrap's cost.
package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

const (
	latencySamples  = 2000             // stdin round trips per latency run
	latencyBytes    = 54               // base64 72 bytes: a 99-byte stdin file, the target's "100-byte file"
	startSamples    = 50               // launches per start-time run
	throughputTotal = 32 << 20         // bytes per throughput run (the target's size)
	throughputChunk = 64 << 10         // bytes per stdin file (issue text)
	idleWindow      = 5 * time.Second  // idle CPU window (issue text)
	opTimeout       = 30 * time.Second // bound on any one wait in a run
	frameQueue      = 64               // data frames the consumer may run ahead of recv
	base64Runs      = 5                // decode runs whose median is the base64 rate
)

// oneWayChild swallows its stdin and says "done" at EOF, so one-way
// throughput ends when the child has read every byte; it then stays
// alive, and so does pcwrap, to be sampled (close ends it).
var oneWayChild = []string{"sh", "-c", "cat >/dev/null && echo done && exec sleep 60"}

// child is what the benchmarks run under pcwrap or on a pipe.
type child interface {
	send(p []byte) error // queue p for the child's stdin
	end() error          // close the child's stdin after what was sent
	recv(p []byte) error // read exactly len(p) bytes of the child's stdout
	pid() int            // the process whose CPU and RSS are measured
	consumerCPU() time.Duration
	close(tb testing.TB) // end the child and wait for it
}

// frames is the test side of a wrapped child's output: a consumer
// goroutine (on its own locked thread, so its CPU can be measured)
// decodes frames and hands stdout data to recv through a bounded channel.
type frames struct {
	data chan []byte
	err  chan error // the consumer's end: nil after exit, else the failure
	// free holds payload buffers recv has consumed, for the consumer to
	// decode the next frames into (as a real consumer recycles them).
	free   chan []byte
	tid    atomic.Int64
	cur    []byte
	curBuf []byte // the whole buffer cur is the rest of
}

func newFrames() *frames {
	return &frames{data: make(chan []byte, frameQueue), err: make(chan error, 1), free: make(chan []byte, frameQueue+2)}
}

// buffer returns a consumed payload buffer, or nil (decode allocates).
func (f *frames) buffer() []byte {
	select {
	case b := <-f.free:
		return b
	default:
		return nil
	}
}

// run is the consumer goroutine's body around decode.
func (f *frames) run(decode func(deliver func(frame.Frame) error) error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f.tid.Store(int64(unix.Gettid()))
	err := decode(func(fr frame.Frame) error {
		switch fr.Type {
		case frame.FrameData:
			if fr.Stream == frame.StreamStdout {
				f.data <- fr.Data
			}
		case frame.FrameError:
			return fmt.Errorf("unexpected error frame: %q", fr.Message)
		case frame.FrameExit:
			return sessiondir.ErrStopReading
		}
		return nil
	})
	if errors.Is(err, sessiondir.ErrStopReading) {
		err = nil
	}
	close(f.data)
	f.err <- err
}

func (f *frames) recv(p []byte) error {
	for len(p) > 0 {
		if len(f.cur) == 0 {
			if f.curBuf != nil {
				select {
				case f.free <- f.curBuf[:0]:
				default:
				}
				f.curBuf = nil
			}
			select {
			case b, ok := <-f.data:
				if !ok {
					if err := <-f.err; err != nil {
						return err
					}
					return io.ErrUnexpectedEOF
				}
				f.cur, f.curBuf = b, b
			case <-time.After(opTimeout):
				return fmt.Errorf("no output within %v", opTimeout)
			}
		}
		n := copy(p, f.cur)
		p, f.cur = p[n:], f.cur[n:]
	}
	return nil
}

// consumerCPU is the CPU time of the consumer thread so far.
func (f *frames) consumerCPU() time.Duration {
	d, _ := taskCPU(fmt.Sprintf("/proc/self/task/%d/schedstat", f.tid.Load()))
	return d
}

// wait ends the consumer after the child's exit frame.
func (f *frames) wait(tb testing.TB) {
	for range f.data {
	}
	if err := <-f.err; err != nil {
		tb.Error(err)
	}
}

// wrapped ("pcwrap") is a child under pcwrap in stdout mode: input as
// stdin-queue files through the sessiondir Writer, output as frame lines
// on pcwrap's stdout.
type wrapped struct {
	*frames
	cmd   *exec.Cmd
	w     queue
	stdin string // the session's stdin/ (queuedFiles)
}

func startWrapped(tb testing.TB, args ...string) child { return startWrappedAs(tb, false, args) }

// startWrappedSpaced is startWrapped with every stdin file in the
// json.dumps form (spacedWriter).
func startWrappedSpaced(tb testing.TB, args ...string) child { return startWrappedAs(tb, true, args) }

func startWrappedAs(tb testing.TB, spaced bool, args []string) child {
	tb.Helper()
	dir := sessionDir(tb, sessiondir.StdinDir)
	cmd := pcwrapCmd(tb, append([]string{"--session-dir", dir, "--output", "stdout", "--"}, args...))
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	w, err := openQueue(dir, spaced)
	if err != nil {
		tb.Fatal(err)
	}
	s := &wrapped{frames: newFrames(), cmd: cmd, w: w, stdin: filepath.Join(dir, sessiondir.StdinDir)}
	go s.run(func(deliver func(frame.Frame) error) error {
		defer io.Copy(io.Discard, out) // shutdownAck after exit
		lines := bufio.NewReaderSize(out, 256<<10)
		for {
			line, err := lines.ReadSlice('\n')
			if errors.Is(err, bufio.ErrBufferFull) {
				return fmt.Errorf("frame line over %d bytes", lines.Size())
			}
			if err != nil {
				return err
			}
			fr, err := frame.ParseFrameInto(line, s.buffer())
			if err != nil {
				return err
			}
			if err := deliver(fr); err != nil {
				return err
			}
		}
	})
	return s
}

func (s *wrapped) send(p []byte) error {
	_, err := s.w.Stdin(context.Background(), p)
	return err
}

func (s *wrapped) end() error {
	_, err := s.w.StdinEnd(context.Background())
	return err
}

// shutdown ends a child that outlives its stdin (oneWayChild).
func (s *wrapped) shutdown() error {
	_, err := s.w.Shutdown(context.Background())
	return err
}

func (s *wrapped) pid() int { return s.cmd.Process.Pid }

func (s *wrapped) close(tb testing.TB) {
	if err := errors.Join(s.end(), s.shutdown()); err != nil {
		tb.Error(err)
	}
	s.w.Close()
	s.wait(tb)
	waitBounded(tb, s.cmd)
}

// evented ("pcwrap-events") is a child under pcwrap in events mode, read
// the way runnerd reads it: the sessiondir EventReader (inotify + 100 ms
// poll), deleting each file after delivery.
type evented struct {
	*frames
	cmd    *exec.Cmd
	w      queue
	stdin  string // the session's stdin/ (queuedFiles)
	fs     *sessiondir.DirFS
	cancel context.CancelFunc
}

func startEvented(tb testing.TB, args ...string) child { return startEventedAs(tb, false, args) }

// startEventedSpaced is startEvented with every stdin file in the
// json.dumps form (spacedWriter).
func startEventedSpaced(tb testing.TB, args ...string) child { return startEventedAs(tb, true, args) }

func startEventedAs(tb testing.TB, spaced bool, args []string) child {
	tb.Helper()
	dir := sessionDir(tb, sessiondir.StdinDir, sessiondir.EventsDir)
	cmd := pcwrapCmd(tb, append([]string{"--session-dir", dir, "--"}, args...))
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	w, err := openQueue(dir, spaced)
	if err != nil {
		tb.Fatal(err)
	}
	fs, err := sessiondir.OpenEventsDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &evented{frames: newFrames(), cmd: cmd, w: w, stdin: filepath.Join(dir, sessiondir.StdinDir), fs: fs, cancel: cancel}
	r := sessiondir.NewEventReader(sessiondir.EventReaderOptions{
		FS: fs, Watch: filepath.Join(dir, sessiondir.EventsDir), Logger: slog.New(slog.DiscardHandler),
		DataBuffer: e.buffer, ReuseRaw: true,
	})
	go e.run(func(deliver func(frame.Frame) error) error {
		return r.Run(ctx, func(ev sessiondir.Event) error { return deliver(ev.Frame) })
	})
	return e
}

func (e *evented) send(p []byte) error {
	_, err := e.w.Stdin(context.Background(), p)
	return err
}

func (e *evented) end() error {
	_, err := e.w.StdinEnd(context.Background())
	return err
}

// shutdown ends a child that outlives its stdin (oneWayChild).
func (e *evented) shutdown() error {
	_, err := e.w.Shutdown(context.Background())
	return err
}

func (e *evented) pid() int { return e.cmd.Process.Pid }

func (e *evented) close(tb testing.TB) {
	if err := errors.Join(e.end(), e.shutdown()); err != nil {
		tb.Error(err)
	}
	e.w.Close()
	waitBounded(tb, e.cmd)
	e.wait(tb) // the exit frame stops the reader
	e.cancel()
	e.fs.Close()
}

// queue is the writing side of a session's stdin queue.
type queue interface {
	Stdin(ctx context.Context, data []byte) (int64, error)
	StdinEnd(ctx context.Context) (int64, error)
	Shutdown(ctx context.Context) (int64, error)
	Close() error
}

// openQueue returns the compact sessiondir Writer (JSON.stringify's form,
// what runnerd writes) or, spaced, a spacedWriter.
func openQueue(dir string, spaced bool) (queue, error) {
	if spaced {
		return openSpacedWriter(dir)
	}
	return sessiondir.OpenWriter(dir, 1, sessiondir.WriterOptions{})
}

// spacedWriter queues stdin files the way Python's json.dumps writes them
// by default, a space after each separator ({"type": "stdin", "data":
// "..."}): valid JSON that is not JSON.stringify's compact form (issue
// 14). It costs the test what the compact writer does (the same base64
// encoder, and the body published by the same sessiondir Writer), so the
// spaced and compact rows differ only in pcwrap's work. One goroutine at
// a time.
type spacedWriter struct {
	w   *sessiondir.Writer
	buf []byte
}

func openSpacedWriter(sessionDir string) (*spacedWriter, error) {
	w, err := sessiondir.OpenWriter(sessionDir, 1, sessiondir.WriterOptions{})
	if err != nil {
		return nil, err
	}
	return &spacedWriter{w: w}, nil
}

func (w *spacedWriter) Stdin(ctx context.Context, data []byte) (int64, error) {
	const compact, spaced = `{"type":"stdin","data":"`, `{"type": "stdin", "data": "`
	// The compact body after room for the longer head, then the spaced
	// head over that room and the compact one.
	room := len(spaced) - len(compact)
	w.buf = frame.Message{Type: frame.MsgStdin, Data: data}.AppendJSON(append(w.buf[:0], make([]byte, room)...))
	copy(w.buf, spaced)
	return w.w.WriteBody(ctx, w.buf)
}

func (w *spacedWriter) StdinEnd(ctx context.Context) (int64, error) {
	return w.w.WriteBody(ctx, []byte(`{"type": "stdinEnd"}`+"\n"))
}

func (w *spacedWriter) Shutdown(ctx context.Context) (int64, error) {
	return w.w.WriteBody(ctx, []byte(`{"type": "shutdown"}`+"\n"))
}

func (w *spacedWriter) Close() error { return w.w.Close() }

// sessionDir returns a fresh session dir with the given subdirectories.
func sessionDir(tb testing.TB, subs ...string) string {
	dir := filepath.Join(tb.TempDir(), "session")
	for _, sub := range subs {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// pcwrapCmd runs the built pcwrap; PCWRAP_BENCH_ENV (space-separated K=V)
// is added to its environment, to compare runtime settings such as
// GOGC or GOMAXPROCS. PCWRAP_BENCH_TAGS (space-separated) builds it with
// those tags: "pprof" writes a CPU profile to $PCWRAP_CPUPROFILE (set it
// in PCWRAP_BENCH_ENV; each launch overwrites it, so run one benchmark).
// PCWRAP_BENCH_BIN runs that pcwrap binary instead of building one, so
// two builds can be compared in alternating runs of one compiled bench.
func pcwrapCmd(tb testing.TB, args []string) *exec.Cmd {
	bin := os.Getenv("PCWRAP_BENCH_BIN")
	if bin == "" {
		bin = testbin.Path(tb, "pcwrap", strings.Fields(os.Getenv("PCWRAP_BENCH_TAGS"))...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), strings.Fields(os.Getenv("PCWRAP_BENCH_ENV"))...)
	return cmd
}

// piped ("pipe") is the child on plain pipes: the baseline.
type piped struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out io.ReadCloser
}

func startPiped(tb testing.TB, args ...string) child {
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
	return &piped{cmd: cmd, in: in, out: out}
}

func (p *piped) send(b []byte) error { _, err := p.in.Write(b); return err }

func (p *piped) end() error { return p.in.Close() }

func (p *piped) recv(b []byte) error { _, err := io.ReadFull(p.out, b); return err }

func (p *piped) pid() int { return p.cmd.Process.Pid }

// consumerCPU: the pipe has no decoding consumer.
func (p *piped) consumerCPU() time.Duration { return 0 }

func (p *piped) close(tb testing.TB) {
	p.in.Close()
	_ = p.cmd.Process.Kill() // oneWayChild outlives its stdin
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

// variants are the subjects of every benchmark.
var variants = []struct {
	name    string
	wrapper bool // pcwrap is the measured process
	start   func(tb testing.TB, args ...string) child
}{
	{"pcwrap", true, startWrapped},
	{"pcwrap-events", true, startEvented},
	{"pipe", false, startPiped},
}

// spacedVariants pair each pcwrap variant with the same one writing its
// stdin files in the json.dumps form (BenchmarkSpacedJSON).
var spacedVariants = []struct {
	name            string
	compact, spaced func(tb testing.TB, args ...string) child
}{
	{"pcwrap", startWrapped, startWrappedSpaced},
	{"pcwrap-events", startEvented, startEventedSpaced},
}

// roundTrip sends one payload and waits until the child echoed it.
func roundTrip(c child, payload []byte) (time.Duration, error) {
	got := make([]byte, len(payload))
	t0 := time.Now()
	if err := c.send(payload); err != nil {
		return 0, err
	}
	if err := c.recv(got); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	if !bytes.Equal(got, payload) {
		return 0, fmt.Errorf("echo differs: got %q", got)
	}
	return d, nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkStdinLatency: a 99-byte stdin file (temp file + rename through
// the sessiondir Writer) until cat's echo of it arrived, so the figure
// also holds pcwrap's output path and the consumer: an upper bound on
// "until the child has read it".
func BenchmarkStdinLatency(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), latencyBytes)
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			var (
				samples     []time.Duration
				child, self sched
			)
			for b.Loop() {
				c := v.start(b, "cat")
				if _, err := roundTripOnce(c); err != nil { // startup is not counted
					b.Fatal(err)
				}
				samples = samples[:0]
				c0, s0 := procSched(b, c.pid()), procSched(b, os.Getpid())
				for range latencySamples {
					d, err := roundTrip(c, payload)
					if err != nil {
						b.Fatal(err)
					}
					samples = append(samples, d)
				}
				child, self = procSched(b, c.pid()).sub(c0), procSched(b, os.Getpid()).sub(s0)
				c.close(b)
			}
			b.ReportMetric(ms(percentile(samples, 0.50)), "p50-ms")
			b.ReportMetric(ms(percentile(samples, 0.99)), "p99-ms")
			// Per stdin file: pcwrap's (or, on the pipe, cat's) wake-ups
			// and CPU, and the test process's: it writes the stdin file
			// and reads the output (events mode: one event file each,
			// through sessiondir's EventReader, as runnerd does; so these
			// are also the figures per event file).
			b.ReportMetric(float64(child.runs)/latencySamples, "wakeups/file")
			b.ReportMetric(float64(child.cpu.Microseconds())/latencySamples, "cpu-us/file")
			b.ReportMetric(float64(self.runs)/latencySamples, "test-wakeups/file")
			b.ReportMetric(float64(self.cpu.Microseconds())/latencySamples, "test-cpu-us/file")
		})
	}
}

// BenchmarkStartTime: from launch until the child ran (its first output
// arrived), median of startSamples launches of `echo ok`.
func BenchmarkStartTime(b *testing.B) {
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			var samples []time.Duration
			got := make([]byte, 3)
			for b.Loop() {
				samples = samples[:0]
				for range startSamples {
					t0 := time.Now()
					c := v.start(b, "echo", "ok")
					if err := c.recv(got); err != nil {
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

// BenchmarkThroughput: 32 MiB as 64 KiB messages. OneWay sends them into
// `cat >/dev/null` (pcwrap's stdin path only) and ends when the child read
// EOF; RoundTrip sends them through cat and back as data frames decoded by
// the test (stdin and output path), checking every byte. Each run also
// reports the peak RSS (VmHWM) of the measured process, MB per CPU-second
// of pcwrap, and of the test's writer and consumer threads.
func BenchmarkThroughput(b *testing.B) {
	chunk := bytes.Repeat([]byte("0123456789abcdef"), throughputChunk/16)
	for _, mode := range []string{"OneWay", "RoundTrip"} {
		b.Run(mode, func(b *testing.B) {
			for _, v := range variants {
				b.Run(v.name, func(b *testing.B) {
					var r throughputRun
					for b.Loop() {
						r = runThroughput(b, v.start, mode == "RoundTrip", chunk)
					}
					b.ReportMetric(r.mbps, "MB/s")
					if v.wrapper || mode == "RoundTrip" { // one way, the pipe's process is sh, then sleep
						b.ReportMetric(r.rss, "peak-RSS-MiB")
					}
					if v.wrapper {
						b.ReportMetric(r.mbPerCPU, "MB/cpu-s")
						b.ReportMetric(r.wakeupsPerFile, "wakeups/file")
						b.ReportMetric(r.writerMBPerCPU, "writer-MB/cpu-s")
						if r.consumerMBPerCPU > 0 {
							b.ReportMetric(r.consumerMBPerCPU, "consumer-MB/cpu-s")
						}
					}
				})
			}
		})
	}
}

// spacedPairs is how many compact and spaced runs BenchmarkSpacedJSON
// alternates: single runs on this shared 2-core machine swing by 2x with
// the neighbours' load, medians of interleaved runs much less.
const spacedPairs = 5

// BenchmarkSpacedJSON: the one-way throughput of BenchmarkThroughput with
// the stdin files in JSON.stringify's compact form and in Python
// json.dumps's default spaced form, alternated spacedPairs times in the
// same run. It reports the median of each and spaced/compact (target:
// spaced within 10% of compact), for throughput and for MB per CPU-second
// of pcwrap.
func BenchmarkSpacedJSON(b *testing.B) {
	chunk := bytes.Repeat([]byte("0123456789abcdef"), throughputChunk/16)
	yard := newBase64Yardstick(chunk)
	for _, v := range spacedVariants {
		b.Run(v.name, func(b *testing.B) {
			var c, s []throughputRun
			// paired runs a one-way run between two encoding/base64
			// decodes of the same data, so each run has its own yardstick
			// (yardstick).
			paired := func(start func(testing.TB, ...string) child) throughputRun {
				before := yard.measure(b)
				r := runThroughput(b, start, false, chunk)
				r.base64 = before.add(yard.measure(b))
				return r
			}
			for b.Loop() {
				c, s = c[:0], s[:0]
				for k := range spacedPairs {
					// Alternate which goes first, so a trend in the load
					// favours neither.
					if k%2 == 0 {
						c = append(c, paired(v.compact))
					}
					s = append(s, paired(v.spaced))
					if k%2 == 1 {
						c = append(c, paired(v.compact))
					}
				}
			}
			mbps := func(r throughputRun) float64 { return r.mbps }
			perCPU := func(r throughputRun) float64 { return r.mbPerCPU }
			cm, sm := medianOf(c, mbps), medianOf(s, mbps)
			cc, sc := medianOf(c, perCPU), medianOf(s, perCPU)
			b.ReportMetric(cm, "compact-MB/s")
			b.ReportMetric(sm, "spaced-MB/s")
			b.ReportMetric(sm/cm, "spaced/compact")
			b.ReportMetric(cc, "compact-MB/cpu-s")
			b.ReportMetric(sc, "spaced-MB/cpu-s")
			b.ReportMetric(sc/cc, "spaced/compact-cpu")
			wake := func(r throughputRun) float64 { return r.wakeupsPerFile }
			b.ReportMetric(medianOf(c, wake), "compact-wakeups/file")
			// Each run against its own yardstick, per CPU-second and
			// wall-clock; the median of those ratios.
			cpuRatio := func(r throughputRun) float64 { return r.mbPerCPU / r.base64.mbPerCPU() }
			wallRatio := func(r throughputRun) float64 { return r.mbps / r.base64.mbps() }
			b.ReportMetric(medianOf(c, cpuRatio), "compact/base64-cpu")
			b.ReportMetric(medianOf(s, cpuRatio), "spaced/base64-cpu")
			b.ReportMetric(medianOf(c, wallRatio), "compact/base64-wall")
			b.ReportMetric(medianOf(s, wallRatio), "spaced/base64-wall")
			b64 := func(r throughputRun) float64 { return r.base64.mbPerCPU() }
			b.ReportMetric(medianOf(append(slices.Clone(c), s...), b64), "base64-MB/cpu-s")
		})
	}
}

// base64Yardstick decodes the throughput runs' data with encoding/base64
// on one locked thread: the rate pcwrap's one-way throughput is held to.
// BenchmarkBase64Decode measures it once per bench; BenchmarkSpacedJSON
// measures it around every one-way run (paired), because on this shared
// machine even the CPU-second rate of the same loop swings by 2x from
// minute to minute, and a yardstick taken at another moment than the run
// it judges adds that swing to the ratio. It decodes the 512 files' data
// each from its own copy of the encoded text into one reused output
// buffer, as pcwrap decodes each file freshly read into its read buffer:
// one hot 87 KiB input, decoded 512 times, would be the gentler test.
type base64Yardstick struct {
	src [][]byte // the encoded data of each stdin file of a run
	dst []byte
}

func newBase64Yardstick(chunk []byte) *base64Yardstick {
	enc := base64.StdEncoding.EncodeToString(chunk)
	y := &base64Yardstick{dst: make([]byte, len(chunk))}
	for range throughputTotal / throughputChunk {
		y.src = append(y.src, []byte(enc))
	}
	return y
}

// decodeRun is the payload decoded, the wall-clock and the thread's CPU
// time of yardstick decodes (sums, for a pair).
type decodeRun struct {
	bytes     int64
	wall, cpu time.Duration
}

func (a decodeRun) add(b decodeRun) decodeRun {
	return decodeRun{a.bytes + b.bytes, a.wall + b.wall, a.cpu + b.cpu}
}

func (d decodeRun) mbPerCPU() float64 { return float64(d.bytes) / 1e6 / d.cpu.Seconds() }
func (d decodeRun) mbps() float64     { return float64(d.bytes) / 1e6 / d.wall.Seconds() }

// measure decodes every file's data once on a locked thread.
func (y *base64Yardstick) measure(tb testing.TB) decodeRun {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	thread := fmt.Sprintf("/proc/self/task/%d/schedstat", unix.Gettid())
	t0, c0 := time.Now(), taskSched(tb, thread).cpu
	for _, src := range y.src {
		if _, err := base64.StdEncoding.Decode(y.dst, src); err != nil {
			tb.Fatal(err)
		}
	}
	return decodeRun{throughputTotal, time.Since(t0), taskSched(tb, thread).cpu - c0}
}

// BenchmarkBacklog: pcwrap's one-way throughput when it is the
// bottleneck. BenchmarkSpacedJSON's writer is slower than pcwrap, so
// there pcwrap waits for every file and pays a wake-up round per file;
// here the child holds its stdin unread until the whole 32 MiB is queued
// (pcwrap reads the first files, then leaves the rest on disk while the
// child's stdin is full), and the figures are taken from the moment the
// child starts reading until it has read everything. MB per CPU-second
// counts the files still on disk at that moment. Compact and spaced runs
// alternate, each between two yardstick decodes, as in
// BenchmarkSpacedJSON.
func BenchmarkBacklog(b *testing.B) {
	chunk := bytes.Repeat([]byte("0123456789abcdef"), throughputChunk/16)
	yard := newBase64Yardstick(chunk)
	for _, v := range spacedVariants {
		b.Run(v.name, func(b *testing.B) {
			var c, s []throughputRun
			paired := func(start func(testing.TB, ...string) child) throughputRun {
				before := yard.measure(b)
				r := runBacklog(b, start, chunk, throughputTotal/throughputChunk)
				r.base64 = before.add(yard.measure(b))
				return r
			}
			for b.Loop() {
				c, s = c[:0], s[:0]
				for k := range spacedPairs {
					if k%2 == 0 {
						c = append(c, paired(v.compact))
					}
					s = append(s, paired(v.spaced))
					if k%2 == 1 {
						c = append(c, paired(v.compact))
					}
				}
			}
			perCPU := func(r throughputRun) float64 { return r.mbPerCPU }
			cpuRatio := func(r throughputRun) float64 { return r.mbPerCPU / r.base64.mbPerCPU() }
			wake := func(r throughputRun) float64 { return r.wakeupsPerFile }
			mbps := func(r throughputRun) float64 { return r.mbps }
			b.ReportMetric(medianOf(c, mbps), "compact-MB/s")
			b.ReportMetric(medianOf(c, perCPU), "compact-MB/cpu-s")
			b.ReportMetric(medianOf(s, perCPU), "spaced-MB/cpu-s")
			b.ReportMetric(medianOf(s, perCPU)/medianOf(c, perCPU), "spaced/compact-cpu")
			b.ReportMetric(medianOf(c, cpuRatio), "compact/base64-cpu")
			b.ReportMetric(medianOf(s, cpuRatio), "spaced/base64-cpu")
			b.ReportMetric(medianOf(c, wake), "compact-wakeups/file")
			b64 := func(r throughputRun) float64 { return r.base64.mbPerCPU() }
			b.ReportMetric(medianOf(append(slices.Clone(c), s...), b64), "base64-MB/cpu-s")
		})
	}
}

// runBacklog is one BenchmarkBacklog run of files stdin files of chunk:
// the child waits on a fifo before it reads its stdin, so the queue fills
// first.
func runBacklog(b testing.TB, start func(testing.TB, ...string) child, chunk []byte, files int) throughputRun {
	fifo := filepath.Join(b.TempDir(), "go")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		b.Fatal(err)
	}
	c := start(b, "sh", "-c", `read go <"$0" && cat >/dev/null && echo done && exec sleep 60`, fifo)
	defer c.close(b)
	q, ok := c.(interface{ queuedFiles() (int, error) })
	if !ok {
		b.Fatalf("%T has no stdin queue", c)
	}
	for range files {
		if err := c.send(chunk); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.end(); err != nil {
		b.Fatal(err)
	}
	// pcwrap reads until the child's stdin is full, then leaves the rest:
	// wait until the count on disk holds still.
	left, err := settledQueue(q.queuedFiles)
	if err != nil {
		b.Fatal(err)
	}
	left-- // the stdinEnd file
	if left < files/2 {
		b.Fatalf("only %d of %d files left queued before the child reads", left, files)
	}
	s0 := procSched(b, c.pid())
	t0 := time.Now()
	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	done := make([]byte, len("done\n"))
	if err := c.recv(done); err != nil {
		b.Fatal(err)
	}
	el := time.Since(t0)
	used := procSched(b, c.pid()).sub(s0)
	kib, err := procStatusKiB(c.pid(), "VmHWM")
	if err != nil {
		b.Fatal(err)
	}
	mb := float64(left*len(chunk)) / 1e6
	r := throughputRun{mbps: mb / el.Seconds(), rss: float64(kib) / 1024, wakeupsPerFile: float64(used.runs) / float64(left)}
	if used.cpu > 0 {
		r.mbPerCPU = mb / used.cpu.Seconds()
	}
	return r
}

// backlogPoll spaces the counts of settledQueue; backlogSteady is how
// many equal counts in a row mean pcwrap has stopped reading.
const (
	backlogPoll   = 5 * time.Millisecond
	backlogSteady = 4
)

// settledQueue returns the count once it held still backlogSteady polls.
func settledQueue(count func() (int, error)) (int, error) {
	deadline := time.Now().Add(opTimeout)
	last, same := -1, 0
	for time.Now().Before(deadline) {
		n, err := count()
		if err != nil {
			return 0, err
		}
		if n == last {
			if same++; same == backlogSteady {
				return n, nil
			}
		} else {
			last, same = n, 1
		}
		time.Sleep(backlogPoll)
	}
	return 0, fmt.Errorf("stdin queue still changing after %v", opTimeout)
}

func (s *wrapped) queuedFiles() (int, error) { return countQueued(s.stdin) }
func (e *evented) queuedFiles() (int, error) { return countQueued(e.stdin) }

// countQueued counts the queue files (*.json) in a stdin/.
func countQueued(dir string) (int, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*"+sessiondir.JSONSuffix))
	return len(names), err
}

func medianOf(runs []throughputRun, f func(throughputRun) float64) float64 {
	x := make([]float64, len(runs))
	for i, r := range runs {
		x[i] = f(r)
	}
	slices.Sort(x)
	return x[len(x)/2]
}

type throughputRun struct {
	mbps, rss                                  float64
	mbPerCPU, writerMBPerCPU, consumerMBPerCPU float64
	wakeupsPerFile                             float64   // of the measured process, per 64 KiB stdin file
	base64                                     decodeRun // the yardstick around this run (BenchmarkSpacedJSON)
}

func runThroughput(b *testing.B, start func(testing.TB, ...string) child, roundTrip bool, chunk []byte) throughputRun {
	args := oneWayChild
	if roundTrip {
		args = []string{"cat"}
	}
	c := start(b, args...)
	defer c.close(b)
	// Warm up (and for pcwrap make sure the child runs) before measuring.
	if roundTrip {
		if _, err := roundTripOnce(c); err != nil {
			b.Fatal(err)
		}
	}
	s0 := procSched(b, c.pid())
	cons0 := c.consumerCPU()
	var writerCPU time.Duration
	errc := make(chan error, 1)
	t0 := time.Now()
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		self := fmt.Sprintf("/proc/self/task/%d/schedstat", unix.Gettid())
		w0, _ := taskCPU(self)
		for range throughputTotal / throughputChunk {
			if err := c.send(chunk); err != nil {
				errc <- err
				return
			}
		}
		w1, _ := taskCPU(self)
		writerCPU = w1 - w0
		if !roundTrip {
			errc <- c.end()
			return
		}
		errc <- nil
	}()
	if roundTrip {
		got := make([]byte, len(chunk))
		for range throughputTotal / throughputChunk {
			if err := c.recv(got); err != nil {
				b.Fatal(err)
			}
			if !bytes.Equal(got, chunk) {
				b.Fatal("round trip changed the data")
			}
		}
	} else {
		done := make([]byte, len("done\n"))
		if err := c.recv(done); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(t0)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	used := procSched(b, c.pid()).sub(s0)
	cons := c.consumerCPU() - cons0
	kib, err := procStatusKiB(c.pid(), "VmHWM")
	if err != nil {
		b.Fatal(err)
	}
	mb := float64(throughputTotal) / 1e6
	r := throughputRun{mbps: mb / el.Seconds(), rss: float64(kib) / 1024, wakeupsPerFile: float64(used.runs) / (throughputTotal / throughputChunk)}
	if used.cpu > 0 {
		r.mbPerCPU = mb / used.cpu.Seconds()
	}
	if writerCPU > 0 {
		r.writerMBPerCPU = mb / writerCPU.Seconds()
	}
	if roundTrip && cons > 0 {
		r.consumerMBPerCPU = mb / cons.Seconds()
	}
	return r
}

func roundTripOnce(c child) (time.Duration, error) { return roundTrip(c, []byte("warm\n")) }

// BenchmarkIdleCPU: CPU time of the measured process over 5 idle seconds
// with cat waiting for input.
func BenchmarkIdleCPU(b *testing.B) {
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				c := v.start(b, "cat")
				// One round trip first, so startup work is not counted.
				if _, err := roundTripOnce(c); err != nil {
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

// sched is a process's scheduler account: CPU time, and how many times
// its threads were put on a CPU (a wake-up each, schedstat's third field).
type sched struct {
	cpu  time.Duration
	runs int64
}

func (a sched) sub(b sched) sched { return sched{a.cpu - b.cpu, a.runs - b.runs} }

// procSched sums sched over the threads of pid, as procCPU does.
func procSched(tb testing.TB, pid int) sched {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		tb.Fatal(err)
	}
	var sum sched
	for _, t := range tasks {
		s, err := readSched(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			continue // the thread exited meanwhile
		}
		if err != nil {
			tb.Fatal(err)
		}
		sum.cpu += s.cpu
		sum.runs += s.runs
	}
	return sum
}

// taskSched is sched of one thread's schedstat file.
func taskSched(tb testing.TB, path string) sched {
	s, err := readSched(path)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// readSched parses a schedstat file: on-CPU ns, wait ns, timeslices.
func readSched(path string) (sched, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return sched{}, err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return sched{}, fmt.Errorf("parse %s: %q", path, b)
	}
	ns, err1 := strconv.ParseInt(f[0], 10, 64)
	runs, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return sched{}, fmt.Errorf("parse %s: %q", path, b)
	}
	return sched{time.Duration(ns), runs}, nil
}

// BenchmarkBase64Decode: encoding/base64 decoding the throughput runs'
// stdin data in chunks of one stdin file, single-threaded, as MB of
// decoded payload per second (the median of base64Runs): the yardstick the one-way throughput is
// held to in the same run.
func BenchmarkBase64Decode(b *testing.B) {
	b.Run("stdlib", func(b *testing.B) {
		chunk := bytes.Repeat([]byte("0123456789abcdef"), throughputChunk/16)
		src := []byte(base64.StdEncoding.EncodeToString(chunk))
		dst := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		thread := fmt.Sprintf("/proc/self/task/%d/schedstat", unix.Gettid())
		var runs, cpu []time.Duration
		for b.Loop() {
			runs, cpu = runs[:0], cpu[:0]
			for range base64Runs {
				t0, c0 := time.Now(), taskSched(b, thread).cpu
				for range throughputTotal / throughputChunk {
					if _, err := base64.StdEncoding.Decode(dst, src); err != nil {
						b.Fatal(err)
					}
				}
				runs = append(runs, time.Since(t0))
				cpu = append(cpu, taskSched(b, thread).cpu-c0)
			}
		}
		mb := float64(throughputTotal) / 1e6
		b.ReportMetric(mb/percentile(runs, 0.50).Seconds(), "MB/s")
		// Per CPU-second of the decoding thread: what the one-way MB per
		// CPU-second of pcwrap compares with when neighbours take turns
		// on the CPUs (wall-clock MB/s then measures them).
		b.ReportMetric(mb/percentile(cpu, 0.50).Seconds(), "MB/cpu-s")
	})
	// The same from a copy of the encoded text per file (base64Yardstick),
	// as BenchmarkSpacedJSON measures it around each run.
	b.Run("fresh", func(b *testing.B) {
		y := newBase64Yardstick(bytes.Repeat([]byte("0123456789abcdef"), throughputChunk/16))
		var runs []decodeRun
		for b.Loop() {
			runs = runs[:0]
			for range base64Runs {
				runs = append(runs, y.measure(b))
			}
		}
		slices.SortFunc(runs, func(a, b decodeRun) int { return cmp.Compare(a.cpu, b.cpu) })
		b.ReportMetric(runs[len(runs)/2].mbPerCPU(), "MB/cpu-s")
		slices.SortFunc(runs, func(a, b decodeRun) int { return cmp.Compare(a.wall, b.wall) })
		b.ReportMetric(runs[len(runs)/2].mbps(), "MB/s")
	})
}

// procCPU returns the CPU time of pid: the sum over its threads of
// /proc/<pid>/task/<tid>/schedstat (ns, where /proc/<pid>/stat counts
// 10 ms ticks). Go runtime threads do not exit, so none is missed.
func procCPU(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range tasks {
		d, err := taskCPU(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread exited meanwhile
		}
		sum += d
	}
	return sum, nil
}

// taskCPU reads the on-CPU time (first field, ns) of a schedstat file.
func taskCPU(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("empty %s", path)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns), err
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
// the measurements: one round trip through each variant, a one-way end,
// and the /proc readers.
func TestBenchSmoke(t *testing.T) {
	all := slices.Clone(variants)
	for _, v := range spacedVariants {
		all = append(all, struct {
			name    string
			wrapper bool
			start   func(tb testing.TB, args ...string) child
		}{v.name + "-spaced", true, v.spaced})
	}
	for _, v := range all {
		t.Run(v.name, func(t *testing.T) {
			c := v.start(t, "cat")
			if _, err := roundTrip(c, []byte("smoke\n")); err != nil {
				t.Fatal(err)
			}
			if cpu, err := procCPU(c.pid()); err != nil || cpu <= 0 {
				t.Fatalf("procCPU = %v, %v", cpu, err)
			}
			if _, err := procStatusKiB(c.pid(), "VmHWM"); err != nil {
				t.Fatal(err)
			}
			c.close(t)

			c = v.start(t, oneWayChild...)
			if err := errors.Join(c.send([]byte("x\n")), c.end()); err != nil {
				t.Fatal(err)
			}
			done := make([]byte, len("done\n"))
			if err := c.recv(done); err != nil || string(done) != "done\n" {
				t.Fatalf("one-way child said %q: %v", done, err)
			}
			c.close(t)

			// A backlog run of 2 MiB: more than pcwrap takes in before
			// the child reads, so files stay queued.
			const smokeFiles = 32
			if !v.wrapper {
				return
			}
			if r := runBacklog(t, v.start, make([]byte, throughputChunk), smokeFiles); r.mbPerCPU <= 0 {
				t.Fatalf("backlog run: %+v", r)
			}
		})
	}
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit))
}
