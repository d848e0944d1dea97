package bridge

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// Host-side constants (spec §11).
const (
	// ShutdownWait is DEFAULT_PROCESS_SESSION_SHUTDOWN_WAIT_MS.
	ShutdownWait = 3000 * time.Millisecond
	// ackPoll is the host ack reader interval.
	ackPoll = 100 * time.Millisecond
	// proxyAuthTimeout destroys an unauthenticated proxy socket.
	proxyAuthTimeout = 5000 * time.Millisecond
	// tokenBytes is the process-session token size (base64url: 24 chars).
	tokenBytes = 18
	// launchWait bounds the background stream exec after a stop; the
	// reference does not wait for it, the emulator must to end cleanly.
	launchWait = 10 * time.Second
	// inlinePayloadLimit: above it the payload is staged in command.b64
	// (64×1024 base64 chars; Linux caps one env string at 131,072 bytes).
	inlinePayloadLimit = 64 * 1024
	// maxProxyLine bounds one proxy line (a 64 KiB stdin chunk in base64
	// plus JSON) so a bad peer cannot grow the buffer without limit.
	maxProxyLine = 1 << 20
)

// NoAckWarning is the host's log line when stop saw no shutdownAck.
const NoAckWarning = "[paperclip] ACP process session wrapper did not acknowledge shutdown within 3000ms; removing the session directory anyway."

// Host emulates the Paperclip host's process-session bridge (spec §9)
// pointed at pcwrap instead of `node <wrapper>.mjs`.
type Host struct {
	Runner Runner
	// Pcwrap is the wrapper binary path in the "sandbox".
	Pcwrap string
	// RuntimeDir is the bridgeRuntimeDir (<root>/process-sessions).
	RuntimeDir string
	// RemoteCwd is the cwd of the launch exec.
	RemoteCwd string
	// Stream selects the stdout output mode (streamOutputViaSession).
	Stream bool
	// Log receives the host's log lines.
	Log func(line string)
}

// Command is the child to run (the payload of spec §2.3).
type Command struct {
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Cwd     string            `json:"cwd"`
	Env     map[string]string `json:"env"`
}

// Session is one live process session on the host side.
type Session struct {
	h     *Host
	ID    string
	Dir   string
	Token string
	Addr  string // the local proxy's 127.0.0.1:port

	q        Queue
	chainMu  sync.Mutex // the per-session serial write chain
	seq      int64
	stopOnce sync.Once

	out      *outbox
	ln       net.Listener
	bg       sync.WaitGroup // accept loop, connections, poll, stream exec
	cancelBg context.CancelFunc
	stopping chan struct{}

	ackMu sync.Mutex
	acked chan struct{} // stream mode: closed on a live shutdownAck
	ackOK bool
}

func (h *Host) logf(format string, a ...any) {
	if h.Log != nil {
		h.Log(fmt.Sprintf(format, a...))
	}
}

