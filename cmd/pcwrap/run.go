package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/shutdown"
	"github.com/pcrunner/pcrunner/internal/stdinpoll"
)

// Bounds of the output drain (spec §8.1 item 4).
const (
	// drainWait: after the leader exited, how long descendants may keep
	// the pipes open before the group is killed (spec: 2000 ms, the
	// os/exec WaitDelay idea).
	drainWait = 2000 * time.Millisecond
	// drainAfterKill: after that SIGKILL, how long buffered output may
	// still be read; a holder outside the group cannot stall exit.
	drainAfterKill = 500 * time.Millisecond
	// maxGraceMS mirrors Node's setTimeout: a delay above 2^31-1 ms is
	// replaced by 1 ms.
	maxGraceMS = 1<<31 - 1
	// maxRetriesCap keeps a huge retry budget in int range (2^31 ticks
	// is over three years of 50 ms ticks: effectively never give up).
	maxRetriesCap = 1 << 31
)

// pipeRead is the largest read from a child pipe, one data frame (§7.1).
const pipeRead = 64 << 10

// Fixed messages (spec §2.2, §2.5, §5.1).
const (
	msgMissingEnv = "Missing process session bridge env."
)

// env is a lookup over the process environment given to run.
type env []string

func (e env) get(k string) string {
	v := ""
	for _, kv := range e {
		if s, ok := strings.CutPrefix(kv, k+"="); ok {
			v = s
		}
	}
	return v
}

