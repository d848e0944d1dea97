// Command fakeacp is a deterministic ACP v1 agent for pcrunner's tests
// (acp.md §9). It speaks JSON-RPC 2.0 lines on stdin/stdout, logs to stderr,
// exits on stdin EOF, and misbehaves on request through fault switches. Every
// switch is a flag and also an env var FAKEACP_<FLAG_IN_UPPER_SNAKE>.
//
// Ids are deterministic (sess-0001, call-0001, msg-0001, term-0001), output
// carries no wall-clock content, and delays are fixed. With --transcript
// every wire line in both directions is appended to an NDJSON file.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// grandchildEnv marks the re-executed stubborn grandchild.
const grandchildEnv = "FAKEACP_INTERNAL_GRANDCHILD"

// grandchildLifetime bounds the stubborn grandchild so a test that forgets
// to kill its group leaks nothing for long.
const grandchildLifetime = 60 * time.Second

type config struct {
	supportsLoad     bool
	replayLoad       bool
	loadFailsOnEmpty bool
	hangOnNew        bool
	runtimeSessionID string
	supportsResume   bool
	supportsClose    bool
	initDelayMs      int
	hangOnInit       bool
	protocolVersion  int
	authRequiredNew  bool
	exitDuring       int
	stdoutBanner     int
	hugeLineBytes    int
	cancelMode       string
	lateUpdates      int
	crashMidTurn     string
	busyPrompt       string
	loadReplay       int
	loadFailCode     int
	stubbornChild    bool
	setsidDaemon     string
	cancelOwnTerm    bool
	readFile         string
	writeFile        string
	writeContent     string
	transcript       string
	recordMeta       string
	permNoAlways     bool
	mcpHTTP          bool
	mcpAskPermission bool
	goalActions      string
}

func main() {
	if os.Getenv(grandchildEnv) != "" {
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ignoring SIGTERM") // tells the parent the trap is set
		time.Sleep(grandchildLifetime)
		return
	}
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeacp:", err)
		os.Exit(2)
	}
	os.Exit(run(cfg, os.Stdin, os.Stdout, os.Stderr))
}