// Start launches pcwrap for cmd and opens the local proxy (spec §9.1, §9.5).
func (h *Host) Start(ctx context.Context, cmd Command) (*Session, error) {
	if cmd.Args == nil {
		cmd.Args = []string{}
	}
	payload, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode payload: %w", err)
	}
	b64 := base64.StdEncoding.EncodeToString(payload)
	id := newUUID()
	s := &Session{
		h: h, ID: id, Dir: filepath.Join(h.RuntimeDir, id), q: Queue{Runner: h.Runner},
		out: &outbox{}, stopping: make(chan struct{}), acked: make(chan struct{}),
	}
	tok := make([]byte, tokenBytes)
	_, _ = rand.Read(tok)
	s.Token = base64.RawURLEncoding.EncodeToString(tok)
	bgCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancelBg = cancel

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		return nil, fmt.Errorf("listen proxy: %w", err)
	}
	s.ln, s.Addr = ln, ln.Addr().String()
	s.bg.Go(func() { s.acceptLoop(bgCtx) })

	stdinDir, eventsDir := filepath.Join(s.Dir, sessiondir.StdinDir), filepath.Join(s.Dir, sessiondir.EventsDir)
	inline := sessiondir.EnvCommandB64 + "=" + shq(b64) + " "
	if len(b64) > inlinePayloadLimit {
		if err := s.stage(ctx, b64); err != nil {
			s.closeSockets()
			cancel()
			s.bg.Wait()
			return nil, err
		}
		inline, b64 = "", ""
	}
	if !h.Stream {
		h.logf("[paperclip] Starting ACP process session bridge in sandbox (%s).", cmd.Command)
		script := "mkdir -p " + shq(stdinDir) + " " + shq(eventsDir) + "\n" +
			sessiondir.EnvDir + "=" + shq(s.Dir) + " " + inline +
			"nohup " + shq(h.Pcwrap) + " >/dev/null 2>&1 < /dev/null &"
		res, err := h.Runner.Run(ctx, Exec{Script: script, Env: bridgeEnv, Cwd: h.RemoteCwd, BypassSession: true, Timeout: controlCap})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%s", firstNonEmpty(string(res.Stderr), string(res.Stdout)))
		}
		if err != nil {
			_ = s.q.Remove(context.WithoutCancel(ctx), s.Dir)
			s.closeSockets()
			cancel()
			s.bg.Wait()
			return nil, fmt.Errorf("Failed to start sandbox ACP process session bridge: %w", err)
		}
		s.bg.Go(func() { s.poll(bgCtx, eventsDir) })
		return s, nil
	}
	h.logf("[paperclip] Starting streamed ACP process session bridge in sandbox (%s).", cmd.Command)
	s.bg.Go(func() { s.stream(bgCtx, b64) })
	return s, nil
}

