package terminal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/procsession"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// Dir is the directory under the state dir holding one <id>.tail per
// open terminal (tools.md §8: beside the state file, not in it).
const Dir = "terminals"

// tailSuffix ends a terminal's tail file.
const tailSuffix = ".tail"

const (
	// eventPoll is the safety-net poll of a terminal's events/ (acp.md
	// §3.3's 100 ms, as for the agent).
	eventPoll = 100 * time.Millisecond
	// releaseWait bounds how long a release waits for the terminal's
	// pcwrap to end after its shutdown: the kill grace, then pcwrap's own
	// drain bound (pcwrap-protocol.md §8.1: 500 ms) and a margin.
	releaseWait = killGraceMS*time.Millisecond + 3*time.Second
	// goneCheck paces the release's check that pcwrap ended.
	goneCheck = 20 * time.Millisecond
	// maxHeaderBytes bounds the header line of a tail file (ids and a
	// status; maxWaiters ids of at most maxIDBytes each).
	maxHeaderBytes = 4096 + maxWaiters*maxIDBytes
	// maxWaiters bounds the wait_for_exit calls pending on one terminal.
	maxWaiters = 64
	// maxIDBytes bounds a JSON-RPC id kept for a deferred answer.
	maxIDBytes = 256
	// maxTailFileBytes bounds the read of a tail file at adoption.
	maxTailFileBytes = maxHeaderBytes + 1 + maxOutputByteLimit
)

// Config configures a Manager.
type Config struct {
	StateDir string
	// Pcwrap is the pcwrap binary.
	Pcwrap string
	// Answer writes the deferred answer to a wait_for_exit whose command
	// had not exited when it came. It runs on a terminal's own goroutine,
	// with no lock of this package held; it may block briefly.
	Answer func(id json.RawMessage, st ExitStatus)
	Logger *slog.Logger
}

// Manager holds the terminals of one session. Its methods never block on
// a terminal's command: wait_for_exit either answers at once or registers
// the request for Config.Answer; release kills and cleans up in the
// background.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex // guards terms and creating
	terms map[string]*term
	// creating counts creates past the open-terminal check whose terminal
	// is not in terms yet (the spawn runs without mu).
	creating int
}

// term is one terminal; fields below mu are guarded by it.
type term struct {
	id        string
	sessionID string
	dir       string
	limit     int
	// pcwrapDone is closed when our child pcwrap was reaped; nil when
	// adopted after a restart (then wrapper tells, or the session lock
	// for a tail file without it).
	pcwrapDone chan struct{}
	wrapper    procsession.Wrapper
	cancel     context.CancelFunc
	readerDone chan struct{}

	// pmu serialises persist, snapshot to rename, so an older snapshot
	// never replaces a newer one.
	pmu sync.Mutex

	// mu guards tail, truncated, exit, waiters, consumed and released.
	mu        sync.Mutex
	tail      []byte
	truncated bool
	exit      *ExitStatus
	waiters   []json.RawMessage
	consumed  int64
	released  bool
}

// header is the first line of a tail file: what a restart needs to keep
// answering output and wait_for_exit.
type header struct {
	ID        string            `json:"id"`
	SessionID string            `json:"sessionId"`
	Limit     int               `json:"limit"`
	Consumed  int64             `json:"consumed"`
	Truncated bool              `json:"truncated,omitempty"`
	Exit      *ExitStatus       `json:"exit,omitempty"`
	Waiters   []json.RawMessage `json:"waiters,omitempty"`
	Released  bool              `json:"released,omitempty"`
	// WrapperPID and WrapperStart name the pcwrap process: a restart
	// right after the launch finds it before it holds .pcwrap.lock.
	WrapperPID   int    `json:"wrapperPid,omitempty"`
	WrapperStart uint64 `json:"wrapperStart,omitempty"`
}

