package opencode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/procsession"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// Server bounds.
const (
	// stopTimeout bounds the wait for pcwrap to end after its shutdown
	// message: pcwrap's default kill grace (pcwrap-protocol.md, 5 s) and
	// a margin.
	stopTimeout = 10 * time.Second
)

// errServerExited means the server ended before it listened.
var errServerExited = errors.New("opencode server exited before it listened")

// serverSpec is one `opencode serve` under pcwrap.
type serverSpec struct {
	StateDir   string
	Pcwrap     string
	Executable string // opencode (or test/fakeopencode)
	Cwd        string
	// Env is the agent environment allowlist (pcwrap's environment).
	Env []string
	// Password reaches the opencode child only, through pcwrap's payload
	// env, as OPENCODE_SERVER_PASSWORD.
	Password string
	// Tuning are extra pcwrap variables (tests shorten the grace).
	Tuning []string
	Logger *slog.Logger
}

// server is a running `opencode serve --hostname 127.0.0.1 --port 0`
// under pcwrap: its URL (from its listening line) and its session
// directory. The caller persists URL, Port and UUID in the agent record.
// Only tests start one this way; runnerd launches opencode through the
// agent supervisor and the driver (driver.go).
type server struct {
	URL  string
	Port int
	UUID string
	Dir  string

	cmd    *exec.Cmd
	cancel context.CancelFunc
	wg     sync.WaitGroup
	exited chan struct{}
	mu     sync.Mutex   // guards exit
	exit   *frame.Frame // guarded by mu
}

// startServer launches the server under pcwrap and waits (startTimeout)
// for its listening line. Its output is drained until Stop; an exit frame
// closes Exited.
func startServer(ctx context.Context, spec serverSpec) (*server, error) {
	log := spec.Logger
	if log == nil {
		log = slog.Default()
	}
	l, err := procsession.Launch(procsession.Spec{
		StateDir: spec.StateDir, Pcwrap: spec.Pcwrap,
		Argv: []string{spec.Executable, "serve", "--hostname", "127.0.0.1", "--port", "0"},
		Cwd:  spec.Cwd, Env: spec.Env,
		PayloadEnv: map[string]string{envPassword: spec.Password},
		Tuning:     spec.Tuning,
	})
	if err != nil {
		return nil, fmt.Errorf("start opencode server: %w", err)
	}
	s := &server{UUID: l.UUID, Dir: l.Dir, cmd: l.Cmd, exited: make(chan struct{})}
	reaped := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = l.Cmd.Wait() // pcwrap's own exit; the frames tell the child's
		close(reaped)
	}()
	fs, err := sessiondir.OpenEventsDir(l.Dir)
	if err != nil {
		s.kill()
		s.wg.Wait()
		return nil, fmt.Errorf("start opencode server: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	listening := make(chan struct{})
	var stdout []byte
	found := false
	r := sessiondir.NewEventReader(sessiondir.EventReaderOptions{FS: fs, Watch: l.Dir + "/" + sessiondir.EventsDir, Logger: log})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer fs.Close()
		_ = r.Run(rctx, func(ev sessiondir.Event) error {
			f := ev.Frame
			switch f.Type {
			case frame.FrameData:
				if !found && f.Stream == frame.StreamStdout {
					stdout = append(stdout, f.Data...)
					if u, p, ok := listenURL(stdout); ok {
						s.URL, s.Port, found = u, p, true
						close(listening)
					} else if len(stdout) > maxListenLine {
						stdout = stdout[len(stdout)-maxListenLine/2:]
					}
				}
			case frame.FrameExit, frame.FrameError:
				s.mu.Lock()
				if s.exit == nil {
					fc := f
					s.exit = &fc
					close(s.exited)
				}
				s.mu.Unlock()
				if f.Type == frame.FrameExit {
					return sessiondir.ErrStopReading
				}
			}
			return nil
		})
	}()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case <-listening:
		return s, nil
	case <-s.exited:
		err = errServerExited
	case <-reaped:
		err = errServerExited
	case <-t.C:
		err = errors.New("start opencode server: no listening line within " + startTimeout.String())
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = s.Stop()
	return nil, err
}

// Exited is closed when pcwrap reported the child's exit.
func (s *server) Exited() <-chan struct{} { return s.exited }

// exitDescription says how the child ended ("" while it runs).
func (s *server) exitDescription() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.exit == nil:
		return ""
	case s.exit.Type == frame.FrameError:
		return "pcwrap error"
	case s.exit.Signal != "":
		return "signal " + s.exit.Signal
	case s.exit.Code != nil:
		return "exit code " + strconv.Itoa(*s.exit.Code)
	}
	return "exited"
}

// pid is pcwrap's process id (the server is its only child).
func (s *server) pid() int { return s.cmd.Process.Pid }

// Stop asks pcwrap to end the server (stdinEnd, then shutdown: SIGTERM to
// the group, the grace, SIGKILL) and waits stopTimeout for pcwrap to go,
// killing it after that.
func (s *server) Stop() error {
	var err error
	if e := procsession.StopWrapper(s.Dir); e != nil {
		err = fmt.Errorf("stop opencode server: %w", e)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	// The reader ends on the exit frame; the pcwrap reaper on its exit.
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-s.exited:
	case <-t.C:
		s.kill()
		if err == nil {
			err = errors.New("stop opencode server: pcwrap did not end within the stop bound")
		}
	}
	if s.cancel != nil {
		s.cancel()
	}
	t2 := time.NewTimer(stopTimeout)
	defer t2.Stop()
	select {
	case <-done:
	case <-t2.C:
		s.kill()
		<-done
	}
	return err
}

func (s *server) kill() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
}