// stage uploads a large payload to <sessionDir>/command.b64 (spec §9.1):
// a private directory made without -p, the queue upload, chmod 600. Any
// failure removes the directory.
func (s *Session) stage(ctx context.Context, b64 string) error {
	file := filepath.Join(s.Dir, sessiondir.CommandFile)
	_, err := s.q.control(ctx, "umask 077 && mkdir -m 700 "+shq(s.Dir))
	if err == nil {
		err = s.q.WriteTextFile(ctx, file, b64)
	}
	if err == nil {
		_, err = s.q.control(ctx, "chmod 600 "+shq(file))
	}
	if err != nil {
		s.h.logf("[paperclip] staging the command payload failed: %v", err)
		_ = s.q.Remove(context.WithoutCancel(ctx), s.Dir)
		return errors.New("Failed to stage sandbox process session command payload.")
	}
	return nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// poll is the tolerant events reader (spec §9.3, PR #10213) through the
// queue client's scripts.
func (s *Session) poll(ctx context.Context, eventsDir string) {
	r := sessiondir.NewEventReader(sessiondir.EventReaderOptions{
		FS:       shellFS{ctx: ctx, q: s.q, dir: eventsDir},
		PollOnly: true, // the host has no inotify across the exec channel
		// The reference host's reader delivers whatever it lists, in order.
		AllowGaps: true,
		Logger:    slog.New(&lineHandler{log: s.h.logf}),
	})
	err := r.Run(ctx, func(ev sessiondir.Event) error {
		switch ev.Frame.Type {
		case frame.FrameShutdownAck:
			return nil // not forwarded
		case frame.FrameExit, frame.FrameError:
			s.out.send(ev.Frame)
			return sessiondir.ErrStopReading
		}
		s.out.send(ev.Frame)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		s.h.logf("[paperclip] %v", err)
		s.out.send(frame.ErrorFrame(err.Error()))
	}
}

// stream runs the stdout-mode launch exec and parses its frame lines
// (spec §9.3, stdout mode).
func (s *Session) stream(ctx context.Context, b64 string) {
	p := &lineParser{deliver: s.streamFrame}
	env := map[string]string{sessiondir.EnvDir: s.Dir}
	if b64 != "" {
		env[sessiondir.EnvCommandB64] = b64
	}
	for k, v := range bridgeEnv {
		env[k] = v
	}
	// The reference runs the stream variant's own script; pcwrap picks the
	// variant with --output (spec §0, §2.1).
	res, err := s.h.Runner.Run(ctx, Exec{Script: StreamLaunchScript(s.h.Pcwrap), Env: env, Cwd: s.h.RemoteCwd, UseSession: true,
		OnLog: func(stream string, b []byte) {
			if stream == "stdout" {
				p.feed(b)
			}
		}})
	p.reparse(res.Stdout)
	select {
	case <-s.stopping:
		return
	default:
	}
	if err != nil {
		s.out.send(frame.ErrorFrame(err.Error()))
		return
	}
	if !p.sawEnd {
		if len(res.Stderr) > 0 {
			s.h.logf("%s", res.Stderr)
		}
		code := res.ExitCode
		s.out.send(frame.ExitFrame(&code, ""))
	}
}

func (s *Session) streamFrame(f frame.Frame) {
	f.Seq = 0
	if f.Type == frame.FrameShutdownAck {
		s.ackMu.Lock()
		if !s.ackOK {
			s.ackOK = true
			close(s.acked)
		}
		s.ackMu.Unlock()
		return
	}
	s.out.send(f)
}

// Write queues raw bytes for the child (one stdin file on the chain).
func (s *Session) Write(ctx context.Context, data []byte) error {
	return s.writeMsg(ctx, frame.Message{Type: frame.MsgStdin, Data: data})
}

// End queues stdinEnd.
func (s *Session) End(ctx context.Context) error {
	return s.writeMsg(ctx, frame.Message{Type: frame.MsgStdinEnd})
}

// writeMsg appends one stdin file to the serial chain: the next file's
// upload starts only after this one's mv completed (PR #11406).
func (s *Session) writeMsg(ctx context.Context, m frame.Message) error {
	s.chainMu.Lock()
	defer s.chainMu.Unlock()
	s.seq++
	final := filepath.Join(s.Dir, sessiondir.StdinDir, sessiondir.SeqName(s.seq))
	return s.q.WriteTextFile(ctx, final, string(m.AppendJSON(nil)))
}

// Stop ends the session as the host does (spec §9.4); it never fails and
// never signals. It returns whether pcwrap acknowledged.
func (s *Session) Stop(ctx context.Context) (acked bool) {
	s.stopOnce.Do(func() {
		close(s.stopping)
		s.closeSockets()
		if !s.h.Stream {
			s.cancelBg() // cancel the poll
		}
		if err := s.End(ctx); err != nil {
			s.h.logf("[paperclip] stdinEnd write failed: %v", err)
		}
		if err := s.writeMsg(ctx, frame.Message{Type: frame.MsgShutdown}); err != nil {
			s.h.logf("[paperclip] shutdown write failed: %v", err)
		}
		acked = s.waitAck(ctx)
		if !acked {
			s.h.logf("%s", NoAckWarning)
		}
		_ = s.q.Remove(context.WithoutCancel(ctx), s.Dir)
	})
	return acked
}

// waitAck is the dedicated ack reader: events/ every 100 ms (list, read,
// remove) or the live stream, for at most ShutdownWait. exit and error
// frames do not shorten the wait.
func (s *Session) waitAck(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, ShutdownWait)
	defer cancel()
	if s.h.Stream {
		select {
		case <-s.acked:
			return true
		case <-ctx.Done():
			return false
		}
	}
	events := filepath.Join(s.Dir, sessiondir.EventsDir)
	t := time.NewTicker(ackPoll)
	defer t.Stop()
	for {
		names, _ := s.q.ListJSONFiles(ctx, events)
		for _, n := range names {
			b, err := s.q.ReadTextFile(ctx, events+"/"+n)
			_ = s.q.Remove(ctx, events+"/"+n)
			if err != nil {
				continue
			}
			if f, err := frame.ParseFrame(b); err == nil && f.Type == frame.FrameShutdownAck {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// Close waits for the session's background work (the emulator's own
// cleanup; the reference leaves the stream exec running).
func (s *Session) Close() {
	s.closeSockets()
	done := make(chan struct{})
	go func() { s.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(launchWait):
		s.cancelBg()
		<-done
	}
	s.cancelBg()
}

func (s *Session) closeSockets() {
	s.ln.Close()
	s.out.destroy()
}

// acceptLoop serves the local proxy (spec §9.5).
func (s *Session) acceptLoop(ctx context.Context) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.out.track(c)
		s.bg.Go(func() { s.serveConn(ctx, c) })
	}
}

type proxyMsg struct {
	Token string `json:"token"`
	Type  string `json:"type"`
	Data  string `json:"data"`
}

// serveConn authenticates one proxy socket: the first valid line claims the
// session (once); a bad line or token, or silence for 5000 ms, destroys it.
func (s *Session) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	authTimer := time.AfterFunc(proxyAuthTimeout, func() { c.Close() })
	defer authTimer.Stop()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), maxProxyLine)
	claimed := false
	for sc.Scan() {
		var m proxyMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.Token != s.Token {
			return
		}
		if !claimed {
			if !s.out.claim(c) {
				return // the session was claimed by another socket
			}
			claimed = true
			authTimer.Stop()
		}
		switch m.Type {
		case "stdin":
			if err := s.Write(ctx, frame.DecodeBase64(m.Data)); err != nil {
				s.out.sendTo(c, frame.ErrorFrame(err.Error()))
				return
			}
		case "stdinEnd":
			if err := s.End(ctx); err != nil {
				s.out.sendTo(c, frame.ErrorFrame(err.Error()))
				return
			}
		}
	}
}