// New returns a Manager. Call Adopt to take over the terminals a previous
// runnerd left running.
func New(cfg Config) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Answer == nil {
		cfg.Answer = func(json.RawMessage, ExitStatus) {}
	}
	m := &Manager{cfg: cfg, log: cfg.Logger.With("component", "terminal"), terms: map[string]*term{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m
}

func (m *Manager) dir() string { return filepath.Join(m.cfg.StateDir, Dir) }

func (m *Manager) tailPath(id string) string { return filepath.Join(m.dir(), id+tailSuffix) }

// Create starts a terminal (terminal/create). cwd is the session's, used
// when the request names none; env is the base environment, the agent's
// allowlist (acp.md §2.2), which create's env overlays through the
// payload (tools.md §8).
func (m *Manager) Create(req CreateRequest, cwd string, env []string) (createResult, error) {
	limit := defaultOutputByteLimit
	if req.OutputByteLimit != nil {
		limit = int(*req.OutputByteLimit)
	}
	if req.Cwd != "" {
		cwd = req.Cwd
	}
	m.mu.Lock()
	if len(m.terms)+m.creating >= maxOpen {
		m.mu.Unlock()
		return createResult{}, &Error{Code: codeInvalidParams, Message: "create terminal: the session already has 16 open terminals"}
	}
	m.creating++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.creating--
		m.mu.Unlock()
	}()
	var penv map[string]string
	if len(req.Env) > 0 {
		penv = make(map[string]string, len(req.Env))
		for _, e := range req.Env {
			penv[e.Name] = e.Value
		}
	}
	if err := os.MkdirAll(m.dir(), 0o700); err != nil {
		return createResult{}, fmt.Errorf("create terminal: mkdir: %w", err)
	}
	l, err := procsession.Launch(procsession.Spec{
		StateDir: m.cfg.StateDir, Pcwrap: m.cfg.Pcwrap,
		Argv: append([]string{req.Command}, req.Args...), Cwd: cwd,
		Env: env, PayloadEnv: penv,
		Tuning: []string{
			sessiondir.EnvGraceMS + "=" + strconv.Itoa(killGraceMS),
			sessiondir.EnvKeepGroup + "=1",
		},
	})
	if err != nil {
		return createResult{}, fmt.Errorf("create terminal: %w", err)
	}
	t := &term{id: l.UUID, sessionID: req.SessionID, dir: l.Dir, limit: limit, pcwrapDone: make(chan struct{}), wrapper: l.Wrapper}
	// Reaps our child; ends when pcwrap does. Not in wg: a Close leaves
	// the terminal running for the next runnerd.
	go func() {
		_ = l.Cmd.Wait()
		close(t.pcwrapDone)
	}()
	if err := m.persist(t); err != nil {
		// Without its tail file the terminal could not be found again:
		// stop it now rather than leak it.
		m.log.Warn("persist terminal", "err", err)
		m.startCleanup(t)
		return createResult{}, fmt.Errorf("create terminal: %w", err)
	}
	m.startReader(t) // before t is published: its reader fields are set
	m.mu.Lock()
	m.terms[t.id] = t
	m.mu.Unlock()
	return createResult{TerminalID: t.id}, nil
}

// lookup finds an open terminal of sessionID.
func (m *Manager) lookup(req Request) (*term, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.terms[req.TerminalID]
	if !ok || t.sessionID != req.SessionID {
		return nil, notFound("unknown terminal")
	}
	return t, nil
}

// Output is terminal/output.
func (m *Manager) Output(req Request) (outputResult, error) {
	t, err := m.lookup(req)
	if err != nil {
		return outputResult{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return outputResult{Output: string(t.tail), Truncated: t.truncated, ExitStatus: t.exit}, nil
}

// WaitForExit is terminal/wait_for_exit: when the command already exited
// it returns its status with done true; else it registers id, whose
// answer Config.Answer writes once the exit arrives (also after a
// restart: the id is kept in the tail file).
func (m *Manager) WaitForExit(req Request, id json.RawMessage) (st ExitStatus, done bool, err error) {
	t, err := m.lookup(req)
	if err != nil {
		return ExitStatus{}, false, err
	}
	t.mu.Lock()
	if t.exit != nil {
		st := *t.exit
		t.mu.Unlock()
		return st, true, nil
	}
	if len(t.waiters) >= maxWaiters || len(id) > maxIDBytes {
		t.mu.Unlock()
		return ExitStatus{}, false, invalid("wait for terminal exit: too many pending waits")
	}
	for _, w := range t.waiters {
		if bytes.Equal(w, id) { // a restart re-read the request
			t.mu.Unlock()
			return ExitStatus{}, false, nil
		}
	}
	t.waiters = append(t.waiters, append(json.RawMessage(nil), id...))
	t.mu.Unlock()
	if err := m.persist(t); err != nil {
		m.log.Warn("persist terminal waiter", "err", err)
	}
	return ExitStatus{}, false, nil
}

// Kill is terminal/kill: TERM to the command's process group, KILL after
// killGraceMS (pcwrap's terminate()); the terminal stays for output.
func (m *Manager) Kill(req Request) error {
	t, err := m.lookup(req)
	if err != nil {
		return err
	}
	if !t.alive() {
		return nil
	}
	if err := procsession.StopWrapper(t.dir); err != nil {
		m.log.Warn("kill terminal", "err", err)
		return &Error{Code: codeInternalError, Message: "kill terminal: the terminal did not take the request"}
	}
	return nil
}

// Release is terminal/release: the terminal is forgotten at once; its
// command is killed if it still runs and its files are removed in the
// background.
func (m *Manager) Release(req Request) error {
	t, err := m.lookup(req)
	if err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.terms, t.id)
	m.mu.Unlock()
	m.release(t)
	return nil
}

// ReleaseAll kills and releases every open terminal (the session ended:
// tools.md §8). The cleanups run in the background; Close waits for them.
func (m *Manager) ReleaseAll() {
	m.mu.Lock()
	ts := make([]*term, 0, len(m.terms))
	for id, t := range m.terms {
		ts = append(ts, t)
		delete(m.terms, id)
	}
	m.mu.Unlock()
	for _, t := range ts {
		m.release(t)
	}
}

// Open returns the number of open terminals.
func (m *Manager) Open() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.terms)
}