// parseConfig reads flags, then fills every flag not given on the command
// line from FAKEACP_<NAME>.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	var c config
	fs := flag.NewFlagSet("fakeacp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&c.supportsLoad, "supports-load-session", false, "advertise loadSession and serve session/load")
	fs.BoolVar(&c.replayLoad, "replay-load-session-updates", false, "replay the session's recorded updates on session/load")
	fs.BoolVar(&c.loadFailsOnEmpty, "load-session-fails-on-empty", false, "session/load of a session without history fails -32002")
	fs.BoolVar(&c.hangOnNew, "hang-on-new-session", false, "never answer session/new")
	fs.StringVar(&c.runtimeSessionID, "runtime-session-id", "", "return _meta.agentSessionId")
	fs.BoolVar(&c.supportsResume, "supports-resume", false, "advertise and serve session/resume")
	fs.BoolVar(&c.supportsClose, "supports-close", false, "advertise and serve session/close")
	fs.IntVar(&c.initDelayMs, "init-delay-ms", 0, "delay before answering initialize")
	fs.BoolVar(&c.hangOnInit, "hang-on-initialize", false, "never answer initialize")
	fs.IntVar(&c.protocolVersion, "protocol-version", 1, "protocolVersion answered by initialize")
	fs.BoolVar(&c.authRequiredNew, "auth-required-on-new", false, "session/new fails -32000")
	fs.IntVar(&c.exitDuring, "exit-during-startup", -1, "exit at once with this code (after a stderr message)")
	fs.IntVar(&c.stdoutBanner, "stdout-banner", 0, "write N non-JSON lines to stdout at startup")
	fs.IntVar(&c.hugeLineBytes, "huge-line-bytes", 0, "write one non-JSON stdout line of N bytes at startup")
	fs.StringVar(&c.cancelMode, "cancel-mode", "cancelled", "cancelled|ignore|end-turn|error")
	fs.IntVar(&c.lateUpdates, "late-updates", 0, "send N updates after each prompt answer")
	fs.StringVar(&c.crashMidTurn, "crash-mid-turn", "", "eof|sigkill during a prompt")
	fs.StringVar(&c.busyPrompt, "busy-prompt", "reject", "reject|queue a prompt while one runs")
	fs.IntVar(&c.loadReplay, "load-replay", 0, "replay N synthetic updates on session/load")
	fs.IntVar(&c.loadFailCode, "load-fail-code", 0, "session/load fails with this JSON-RPC code")
	fs.BoolVar(&c.stubbornChild, "stubborn-grandchild", false, "spawn a grandchild that ignores SIGTERM")
	fs.StringVar(&c.setsidDaemon, "setsid-daemon", "", "start a daemon in its own session (stdio closed) and write its pid to this file")
	fs.BoolVar(&c.cancelOwnTerm, "cancel-own-terminal", false, "on cancel, $/cancel_request its own pending terminal/create")
	fs.StringVar(&c.readFile, "read-file", "", "at the start of every prompt, fs/read_text_file this path and say what came back")
	fs.StringVar(&c.writeFile, "write-file", "", "at the start of every prompt, fs/write_text_file --write-content to this path and say what came back")
	fs.StringVar(&c.writeContent, "write-content", "", "the content --write-file writes")
	fs.StringVar(&c.transcript, "transcript", "", "append every wire line as NDJSON to this file")
	fs.StringVar(&c.recordMeta, "record-meta", "", "append {method, _meta} of each session/new, load and resume as NDJSON to this file")
	fs.BoolVar(&c.permNoAlways, "permission-no-always", false, "permission requests offer only allow_once and reject_once")
	fs.BoolVar(&c.mcpHTTP, "mcp-http", false, "advertise mcpCapabilities {http: true, sse: false}")
	fs.BoolVar(&c.mcpAskPermission, "mcp-ask-permission", false, "session/request_permission before each MCP tool call")
	fs.StringVar(&c.goalActions, "goal-actions", "", "advertise and honour the goal extension with these comma-separated actions (goal.go)")
	if err := fs.Parse(args); err != nil {
		return config{}, fmt.Errorf("parse flags: %w", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		env := "FAKEACP_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("parse %s: %w", env, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return config{}, err
	}
	switch c.cancelMode {
	case "cancelled", "ignore", "end-turn", "error":
	default:
		return config{}, fmt.Errorf("parse --cancel-mode: unknown mode %q", c.cancelMode)
	}
	switch c.crashMidTurn {
	case "", "eof", "sigkill":
	default:
		return config{}, fmt.Errorf("parse --crash-mid-turn: unknown mode %q", c.crashMidTurn)
	}
	switch c.busyPrompt {
	case "reject", "queue":
	default:
		return config{}, fmt.Errorf("parse --busy-prompt: unknown mode %q", c.busyPrompt)
	}
	return c, nil
}

type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type session struct {
	id      string
	busy    bool
	cancel  chan struct{} // closed by session/cancel during a prompt
	history []json.RawMessage
	idle    *sync.Cond
	mcp     *mcpLink   // the "paperclip" MCP client (mcp.go)
	goal    *goalState // goal.go; nil when none
}

type agent struct {
	cfg    config
	out    io.Writer
	stderr io.Writer
	trans  *os.File

	wmu sync.Mutex // one writer for stdout and the transcript

	mu        sync.Mutex
	sessions  map[string]*session
	counters  map[string]int
	pending   map[int64]chan message
	nextReqID int64
	// clientCaps is the clientCapabilities initialize received (compact
	// JSON), said back by the `caps` prompt.
	clientCaps string
	prompts    sync.WaitGroup
	// quit is closed at stdin EOF: running prompts stop waiting and end.
	quit chan struct{}
}

func run(cfg config, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &agent{cfg: cfg, out: stdout, stderr: stderr, sessions: map[string]*session{},
		counters: map[string]int{}, pending: map[int64]chan message{}, quit: make(chan struct{})}
	if cfg.transcript != "" {
		f, err := os.OpenFile(cfg.transcript, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintln(stderr, "fakeacp: open transcript:", err)
			return 2
		}
		defer f.Close()
		a.trans = f
	}
	if cfg.exitDuring >= 0 {
		fmt.Fprintf(stderr, "fakeacp: exiting during startup with code %d\n", cfg.exitDuring)
		return cfg.exitDuring
	}
	if cfg.stubbornChild {
		if err := a.spawnGrandchild(); err != nil {
			fmt.Fprintln(stderr, "fakeacp: spawn grandchild:", err)
			return 2
		}
	}
	if cfg.setsidDaemon != "" {
		// A dev server an agent leaves behind: out of the agent's
		// process group and session, its stdio on /dev/null.
		cmd := exec.Command("sh", "-c", `echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 300`, cfg.setsidDaemon)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(stderr, "fakeacp: start daemon:", err)
			return 2
		}
		go func() { _ = cmd.Wait() }()
	}
	for i := 1; i <= cfg.stdoutBanner; i++ {
		a.writeRaw([]byte(fmt.Sprintf("fakeacp banner line %d\n", i)))
	}
	if cfg.hugeLineBytes > 0 {
		line := make([]byte, cfg.hugeLineBytes+1)
		for i := range line {
			line[i] = 'x'
		}
		line[cfg.hugeLineBytes] = '\n'
		a.writeRaw(line)
	}
	fmt.Fprintln(stderr, "fakeacp: ready")
	r := bufio.NewReaderSize(stdin, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			a.wmu.Lock()
			a.record("in", line)
			a.wmu.Unlock()
			a.dispatch(line)
		}
		if err != nil {
			fmt.Fprintln(stderr, "fakeacp: stdin closed, exiting")
			close(a.quit)
			a.mu.Lock()
			for _, s := range a.sessions {
				s.idle.Broadcast()
			}
			a.mu.Unlock()
			a.prompts.Wait()
			a.closeAllMCP()
			return 0
		}
	}
}