// outbox buffers frames for the proxy until a socket claims the session.
type outbox struct {
	mu        sync.Mutex
	buf       [][]byte
	claimed   net.Conn
	conns     []net.Conn
	destroyed bool
}

func (o *outbox) track(c net.Conn) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.destroyed {
		c.Close()
		return
	}
	o.conns = append(o.conns, c)
}

func (o *outbox) claim(c net.Conn) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.claimed != nil || o.destroyed {
		return false
	}
	o.claimed = c
	for _, l := range o.buf {
		if _, err := c.Write(l); err != nil {
			break
		}
	}
	o.buf = nil
	return true
}

func (o *outbox) send(f frame.Frame) {
	line := append(f.AppendJSON(nil), '\n')
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.claimed != nil {
		_, _ = o.claimed.Write(line)
		return
	}
	o.buf = append(o.buf, line)
}

func (o *outbox) sendTo(c net.Conn, f frame.Frame) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = c.Write(append(f.AppendJSON(nil), '\n'))
}

func (o *outbox) destroy() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.destroyed = true
	for _, c := range o.conns {
		c.Close()
	}
}

// lineParser splits the stdout-mode stream into frames, dropping any frame
// whose numeric seq is at or below the last delivered one.
type lineParser struct {
	mu      sync.Mutex
	partial []byte
	lastSeq int64
	sawEnd  bool // an exit or error frame was delivered
	deliver func(frame.Frame)
}

func (p *lineParser) feed(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := indexByte(p.partial, '\n')
		if i < 0 {
			return
		}
		p.line(p.partial[:i])
		p.partial = p.partial[i+1:]
	}
}

// reparse runs the settled exec's full stdout through the seq guard.
func (p *lineParser) reparse(all []byte) {
	p.mu.Lock()
	p.partial = nil
	p.mu.Unlock()
	p.feed(append(all, '\n'))
}

func (p *lineParser) line(l []byte) {
	f, err := frame.ParseFrame(l)
	if err != nil {
		return // blank or unparseable lines are ignored
	}
	var probe struct {
		Seq json.RawMessage `json:"seq"`
	}
	_ = json.Unmarshal(l, &probe)
	if _, numErr := strconv.ParseFloat(string(probe.Seq), 64); numErr == nil {
		if f.Seq <= p.lastSeq {
			return
		}
		p.lastSeq = f.Seq
	}
	if f.Type == frame.FrameExit || f.Type == frame.FrameError {
		p.sawEnd = true
	}
	p.deliver(f)
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// lineHandler turns the reader's slog records into host log lines.
type lineHandler struct{ log func(string, ...any) }

func (h *lineHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	h.log("[paperclip] %s", r.Message)
	return nil
}
func (h *lineHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lineHandler) WithGroup(string) slog.Handler      { return h }

// StreamLaunchScript is the stdout-mode launch command for pcwrap.
func StreamLaunchScript(pcwrap string) string { return shq(pcwrap) + " --output=stdout" }