func (m *Manager) release(t *term) {
	t.mu.Lock()
	t.released = true
	t.mu.Unlock()
	// Marked first, so a restart during the cleanup finishes it.
	if err := m.persist(t); err != nil {
		m.log.Warn("persist terminal release", "err", err)
	}
	m.startCleanup(t)
}

// Close stops the readers and waits for pending cleanups, leaving running
// terminals to a restarted runnerd (a crash-equivalent for them).
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// alive reports whether the terminal's pcwrap still runs.
func (t *term) alive() bool {
	if t.pcwrapDone != nil {
		select {
		case <-t.pcwrapDone:
			return false
		default:
			return true
		}
	}
	if t.wrapper.Known() {
		return t.wrapper.Running()
	}
	return procsession.WrapperAlive(t.dir)
}

// startCleanup kills t if it runs, waits (bounded) for its pcwrap to end,
// kills what is left of its group if pcwrap died, then removes its
// session directory, pcwrap's stderr file and the tail file, last.
func (m *Manager) startCleanup(t *term) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.cleanup(t)
	}()
}

// cleanup is startCleanup's work, on the caller's goroutine.
func (m *Manager) cleanup(t *term) {
	if t.cancel != nil {
		t.cancel()
		<-t.readerDone
	}
	if t.alive() {
		if err := procsession.StopWrapper(t.dir); err != nil {
			m.log.Warn("stop terminal", "err", err)
		}
		deadline := time.NewTimer(releaseWait)
		tick := time.NewTicker(goneCheck)
		for t.alive() {
			select {
			case <-deadline.C:
				m.log.Warn("terminal pcwrap did not exit within the release wait; removing its session directory")
			case <-tick.C:
				continue
			}
			break
		}
		deadline.Stop()
		tick.Stop()
	}
	if !t.alive() {
		if killed, _ := procsession.KillOrphanGroup(t.dir); killed {
			m.log.Warn("killed what was left of a terminal's process group")
		}
	}
	if err := os.RemoveAll(t.dir); err != nil {
		m.log.Warn("remove terminal session dir", "err", err)
	}
	_ = os.Remove(procsession.StderrPath(m.cfg.StateDir, t.id))
	if err := os.Remove(m.tailPath(t.id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.log.Warn("remove terminal tail", "err", err)
	}
}

// persist writes t's tail file (header line, then the tail) by temp file
// and rename, 0600. No fsync: the file must survive a runnerd crash, not
// a power loss (the terminal's processes would not survive that either).
func (m *Manager) persist(t *term) error {
	t.pmu.Lock()
	defer t.pmu.Unlock()
	t.mu.Lock()
	h := header{ID: t.id, SessionID: t.sessionID, Limit: t.limit, Consumed: t.consumed, Truncated: t.truncated,
		Exit: t.exit, Waiters: t.waiters, Released: t.released, WrapperPID: t.wrapper.Pid, WrapperStart: t.wrapper.Start}
	hb, err := json.Marshal(h)
	if err != nil {
		t.mu.Unlock()
		return fmt.Errorf("encode terminal header: %w", err)
	}
	buf := make([]byte, 0, len(hb)+1+len(t.tail))
	buf = append(append(append(buf, hb...), '\n'), t.tail...)
	t.mu.Unlock()
	f, err := os.CreateTemp(m.dir(), "."+t.id+".tmp-*")
	if err != nil {
		return fmt.Errorf("write terminal tail: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(buf)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, m.tailPath(t.id))
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write terminal tail: %w", werr)
	}
	return nil
}

// Adopt takes over the terminals a previous runnerd left (their tail
// files): open ones get a reader again, so output and wait_for_exit keep
// answering; released ones get their cleanup finished.
func (m *Manager) Adopt() error {
	ents, err := os.ReadDir(m.dir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("adopt terminals: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			_ = os.Remove(filepath.Join(m.dir(), name)) // a temp file of a crashed persist
			continue
		}
		id, ok := strings.CutSuffix(name, tailSuffix)
		if !ok {
			continue
		}
		t, err := m.load(id)
		if err != nil {
			m.log.Warn("unreadable terminal tail file; removing the terminal", "err", err)
			t = &term{id: id, dir: procsession.Path(m.cfg.StateDir, id), released: true}
		}
		if t.released {
			m.startCleanup(t)
			continue
		}
		m.mu.Lock()
		m.terms[t.id] = t
		m.mu.Unlock()
		m.startReader(t)
	}
	return nil
}

// Sweep ends the process sessions that nothing records: no tail file names
// them and keep does not claim them (the agent's recorded session). One is
// left when runnerd goes away between starting a pcwrap and recording it;
// its pcwrap would run its child with nobody reading. Terminals share
// process-sessions/ with the agent, and this Manager already owns ending a
// session nobody reads: each is stopped and removed as a released terminal
// is, its pcwrap found by its environment.
func (m *Manager) Sweep(keep func(id string) bool) {
	ents, err := os.ReadDir(filepath.Join(m.cfg.StateDir, procsession.Dir))
	if err != nil {
		return
	}
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || keep(id) {
			continue
		}
		if _, err := procsession.ParseUUID(id); err != nil {
			continue
		}
		if _, err := os.Lstat(m.tailPath(id)); !errors.Is(err, os.ErrNotExist) {
			continue // a terminal: Adopt's
		}
		m.mu.Lock()
		_, open := m.terms[id]
		m.mu.Unlock()
		if open {
			continue
		}
		t := &term{id: id, dir: procsession.Path(m.cfg.StateDir, id), released: true}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			t.wrapper = procsession.FindWrapper(t.dir) // may look again for a while: not on the caller's time
			m.log.Warn("ending a process session that nothing records", "pcwrapRunning", t.wrapper.Known())
			m.cleanup(t)
		}()
	}
}

