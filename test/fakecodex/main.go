// Command fakecodex is a deterministic fake `codex app-server` for
// pcrunner's tests (codex.md §7): JSON-RPC lines on stdin/stdout in the
// app-server's shape (no "jsonrpc" member), logs to stderr, exits on stdin
// EOF, and misbehaves on request. Every switch is a flag and also an env
// var FAKECODEX_<FLAG_IN_UPPER_SNAKE>.
//
// Ids are deterministic (thread-0001, turn-0001, item-0001, server request
// ids srv-1…), output carries no wall-clock content, and delays are fixed.
// With --transcript every wire line in both directions is appended to an
// NDJSON file.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// maxLine bounds one stdin line (codex.md §2: 4 MiB).
const maxLine = 4 << 20

type config struct {
	plan        bool
	usage       bool
	deltas      int
	command     bool
	approval    bool
	toolCall    string
	toolArgs    string
	finish      string
	userInput   bool
	initDelayMs int
	hangInit    bool
	hangTurn    bool
	exitEarly   int
	junk        int
	transcript  string
}

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakecodex:", err)
		os.Exit(2)
	}
	os.Exit(run(cfg, os.Stdin, os.Stdout, os.Stderr))
}

func parseConfig(args []string, getenv func(string) string) (config, error) {
	var c config
	fs := flag.NewFlagSet("fakecodex", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&c.plan, "plan", false, "send turn/plan/updated in every turn")
	fs.BoolVar(&c.usage, "usage", false, "send thread/tokenUsage/updated in every turn")
	fs.IntVar(&c.deltas, "deltas", 1, "item/agentMessage/delta notifications per turn")
	fs.BoolVar(&c.command, "command", false, "run one commandExecution item per turn")
	fs.BoolVar(&c.approval, "approval", false, "ask item/commandExecution/requestApproval before the --command item")
	fs.StringVar(&c.toolCall, "tool-call", "", "call this dynamic tool (item/tool/call) in every turn")
	fs.StringVar(&c.toolArgs, "tool-args", "{}", "the arguments of --tool-call")
	fs.StringVar(&c.finish, "finish", "", "after the other calls, call paperclip_finish with these arguments")
	fs.BoolVar(&c.userInput, "user-input", false, "send item/tool/requestUserInput in every turn")
	fs.IntVar(&c.initDelayMs, "init-delay-ms", 0, "delay before answering initialize (a slow start)")
	fs.BoolVar(&c.hangInit, "hang-on-initialize", false, "never answer initialize")
	fs.BoolVar(&c.hangTurn, "hang-turn", false, "never complete a turn until turn/interrupt")
	fs.IntVar(&c.exitEarly, "exit-early", -1, "exit at once with this code (after a stderr message)")
	fs.IntVar(&c.junk, "junk", 0, "write N non-JSON lines to stdout at startup")
	fs.StringVar(&c.transcript, "transcript", "", "append every wire line as NDJSON to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var ferr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		env := "FAKECODEX_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil && ferr == nil {
				ferr = fmt.Errorf("%s: %w", env, err)
			}
		}
	})
	return c, ferr
}

type msg struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
}

type server struct {
	cfg    config
	out    io.Writer
	log    io.Writer
	wmu    sync.Mutex
	trans  io.Writer
	mu     sync.Mutex
	thread string
	turns  int
	items  int
	srvReq int
	// waits are the server requests awaiting runnerd's answer.
	waits map[string]chan msg
	// active is the running turn's interrupt signal.
	active    chan struct{}
	activeID  string
	interrupt bool
	wg        sync.WaitGroup
}

func run(cfg config, in io.Reader, out, errw io.Writer) int {
	if cfg.exitEarly >= 0 {
		fmt.Fprintln(errw, "fakecodex: exiting early as asked")
		return cfg.exitEarly
	}
	s := &server{cfg: cfg, out: out, log: errw, waits: map[string]chan msg{}}
	if cfg.transcript != "" {
		f, err := os.OpenFile(cfg.transcript, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintln(errw, "fakecodex: open transcript:", err)
			return 2
		}
		defer f.Close()
		s.trans = f
	}
	for i := 0; i < cfg.junk; i++ {
		s.writeRaw(fmt.Sprintf("fakecodex banner line %d", i+1))
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		s.wmu.Lock()
		s.record("in", line)
		s.wmu.Unlock()
		var m msg
		if json.Unmarshal(line, &m) != nil {
			fmt.Fprintln(errw, "fakecodex: skipped a non-JSON line")
			continue
		}
		s.handle(m)
	}
	s.mu.Lock()
	if s.active != nil && !s.interrupt {
		s.interrupt = true
		close(s.active)
	}
	for _, ch := range s.waits {
		close(ch)
	}
	s.waits = map[string]chan msg{}
	s.mu.Unlock()
	s.wg.Wait()
	return 0
}