func (a *agent) spawnGrandchild() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), grandchildEnv+"=1")
	ready, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	// Report the pid only once SIGTERM is ignored, so a test's SIGTERM
	// can never beat the trap.
	if _, err := bufio.NewReader(ready).ReadString('\n'); err != nil {
		return fmt.Errorf("wait for grandchild: %w", err)
	}
	fmt.Fprintf(a.stderr, "fakeacp: grandchild pid %d\n", cmd.Process.Pid)
	go func() { _ = cmd.Wait() }()
	return nil
}

// record appends one wire line to the transcript; a.wmu is held.
func (a *agent) record(dir string, line []byte) {
	if a.trans == nil {
		return
	}
	body := strings.TrimRight(string(line), "\r\n")
	if dir == "in" {
		body = redactLine(body) // the bridge's bearer never reaches a transcript
	}
	entry := map[string]any{"ts": time.Now().UTC().Format(time.RFC3339Nano), "dir": dir}
	if json.Valid([]byte(body)) {
		entry["msg"] = json.RawMessage(body)
	} else {
		entry["text"] = truncate(body, 256)
	}
	b, _ := json.Marshal(entry)
	_, _ = a.trans.Write(append(b, '\n'))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + fmt.Sprintf("…(%d bytes)", len(s))
	}
	return s
}

func (a *agent) writeRaw(line []byte) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.record("out", line)
	_, _ = a.out.Write(line)
}

func (a *agent) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintln(a.stderr, "fakeacp: encode:", err)
		return
	}
	a.writeRaw(append(b, '\n'))
}