// run is pcwrap's whole life: set up the session (spec §4), spawn the
// child, pump output, read the stdin queue, and end per §8. It returns
// the exit status of §2.5.
func run(o options, environ []string, sigs <-chan os.Signal, stdout, stderr io.Writer, log *slog.Logger) int {
	e := env(environ)
	mode := o.output
	if mode == "" {
		mode = e.get(sessiondir.EnvOutput)
	}
	if mode == "" {
		mode = sessiondir.OutputEvents
	}
	if mode != sessiondir.OutputEvents && mode != sessiondir.OutputStdout {
		fmt.Fprintf(stderr, "pcwrap: invalid output mode %s; want events or stdout\n", mode)
		return exitFailure
	}
	dir := o.sessionDir
	if dir == "" {
		dir = e.get(sessiondir.EnvDir)
	}
	if dir == "" {
		fmt.Fprintln(stderr, msgMissingEnv)
		return exitFailure
	}
	if !filepath.IsAbs(dir) {
		fmt.Fprintln(stderr, "pcwrap: the process session dir must be an absolute path")
		return exitFailure
	}
	events := mode == sessiondir.OutputEvents

	var out *sessiondir.Emitter
	if !events {
		out = sessiondir.NewStdoutEmitter(stdout, log)
	}
	// fail reports a setup failure before any child exists: error frame
	// (or stderr only, without an output), then shutdownAck.
	fail := func(msg string, code int) int {
		if out == nil {
			fmt.Fprintln(stderr, msg)
			return code
		}
		out.Emit(frame.ErrorFrame(msg))
		out.Emit(frame.ShutdownAckFrame())
		out.Close()
		return code
	}

	sd, err := sessiondir.Open(dir, events)
	if err != nil {
		msg := setupMessage(err)
		if events && !errors.Is(err, sessiondir.ErrLocked) {
			// A refused stdin/ can still be reported as an event when
			// the session dir itself is sound; a refused session dir
			// goes to stderr only (spec §2.5).
			if ev, eerr := sessiondir.OpenEvents(dir); eerr == nil {
				defer ev.Close()
				out = sessiondir.NewEventsEmitter(ev, log)
			}
		} else if events {
			fmt.Fprintln(stderr, msg)
			return exitFailure
		}
		return fail(msg, exitFailure)
	}
	defer sd.Close()
	if events {
		out = sessiondir.NewEventsEmitter(sd.Events, log)
	}

	// The child's stdin writer exists only after spawn; terminate()
	// closes it through this hook.
	var (
		feedMu sync.Mutex
		feeder *stdinpoll.Feeder
	)
	grace := sessiondir.ParseTuning(e.get(sessiondir.EnvGraceMS), shutdown.DefaultGrace.Milliseconds())
	if grace > maxGraceMS {
		grace = 1
	}
	term := shutdown.New(time.Duration(grace)*time.Millisecond, func() {
		out.FailFast()
		feedMu.Lock()
		if feeder != nil {
			feeder.Drop()
		}
		feedMu.Unlock()
	}, func() { out.Emit(frame.ShutdownAckFrame()) })
	defer term.Stop()

	// SIGTERM/SIGINT before the spawn: acknowledge, spawn nothing (§4).
	if preSpawnSignal(sigs) {
		term.Terminate()
		out.Close()
		return exitFailure
	}

	var payload sessiondir.Payload
	if len(o.command) > 0 {
		cwd, _ := os.Getwd()
		payload = sessiondir.Payload{Command: o.command[0], Args: o.command[1:], Cwd: cwd}
	} else if payload, err = readPayload(sd, e.get(sessiondir.EnvCommandB64)); err != nil {
		return fail(sessiondir.ErrPayload.Error(), exitFailure)
	}

	verifier, err := sd.Capture()
	if err != nil {
		var pe *sessiondir.ProbeError
		msg := err.Error()
		if errors.As(err, &pe) {
			fmt.Fprintln(stderr, msg)
		} else {
			fmt.Fprintf(stderr, "Failed to capture the process session identity: %s. Terminating.\n", strings.TrimSuffix(msg, "."))
		}
		return fail(msg, exitFailure)
	}
	if preSpawnSignal(sigs) {
		term.Terminate()
		out.Close()
		return exitFailure
	}

	// Spawn (spec §2.4).
	cwd := payload.Cwd
	if cwd == "" {
		cwd, _ = os.Getwd()
	}
	cenv := childEnv(environ, payload.Env)
	ch, err := spawn(payload.Command, payload.Args, cwd, cenv)
	if err != nil {
		code := exitSpawn
		out.Emit(frame.ErrorFrame(fmt.Sprintf("spawn %s %s", payload.Command, spawnErrno(err))))
		out.Emit(frame.ExitFrame(&code, ""))
		out.Emit(frame.ShutdownAckFrame())
		out.Close()
		return exitSpawn
	}
	feedMu.Lock()
	feeder = ch.feeder
	feedMu.Unlock()
	term.Attach(ch.group)

	// Output pumps: one per pipe, each ends at EOF (or the drain bound).
	var pumps sync.WaitGroup
	for _, p := range []struct {
		f      *os.File
		stream string
	}{{ch.stdout, frame.StreamStdout}, {ch.stderr, frame.StreamStderr}} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			pump(p.f, p.stream, out)
		}()
	}

	reader := newReader(sd, verifier, ch.feeder, term, out, e, stderr, log)
	ctx, cancel := context.WithCancel(context.Background())
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		reader.Run(ctx)
	}()
	// The child record (spec §2.4) is written once output and stdin are
	// already flowing: a file create costs up to a millisecond on a busy
	// filesystem, which the child's first frame need not wait for.
	if st, err := ch.group.StartTime(); err == nil {
		if err := sd.WriteChild(sessiondir.ChildRecord{Pgid: ch.group.Pgid(), StartTime: st}); err != nil {
			log.Warn("write child record failed", "err", err)
		}
	}

	code, sig := supervise(ch, term, sigs, out, &pumps)
	out.Emit(frame.ExitFrame(code, sig))
	term.Terminate() // child close: the kill is a no-op, shutdownAck follows exit
	cancel()
	<-readerDone
	<-ch.feeder.Done()
	ch.stdout.Close()
	ch.stderr.Close()
	out.Close()
	if code == nil {
		return exitFailure
	}
	return *code
}

// newReader wires the stdin-queue reader (spec §6) to the identity check,
// the child's stdin and terminate().
func newReader(sd *sessiondir.Dir, verifier *sessiondir.Verifier, feeder *stdinpoll.Feeder, term *shutdown.Terminator, out *sessiondir.Emitter, e env, stderr io.Writer, log *slog.Logger) *stdinpoll.Reader {
	maxRetries := sessiondir.ParseTuning(e.get(sessiondir.EnvMaxRetries), stdinpoll.DefaultMaxRetries)
	if maxRetries > maxRetriesCap {
		maxRetries = maxRetriesCap
	}
	reader := stdinpoll.New(stdinpoll.Config{
		Dir:        sd.Stdin,
		MaxRetries: int(maxRetries),
		Verify: func() bool {
			err := verifier.Verify()
			if err == nil {
				return true
			}
			var le *sessiondir.LostError
			if errors.As(err, &le) && le.First {
				if le.Message != "" {
					fmt.Fprintln(stderr, le.Message)
				}
				term.Terminate()
			}
			return false
		},
		Lost: func() {
			if verifier.Latch() {
				term.Terminate()
			}
		},
		ShuttingDown: term.Terminated,
		Backlogged:   feeder.Full,
		Buffer:       feeder.Buffer,
		Handler:      handler{feeder: feeder, term: term, out: out},
		Logger:       log,
	})
	feeder.SetOnDrain(reader.Kick)
	return reader
}