// load reads a tail file.
func (m *Manager) load(id string) (*term, error) {
	if _, err := procsession.ParseUUID(id); err != nil {
		return nil, err
	}
	fd, err := unix.Open(m.tailPath(id), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open terminal tail: %w", err)
	}
	b, err := sessiondir.ReadRegular(fd, maxTailFileBytes, nil)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("read terminal tail: %w", err)
	}
	t, err := parseTail(id, b)
	if err != nil {
		return nil, err
	}
	t.dir = procsession.Path(m.cfg.StateDir, id)
	return t, nil
}

// parseTail decodes a tail file of terminal id: the header line, then
// the tail, within the header's limit.
func parseTail(id string, b []byte) (*term, error) {
	hb, tail, ok := bytes.Cut(b, []byte{'\n'})
	var h header
	if !ok || len(hb) > maxHeaderBytes || json.Unmarshal(hb, &h) != nil || h.ID != id || h.Limit < 0 ||
		h.Limit > maxOutputByteLimit || len(tail) > h.Limit || h.Consumed < 0 || len(h.Waiters) > maxWaiters {
		return nil, errors.New("read terminal tail: malformed")
	}
	return &term{id: id, sessionID: h.SessionID, limit: h.Limit, tail: tail, truncated: h.Truncated,
		exit: h.Exit, waiters: h.Waiters, consumed: h.Consumed, released: h.Released,
		wrapper: procsession.Wrapper{Pid: h.WrapperPID, Start: h.WrapperStart}}, nil
}