func (s *server) handle(m msg) {
	switch {
	case m.Method == "" && m.ID != nil: // an answer to one of our requests
		s.mu.Lock()
		ch := s.waits[string(m.ID)]
		delete(s.waits, string(m.ID))
		s.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	case m.Method == "initialize":
		if s.cfg.hangInit {
			return
		}
		if s.cfg.initDelayMs > 0 {
			time.Sleep(time.Duration(s.cfg.initDelayMs) * time.Millisecond)
		}
		// codexHome is fixed (not the real CODEX_HOME) so transcripts stay
		// byte for byte comparable.
		s.result(m.ID, map[string]any{"userAgent": "fakecodex/1.0.0", "codexHome": "/fakecodex-home",
			"platformFamily": "unix", "platformOs": "linux"})
	case m.Method == "initialized":
	case m.Method == "thread/start", m.Method == "thread/resume":
		s.mu.Lock()
		if s.thread == "" {
			s.thread = "thread-0001"
		}
		if m.Method == "thread/resume" {
			var p struct {
				ThreadID string `json:"threadId"`
			}
			_ = json.Unmarshal(m.Params, &p)
			s.thread = p.ThreadID
		}
		id := s.thread
		s.mu.Unlock()
		s.result(m.ID, map[string]any{"thread": threadObject(id), "model": "fake-model", "modelProvider": "fake",
			"cwd": "/", "approvalPolicy": "never", "approvalsReviewer": "user", "sandbox": map[string]any{"type": "dangerFullAccess"}, "reasoningEffort": nil})
	case m.Method == "thread/read":
		s.mu.Lock()
		id := s.thread
		s.mu.Unlock()
		if id == "" {
			s.rpcError(m.ID, -32600, "no thread")
			return
		}
		s.result(m.ID, map[string]any{"thread": threadObject(id)})
	case m.Method == "turn/start":
		s.mu.Lock()
		if s.active != nil {
			s.mu.Unlock()
			s.rpcError(m.ID, -32600, "a turn is already running")
			return
		}
		s.turns++
		turn := fmt.Sprintf("turn-%04d", s.turns)
		s.active, s.activeID, s.interrupt = make(chan struct{}), turn, false
		stop := s.active
		s.mu.Unlock()
		var p struct {
			Input []struct {
				Text string `json:"text"`
			} `json:"input"`
		}
		_ = json.Unmarshal(m.Params, &p)
		prompt := ""
		if len(p.Input) > 0 {
			prompt = p.Input[0].Text
		}
		s.result(m.ID, map[string]any{"turn": turnObject(turn, "inProgress")})
		s.wg.Add(1)
		go s.runTurn(turn, prompt, stop)
	case m.Method == "turn/steer":
		s.mu.Lock()
		turn := s.activeID
		s.mu.Unlock()
		if turn == "" {
			s.rpcError(m.ID, -32600, "no active turn")
			return
		}
		s.result(m.ID, map[string]any{"turnId": turn})
	case m.Method == "turn/interrupt":
		s.result(m.ID, map[string]any{})
		s.mu.Lock()
		if s.active != nil && !s.interrupt {
			s.interrupt = true
			close(s.active)
		}
		s.mu.Unlock()
	case m.ID != nil:
		s.rpcError(m.ID, -32601, "method not found")
	}
}

func threadObject(id string) map[string]any {
	return map[string]any{"id": id, "preview": "", "modelProvider": "fake", "createdAt": 0, "updatedAt": 0,
		"path": nil, "cwd": "/", "cliVersion": "0.0.0-fake", "source": "appServer", "gitInfo": nil, "turns": []any{},
		"ephemeral": false, "projectId": nil, "sessionId": "session-" + id, "status": map[string]any{"type": "idle"}}
}

func turnObject(id, status string) map[string]any {
	return map[string]any{"id": id, "items": []any{}, "status": status, "error": nil}
}

func (s *server) nextItem() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items++
	return fmt.Sprintf("item-%04d", s.items)
}