// supervise waits for the leader to exit while acting on signals and a
// broken stdout, drains the pipes with the bound of spec §8.1 item 4, then
// reaps the leader and returns its status.
func supervise(ch *child, term *shutdown.Terminator, sigs <-chan os.Signal, out *sessiondir.Emitter, pumps *sync.WaitGroup) (code *int, signal string) {
	broken := out.Broken()
wait:
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGTERM || s == syscall.SIGINT {
				term.Terminate()
			} // SIGHUP: dropped (nohup semantics); SIGPIPE: the write reports EPIPE
		case <-broken:
			broken = nil
			term.Terminate()
		case <-ch.group.Exited():
			break wait
		}
	}
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	if !waitFor(drained, drainWait) {
		// The leader is unreaped, so its group id is still ours.
		ch.group.Signal(syscall.SIGKILL)
		if !waitFor(drained, drainAfterKill) {
			// A holder outside the group: stop reading what never ends.
			now := time.Now()
			ch.stdout.SetReadDeadline(now)
			ch.stderr.SetReadDeadline(now)
			<-drained
		}
	}
	ps := ch.group.Reap()
	term.Stop()
	return shutdown.Status(ps)
}

// waitFor waits up to d for c to close.
func waitFor(c <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c:
		return true
	case <-t.C:
		return false
	}
}

// preSpawnSignal drains pending signals; it reports whether SIGTERM or
// SIGINT arrived.
func preSpawnSignal(sigs <-chan os.Signal) bool {
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGTERM || s == syscall.SIGINT {
				return true
			}
		default:
			return false
		}
	}
}

// setupMessage is the frame/stderr text for a failed Open.
func setupMessage(err error) string {
	switch {
	case errors.Is(err, sessiondir.ErrSymlink):
		return sessiondir.ErrSymlink.Error()
	case errors.Is(err, sessiondir.ErrNotDir):
		return sessiondir.ErrNotDir.Error()
	case errors.Is(err, sessiondir.ErrLocked):
		return "pcwrap: " + sessiondir.ErrLocked.Error()
	}
	return "pcwrap: " + err.Error()
}

// readPayload takes the inline payload or, if that is empty, the staged
// command.b64 (always deleted, spec §2.3).
func readPayload(sd *sessiondir.Dir, inline string) (sessiondir.Payload, error) {
	if inline == "" {
		b, _, err := sd.ReadCommandFile()
		if err != nil {
			return sessiondir.Payload{}, err
		}
		inline = string(b)
	}
	return sessiondir.DecodePayload(inline)
}

// handler maps stdin-queue effects onto the child and the output.
type handler struct {
	feeder *stdinpoll.Feeder
	term   *shutdown.Terminator
	out    *sessiondir.Emitter
}

func (h handler) Stdin(b []byte)   { h.feeder.Write(b) }
func (h handler) StdinEnd()        { h.feeder.End() }
func (h handler) Shutdown()        { h.term.Terminate() }
func (h handler) Error(msg string) { h.out.Emit(frame.ErrorFrame(msg)) }

// pump reads the child's pipe until EOF (or the drain deadline) and emits
// one data frame per read. Each read goes into a buffer of the largest
// frame taken from the emitter's free list and is handed over without a
// copy; the emitter recycles it once the frame is written.
func pump(f *os.File, stream string, out *sessiondir.Emitter) {
	for {
		buf := out.DataBuffer(pipeRead)
		n, err := f.Read(buf)
		if n > 0 {
			out.EmitData(stream, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// child is a spawned child with the parent ends of its pipes.
type child struct {
	group          *shutdown.Group
	feeder         *stdinpoll.Feeder
	stdout, stderr *os.File
}

// spawn starts command (resolved through the child's PATH) with three
// pipes, no shell, in its own process group (spec §2.4).
func spawn(command string, args []string, cwd string, cenv []string) (*child, error) {
	path, err := lookPath(command, cenv, cwd)
	if err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:   path,
		Args:   append([]string{command}, args...),
		Env:    cenv,
		Dir:    cwd,
		Stdin:  inR,
		Stdout: outW,
		Stderr: errW,
	}
	g, err := shutdown.Start(cmd)
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, err
	}
	return &child{group: g, feeder: stdinpoll.NewFeeder(inW, nil), stdout: outR, stderr: errR}, nil
}