// startReader runs t's event reader until its pcwrap is gone (and every
// file it left is consumed) or the Manager closes.
func (m *Manager) startReader(t *term) {
	ctx, cancel := context.WithCancel(m.ctx)
	t.cancel = cancel
	t.readerDone = make(chan struct{})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(t.readerDone)
		m.read(ctx, t)
	}()
}

func (m *Manager) read(ctx context.Context, t *term) {
	fs, err := sessiondir.OpenEventsDir(t.dir)
	if err != nil {
		m.log.Warn("terminal session unreadable", "err", err)
		m.ended(t, nil)
		return
	}
	defer fs.Close()
	t.mu.Lock()
	start := t.consumed
	t.mu.Unlock()
	r := sessiondir.NewEventReader(sessiondir.EventReaderOptions{FS: fs, Delivered: start, Keep: true, Logger: m.log})
	var wake <-chan struct{}
	if w, err := sessiondir.WatchQueue(false, filepath.Join(t.dir, sessiondir.EventsDir)); err == nil {
		defer w.Close()
		wake = w.C
	}
	tick := time.NewTicker(eventPoll)
	defer tick.Stop()
	m.answerPending(t) // a restart may find an exit whose waiters were not answered
	for {
		gone := !t.alive() // checked before the cycle: what it left is then all there
		if err := m.cycle(t, r, fs); err != nil {
			m.log.Warn("terminal session unreadable", "err", err)
			m.ended(t, nil)
			return
		}
		if gone {
			m.ended(t, &ExitStatus{Signal: ptr("SIGKILL")})
			return
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-wake:
			if !ok {
				wake = nil // the watch ended: the poll alone goes on
			}
		case <-tick.C:
		case <-t.pcwrapDone: // nil when adopted: the tick checks the lock
		}
	}
}

// cycle consumes the event files present: data into the tail, exit into
// the status; then persists, deletes the consumed files, and answers the
// waiters if the exit arrived.
func (m *Manager) cycle(t *term, r *sessiondir.EventReader, fs *sessiondir.DirFS) error {
	var consumed []string
	exited := false
	_, err := r.Cycle(func(ev sessiondir.Event) error {
		t.mu.Lock()
		defer t.mu.Unlock()
		switch ev.Frame.Type {
		case frame.FrameData:
			t.tail, t.truncated = keepTail(t.tail, ev.Frame.Data, t.limit, t.truncated)
		case frame.FrameExit:
			if t.exit == nil {
				t.exit = statusOf(ev.Frame)
				exited = true
			}
		}
		t.consumed = ev.Seq
		consumed = append(consumed, ev.Name)
		return nil
	})
	if len(consumed) > 0 {
		if perr := m.persist(t); perr != nil {
			m.log.Warn("persist terminal output", "err", perr)
		} else {
			for _, n := range consumed {
				_ = fs.Remove(n)
			}
		}
	}
	if exited {
		m.answerPending(t)
	}
	return err
}

// ended records a status for a terminal whose pcwrap ended without an
// exit frame (st nil: unknown, reported as SIGKILL), then answers.
func (m *Manager) ended(t *term, st *ExitStatus) {
	t.mu.Lock()
	if t.exit == nil {
		if st == nil {
			st = &ExitStatus{Signal: ptr("SIGKILL")}
		}
		t.exit = st
	}
	t.mu.Unlock()
	m.answerPending(t)
}

// answerPending answers the registered wait_for_exit calls of an exited
// terminal, then forgets them (answer first: a crash in between answers
// twice, never never).
func (m *Manager) answerPending(t *term) {
	t.mu.Lock()
	if t.exit == nil || len(t.waiters) == 0 {
		t.mu.Unlock()
		return
	}
	st := *t.exit
	ws := t.waiters
	t.mu.Unlock()
	for _, id := range ws {
		m.cfg.Answer(id, st)
	}
	t.mu.Lock()
	t.waiters = t.waiters[len(ws):]
	t.mu.Unlock()
	if err := m.persist(t); err != nil {
		m.log.Warn("persist terminal", "err", err)
	}
}

func statusOf(f frame.Frame) *ExitStatus {
	if f.Signal != "" {
		return &ExitStatus{Signal: ptr(f.Signal)}
	}
	if f.Code != nil {
		c := *f.Code
		return &ExitStatus{ExitCode: &c}
	}
	return &ExitStatus{Signal: ptr("SIGKILL")}
}

func ptr[T any](v T) *T { return &v }