func (a *agent) reply(id json.RawMessage, result any) {
	a.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (a *agent) fail(id json.RawMessage, code int, msg string) {
	a.send(map[string]any{"jsonrpc": "2.0", "id": id, "error": rpcError{Code: code, Message: msg}})
}

func (a *agent) notify(method string, params any) {
	a.send(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

func (a *agent) update(s *session, u map[string]any) {
	b, _ := json.Marshal(u)
	a.mu.Lock()
	s.history = append(s.history, b)
	a.mu.Unlock()
	a.notify("session/update", map[string]any{"sessionId": s.id, "update": json.RawMessage(b)})
}

// next returns a deterministic id: prefix-0001, prefix-0002, …
func (a *agent) next(prefix string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.counters[prefix]++
	return fmt.Sprintf("%s-%04d", prefix, a.counters[prefix])
}

// request sends an agent→client request and returns its id and answer channel.
func (a *agent) request(method string, params any) (int64, chan message) {
	a.mu.Lock()
	a.nextReqID++
	id := a.nextReqID
	ch := make(chan message, 1)
	a.pending[id] = ch
	a.mu.Unlock()
	a.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return id, ch
}

func (a *agent) dispatch(line []byte) {
	var m message
	if err := json.Unmarshal(line, &m); err != nil || m.JSONRPC != "2.0" {
		a.send(map[string]any{"jsonrpc": "2.0", "id": nil, "error": rpcError{Code: -32700, Message: "parse error"}})
		return
	}
	if m.Method == "" {
		var id int64
		if json.Unmarshal(m.ID, &id) == nil {
			a.mu.Lock()
			ch := a.pending[id]
			delete(a.pending, id)
			a.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
		return
	}
	if len(m.ID) == 0 {
		a.notification(m)
		return
	}
	switch m.Method {
	case "initialize":
		a.initialize(m)
	case "session/new":
		a.newSession(m)
	case "session/load":
		a.loadSession(m)
	case "session/resume":
		a.resumeSession(m)
	case "session/close":
		a.closeSession(m)
	case "session/prompt":
		a.startPrompt(m)
	case goalMethod:
		a.goalControl(m)
	default:
		a.fail(m.ID, -32601, "method not found")
	}
}

func (a *agent) notification(m message) {
	if m.Method != "session/cancel" {
		return // unknown notifications, extensions included, are ignored
	}
	var p struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sessions[p.SessionID]; s != nil && s.cancel != nil {
		select {
		case <-s.cancel:
		default:
			close(s.cancel)
		}
	}
}

func (a *agent) initialize(m message) {
	if a.cfg.hangOnInit {
		fmt.Fprintln(a.stderr, "fakeacp: hanging on initialize")
		return
	}
	if a.cfg.initDelayMs > 0 {
		time.Sleep(time.Duration(a.cfg.initDelayMs) * time.Millisecond)
	}
	var p struct {
		ClientCapabilities json.RawMessage `json:"clientCapabilities"`
	}
	if json.Unmarshal(m.Params, &p) == nil && len(p.ClientCapabilities) > 0 {
		var buf bytes.Buffer
		if json.Compact(&buf, p.ClientCapabilities) == nil {
			a.mu.Lock()
			a.clientCaps = buf.String()
			a.mu.Unlock()
		}
	}
	sessionCaps := map[string]any{}
	if a.cfg.supportsResume {
		sessionCaps["resume"] = map[string]any{}
	}
	if a.cfg.supportsClose {
		sessionCaps["close"] = map[string]any{}
	}
	caps := map[string]any{
		"loadSession":         a.cfg.supportsLoad,
		"promptCapabilities":  map[string]any{"image": false, "audio": false, "embeddedContext": false},
		"sessionCapabilities": sessionCaps,
	}
	if a.cfg.mcpHTTP {
		caps["mcpCapabilities"] = map[string]any{"http": true, "sse": false}
	}
	result := map[string]any{
		"protocolVersion":   a.cfg.protocolVersion,
		"agentCapabilities": caps,
		"authMethods":       []any{},
		"agentInfo":         map[string]any{"name": "fakeacp", "title": "Fake ACP agent", "version": "1.0.0"},
	}
	if meta := a.goalMeta(); meta != nil {
		result["_meta"] = meta
	}
	a.reply(m.ID, result)
}

type sessionParams struct {
	SessionID  string          `json:"sessionId"`
	Cwd        json.RawMessage `json:"cwd"`
	MCPServers json.RawMessage `json:"mcpServers"`
	Meta       json.RawMessage `json:"_meta"`
}

// recordMeta appends {method, _meta} (null when absent) to --record-meta's
// file, so tests see what a session request carried (tools.md §5).
func (a *agent) recordMeta(method string, params json.RawMessage) {
	if a.cfg.recordMeta == "" {
		return
	}
	var p sessionParams
	_ = json.Unmarshal(params, &p)
	meta := p.Meta
	if len(meta) == 0 {
		meta = json.RawMessage("null")
	}
	line, _ := json.Marshal(map[string]any{"method": method, "_meta": meta})
	f, err := os.OpenFile(a.cfg.recordMeta, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(a.stderr, "fakeacp: open meta record:", err)
		return
	}
	defer f.Close()
	_, _ = f.Write(append(line, '\n'))
}

// validCwd checks the required absolute cwd and mcpServers array.
func validSessionParams(p sessionParams, needServers bool) bool {
	var cwd string
	if json.Unmarshal(p.Cwd, &cwd) != nil || !filepath.IsAbs(cwd) {
		return false
	}
	if !needServers && len(p.MCPServers) == 0 {
		return true
	}
	var servers []json.RawMessage
	return json.Unmarshal(p.MCPServers, &servers) == nil && servers != nil
}

func (a *agent) sessionResult(id string) map[string]any {
	r := map[string]any{}
	if id != "" {
		r["sessionId"] = id
	}
	if a.cfg.runtimeSessionID != "" {
		r["_meta"] = map[string]any{"agentSessionId": a.cfg.runtimeSessionID}
	}
	return r
}

func (a *agent) register(id string) *session {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[id]
	if s == nil {
		s = &session{id: id}
		s.idle = sync.NewCond(&a.mu)
		a.sessions[id] = s
	}
	return s
}

func (a *agent) newSession(m message) {
	if a.cfg.hangOnNew {
		fmt.Fprintln(a.stderr, "fakeacp: hanging on session/new")
		return
	}
	a.recordMeta("session/new", m.Params)
	var p sessionParams
	if json.Unmarshal(m.Params, &p) != nil || !validSessionParams(p, true) {
		a.fail(m.ID, -32602, "invalid params: cwd must be absolute and mcpServers an array")
		return
	}
	if a.cfg.authRequiredNew {
		a.fail(m.ID, -32000, "Authentication required")
		return
	}
	id := a.next("sess")
	a.setServers(a.register(id), p.MCPServers)
	a.reply(m.ID, a.sessionResult(id))
}

func (a *agent) loadSession(m message) {
	if !a.cfg.supportsLoad {
		a.fail(m.ID, -32601, "method not found")
		return
	}
	a.recordMeta("session/load", m.Params)
	var p sessionParams
	if json.Unmarshal(m.Params, &p) != nil || p.SessionID == "" || !validSessionParams(p, true) {
		a.fail(m.ID, -32602, "invalid params")
		return
	}
	if a.cfg.loadFailCode != 0 {
		a.fail(m.ID, a.cfg.loadFailCode, "session could not be loaded")
		return
	}
	a.mu.Lock()
	_, known := a.sessions[p.SessionID]
	a.mu.Unlock()
	if a.cfg.loadFailsOnEmpty && !known && a.cfg.loadReplay == 0 {
		a.fail(m.ID, -32002, "resource not found")
		return
	}
	s := a.register(p.SessionID)
	a.setServers(s, p.MCPServers)
	a.mu.Lock()
	history := append([]json.RawMessage(nil), s.history...)
	a.mu.Unlock()
	if a.cfg.replayLoad {
		for _, u := range history {
			a.notify("session/update", map[string]any{"sessionId": s.id, "update": u})
		}
	}
	for i := 1; i <= a.cfg.loadReplay; i++ {
		a.notify("session/update", map[string]any{"sessionId": s.id, "update": map[string]any{
			"sessionUpdate": "agent_message_chunk", "messageId": fmt.Sprintf("replay-%04d", i),
			"content": map[string]any{"type": "text", "text": fmt.Sprintf("replayed %d", i)},
		}})
	}
	a.reply(m.ID, a.sessionResult(""))
}

func (a *agent) resumeSession(m message) {
	if !a.cfg.supportsResume {
		a.fail(m.ID, -32601, "method not found")
		return
	}
	a.recordMeta("session/resume", m.Params)
	var p sessionParams
	if json.Unmarshal(m.Params, &p) != nil || p.SessionID == "" || !validSessionParams(p, false) {
		a.fail(m.ID, -32602, "invalid params")
		return
	}
	a.setServers(a.register(p.SessionID), p.MCPServers)
	a.reply(m.ID, map[string]any{})
}

func (a *agent) closeSession(m message) {
	if !a.cfg.supportsClose {
		a.fail(m.ID, -32601, "method not found")
		return
	}
	var p sessionParams
	_ = json.Unmarshal(m.Params, &p)
	a.mu.Lock()
	s := a.sessions[p.SessionID]
	if s != nil && s.cancel != nil {
		select {
		case <-s.cancel:
		default:
			close(s.cancel)
		}
	}
	delete(a.sessions, p.SessionID)
	a.mu.Unlock()
	if s == nil {
		a.fail(m.ID, -32002, "resource not found")
		return
	}
	// Off the reader: a tool call may hold the link until the bridge answers.
	a.prompts.Add(1)
	go func() { defer a.prompts.Done(); a.closeMCP(s) }()
	a.reply(m.ID, map[string]any{})
}
