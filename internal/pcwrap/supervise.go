package pcwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/shutdown"
	"github.com/pcrunner/pcrunner/internal/stdinpoll"
)

// pipeRead is the largest read from a child pipe, one data frame (§7.1).
const pipeRead = 64 << 10

// routines are the goroutines that run beside the child: one output pump
// per pipe and the stdin-queue reader. drain waits for all of them.
type routines struct {
	pumps      sync.WaitGroup
	stopReader context.CancelFunc
	readerDone chan struct{}
}

// start runs the output pumps (§7) and the stdin-queue reader (§6), then
// writes the child record (§2.4).
func (s *session) start(ch *child, verifier *sessiondir.Verifier) *routines {
	r := &routines{readerDone: make(chan struct{})}
	// Output pumps: one per pipe, each ends at EOF (or the drain bound).
	for _, p := range []struct {
		f      *os.File
		stream string
	}{{ch.stdout, frame.StreamStdout}, {ch.stderr, frame.StreamStderr}} {
		r.pumps.Add(1)
		go func() {
			defer r.pumps.Done()
			pump(p.f, p.stream, s.out)
		}()
	}

	reader := s.newReader(verifier, ch.feeder)
	// The reader outlives a cancelled Run ctx: it stops in drain, once
	// the child is gone.
	ctx, cancel := context.WithCancel(context.Background())
	r.stopReader = cancel
	go func() {
		defer close(r.readerDone)
		reader.Run(ctx)
	}()
	// The child record (spec §2.4) is written once output and stdin are
	// already flowing: a file create costs up to a millisecond on a busy
	// filesystem, which the child's first frame need not wait for.
	if st, err := ch.group.StartTime(); err == nil {
		if err := s.sd.WriteChild(sessiondir.ChildRecord{Pgid: ch.group.Pgid(), StartTime: st, Cgroup: s.contain.cgroupPath()}); err != nil {
			s.cfg.Logger.Warn("write child record failed", "err", err)
		}
	}
	return r
}

// supervise waits for the leader to exit while acting on signals (§8.2),
// a cancelled ctx and a broken stdout (§7.3): each of them is terminate().
func (s *session) supervise(ctx context.Context, ch *child) {
	broken := s.out.Broken()
	done := ctx.Done()
	for {
		select {
		case sig := <-s.cfg.Signals:
			if sig == syscall.SIGTERM || sig == syscall.SIGINT {
				s.term.Terminate()
			} // SIGHUP: dropped (nohup semantics); SIGPIPE: the write reports EPIPE
		case <-done:
			done = nil
			s.term.Terminate()
		case <-broken:
			broken = nil
			s.term.Terminate()
		case <-ch.group.Exited():
			return
		}
	}
}

// newReader wires the stdin-queue reader (spec §6) to the identity check,
// the child's stdin and terminate().
func (s *session) newReader(verifier *sessiondir.Verifier, feeder *stdinpoll.Feeder) *stdinpoll.Reader {
	maxRetries := sessiondir.ParseTuning(s.env.get(sessiondir.EnvMaxRetries), stdinpoll.DefaultMaxRetries)
	if maxRetries > maxRetriesCap {
		maxRetries = maxRetriesCap
	}
	term := s.term
	reader := stdinpoll.New(stdinpoll.Config{
		Dir:        s.sd.Stdin,
		MaxRetries: int(maxRetries),
		Verify: func() bool {
			err := verifier.Verify()
			if err == nil {
				return true
			}
			var le *sessiondir.LostError
			if errors.As(err, &le) && le.First {
				if le.Message != "" {
					fmt.Fprintln(s.cfg.Stderr, le.Message)
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
		Handler:      handler{feeder: feeder, term: term, out: s.out},
		Logger:       s.cfg.Logger,
	})
	feeder.SetOnDrain(reader.Kick)
	return reader
}

// handler maps stdin-queue effects onto the child and the output.
type handler struct {
	feeder *stdinpoll.Feeder
	term   *shutdown.Terminator
	out    *emitter
}

func (h handler) Stdin(b []byte)   { h.feeder.Write(b) }
func (h handler) StdinEnd()        { h.feeder.End() }
func (h handler) Shutdown()        { h.term.Terminate() }
func (h handler) Error(msg string) { h.out.Emit(frame.ErrorFrame(msg)) }

// pump reads the child's pipe until EOF (or the drain deadline) and emits
// one data frame per read. Each read goes into a buffer of the largest
// frame taken from the emitter's free list and is handed over without a
// copy; the emitter recycles it once the frame is written.
func pump(f *os.File, stream string, out *emitter) {
	for {
		buf := out.dataBuffer(pipeRead)
		n, err := f.Read(buf)
		if n > 0 {
			out.emitData(stream, buf[:n])
		}
		if err != nil {
			return
		}
	}
}
