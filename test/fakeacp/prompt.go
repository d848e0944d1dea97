package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// maxSleep bounds the `sleep` scenario so a forgotten test cannot hang.
const maxSleep = 120 * time.Second

// maxChunks bounds the `chunks`, `stamp` and `bulk` bench scenarios.
const maxChunks = 100000

// Bounds of the long-text scenarios: a message up to the output body
// limit, sent in agent_message_chunk updates of longChunkBytes, or in
// longChunkCount larger ones for a long message (each update costs
// runnerd a durable write).
const (
	maxLongBytes   = 4 << 20
	longChunkBytes = 16 << 10
	longChunkCount = 16
)

// longText is n bytes of text: "long" is ASCII digits; "long-ctl" NUL and
// other control characters (6 bytes each as JSON); "long-emoji" mixes
// 4-byte emoji with text and puts a ghp_ token (a pattern of runnerd's
// outbox sanitiser) across byte 32,766, the first chunk boundary.
func longText(kind string, n int) string {
	var b strings.Builder
	unit := "0123456789"
	switch kind {
	case "long-emoji":
		unit = "ab\U0001F600c"
	case "long-ctl":
		unit = "\x00\x01\x1f"
	}
	for b.Len() < n {
		b.WriteString(unit)
	}
	s := []byte(b.String()[:n])
	token := "ghp_" + strings.Repeat("T", 36)
	if kind == "long-emoji" && n > 32766+len(token) {
		at := 32766 - len(token)/2
		for at > 0 && !utf8.RuneStart(s[at]) {
			at--
		}
		end := at + len(token)
		for end < len(s) && !utf8.RuneStart(s[end]) {
			end++
		}
		s = append(append(append([]byte(nil), s[:at]...), token+strings.Repeat(" ", end-at-len(token))...), s[end:]...)
	}
	out := strings.ToValidUTF8(string(s), "")
	return out + strings.Repeat("x", n-len(out))
}

// splitText cuts s into parts of at most n bytes on rune boundaries.
func splitText(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// maxBulkChunk bounds one chunk of the `bulk` scenario.
const maxBulkChunk = 65536

type promptParams struct {
	SessionID string `json:"sessionId"`
	Prompt    []struct {
		Type string `json:"type"`
		Text string `json:"text"`
		URI  string `json:"uri"`
	} `json:"prompt"`
}

// turn is one running prompt.
type turn struct {
	a      *agent
	s      *session
	cancel chan struct{}
	msgID  string
}

// startPrompt claims the session synchronously, in wire order, so a
// session/cancel read right after the prompt line always finds the turn;
// the turn itself runs on its own goroutine.
func (a *agent) startPrompt(m message) {
	var p promptParams
	if json.Unmarshal(m.Params, &p) != nil || p.SessionID == "" || p.Prompt == nil {
		a.fail(m.ID, -32602, "invalid params")
		return
	}
	a.mu.Lock()
	s := a.sessions[p.SessionID]
	if s == nil {
		a.mu.Unlock()
		a.fail(m.ID, -32002, "resource not found")
		return
	}
	if s.busy && a.cfg.busyPrompt == "reject" {
		a.mu.Unlock()
		a.fail(m.ID, -32600, "Prompt already in progress")
		return
	}
	var t *turn
	if !s.busy {
		t = a.claim(s)
	}
	a.mu.Unlock()
	a.prompts.Add(1)
	go func() {
		defer a.prompts.Done()
		if t == nil { // queued behind the running prompt
			a.mu.Lock()
			for s.busy && !isClosed(a.quit) {
				s.idle.Wait()
			}
			if isClosed(a.quit) {
				a.mu.Unlock()
				return
			}
			t = a.claim(s)
			a.mu.Unlock()
		}
		a.runPrompt(m, p, t)
	}()
}

// claim marks s busy with a fresh cancel channel; a.mu is held.
func (a *agent) claim(s *session) *turn {
	s.busy = true
	s.cancel = make(chan struct{})
	return &turn{a: a, s: s, cancel: s.cancel}
}

func (a *agent) runPrompt(m message, p promptParams, t *turn) {
	s := t.s
	defer func() {
		a.mu.Lock()
		s.busy, s.cancel = false, nil
		s.idle.Broadcast()
		a.mu.Unlock()
	}()

	var parts []string
	for _, b := range p.Prompt {
		switch b.Type {
		case "text":
			parts = append(parts, b.Text)
		case "resource_link":
			parts = append(parts, b.URI)
		}
	}
	stop, usage, rerr := t.run(strings.Join(parts, " "))
	if t.cancelled() {
		switch a.cfg.cancelMode {
		case "end-turn":
			stop, rerr = "end_turn", nil
		case "error":
			rerr = &rpcError{Code: -32603, Message: "internal error after cancel"}
		case "ignore":
		default:
			stop, rerr = "cancelled", nil
		}
	}
	if rerr != nil {
		a.fail(m.ID, rerr.Code, rerr.Message)
	} else {
		result := map[string]any{"stopReason": stop}
		if usage != nil {
			result["usage"] = usage
		}
		a.reply(m.ID, result)
	}
	for i := 1; i <= a.cfg.lateUpdates; i++ {
		a.update(s, map[string]any{"sessionUpdate": "agent_message_chunk",
			"content": map[string]any{"type": "text", "text": fmt.Sprintf("late %d", i)}})
	}
}

func (t *turn) cancelled() bool {
	select {
	case <-t.cancel:
		return true
	default:
		return false
	}
}

// sleep waits d, cut short by a cancel unless the cancel mode is ignore.
func (t *turn) sleep(d time.Duration) bool {
	if d > maxSleep {
		d = maxSleep
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	cancel := t.cancel
	if t.a.cfg.cancelMode == "ignore" {
		cancel = nil
	}
	select {
	case <-timer.C:
		return true
	case <-cancel:
		return false
	case <-t.a.quit:
		return false
	}
}

func (t *turn) say(text string) {
	if t.msgID == "" {
		t.msgID = t.a.next("msg")
	}
	t.a.update(t.s, map[string]any{"sessionUpdate": "agent_message_chunk", "messageId": t.msgID,
		"content": map[string]any{"type": "text", "text": text}})
}

func (t *turn) crash() {
	switch t.a.cfg.crashMidTurn {
	case "eof":
		fmt.Fprintln(t.a.stderr, "fakeacp: crashing mid-turn (stdout eof)")
		_ = os.Stdout.Close()
		os.Exit(0)
	case "sigkill":
		fmt.Fprintln(t.a.stderr, "fakeacp: crashing mid-turn (sigkill)")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// call sends an agent→client request and waits for the answer. On a
// cancel with --cancel-own-terminal it cascades $/cancel_request for its
// own terminal/create and keeps waiting: the client must still answer.
func (t *turn) call(method string, params map[string]any) message {
	params["sessionId"] = t.s.id
	id, ch := t.a.request(method, params)
	cancel := t.cancel
	for {
		select {
		case m := <-ch:
			return m
		case <-t.a.quit:
			return message{Error: &rpcError{Code: -32603, Message: "stdin closed"}}
		case <-cancel:
			cancel = nil
			if t.a.cfg.cancelOwnTerm && method == "terminal/create" {
				t.a.notify("$/cancel_request", map[string]any{"requestId": id})
			}
		}
	}
}

func (t *turn) toolCall(kind, title string, locations []string) string {
	id := t.a.next("call")
	locs := []any{}
	for _, l := range locations {
		locs = append(locs, map[string]any{"path": l})
	}
	t.a.update(t.s, map[string]any{"sessionUpdate": "tool_call", "toolCallId": id, "title": title,
		"kind": kind, "status": "pending", "locations": locs})
	return id
}

func (t *turn) toolDone(id, status, text string) {
	u := map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": id, "status": status}
	if text != "" {
		u["content"] = []any{map[string]any{"type": "content", "content": map[string]any{"type": "text", "text": text}}}
	}
	t.a.update(t.s, u)
}

// run plays the scenario named by the prompt's first word (acp.md §9).
func (t *turn) run(text string) (string, any, *rpcError) {
	// "A ;; B" plays A then B in one turn (the workspace scenarios chain
	// edits); the last step's stop reason answers the prompt.
	if first, more, ok := strings.Cut(text, stepSeparator); ok && !mcpWords[strings.Fields(text + " x")[0]] {
		if stop, res, err := t.run(first); err != nil || stop == "cancelled" {
			return stop, res, err
		}
		return t.run(more)
	}
	word, rest, _ := strings.Cut(strings.TrimSpace(text), " ")
	if t.a.cfg.crashMidTurn != "" {
		t.say("about to crash")
		t.crash()
	}
	if t.a.cfg.readFile != "" {
		t.readFile(t.a.cfg.readFile)
	}
	if t.a.cfg.writeFile != "" {
		t.writeFile(t.a.cfg.writeFile, t.a.cfg.writeContent)
	}
	if mcpWords[word] {
		return t.runMCP(text)
	}
	switch word {
	case "echo":
		t.say(rest)
	case "sleep":
		ms, err := strconv.Atoi(strings.TrimSpace(rest))
		if err != nil || ms < 0 {
			return "", nil, &rpcError{Code: -32602, Message: "sleep needs milliseconds"}
		}
		if !t.sleep(time.Duration(ms) * time.Millisecond) {
			t.say("interrupted")
			return "cancelled", nil, nil
		}
		t.say(fmt.Sprintf("slept %d ms", ms))
	case "edit": // edit <relpath> <content>: an edit tool call with diff content
		path, content, _ := strings.Cut(rest, " ")
		t.edit(path, strings.ReplaceAll(content, `\n`, "\n"))
	case "delete": // delete <relpath>: a delete tool call with only a location
		t.deleteFile(rest)
	case "read":
		t.readFile(rest)
	case "tool-fail": // tool-fail <text>: an execute tool call that ends failed with text
		t.toolDone(t.toolCall("execute", "Run a command", nil), "failed", rest)
	case "long", "long-emoji", "long-ctl": // long[-emoji|-ctl] N: one message of N bytes (workspace.md §12 [bodies])
		n, err := strconv.Atoi(strings.TrimSpace(rest))
		if err != nil || n < 0 || n > maxLongBytes {
			return "", nil, &rpcError{Code: -32602, Message: "long needs 0..4194304 bytes"}
		}
		for _, part := range splitText(longText(word, n), max(longChunkBytes, n/longChunkCount)) {
			t.say(part)
		}
	case "tool-out": // tool-out N: an execute tool call that completes with N bytes of output
		n, err := strconv.Atoi(strings.TrimSpace(rest))
		if err != nil || n < 0 || n > maxLongBytes {
			return "", nil, &rpcError{Code: -32602, Message: "tool-out needs 0..4194304 bytes"}
		}
		t.toolDone(t.toolCall("execute", "Run a command", nil), "completed", longText("long", n))
	case "write":
		path, content, _ := strings.Cut(rest, " ")
		t.writeFile(path, content)
	case "goal":
		t.goalPrompt()
	case "caps":
		t.a.mu.Lock()
		caps := t.a.clientCaps
		t.a.mu.Unlock()
		t.say("clientCapabilities " + caps)
	case "terminal", "kill-terminal":
		t.terminal(word == "kill-terminal", rest)
	case "shell", "shell-kill": // shell.go
		t.shell(word == "shell-kill", rest)
	case "permission":
		// permission <word>: an edit tool titled by the word; the words
		// bridge <tool> (a Paperclip bridge tool, as Claude names it, with
		// _meta.claudeCode.toolName), shell (a Bash call) and read <path>
		// pick the tool the request is about (tools.md §6).
		kind, title := "edit", "Edit with permission ("+rest+")"
		var meta any
		arg, more, _ := strings.Cut(rest, " ")
		switch arg {
		case "bridge":
			kind, title = "other", "mcp__paperclip__"+more
			meta = map[string]any{"claudeCode": map[string]any{"toolName": title}}
		case "shell":
			kind, title = "execute", "Bash"
		case "read":
			kind, title = "read", "Read "+more
		}
		id := t.toolCall(kind, title, nil)
		options := []any{
			map[string]any{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
			map[string]any{"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
			map[string]any{"optionId": "reject", "name": "Reject", "kind": "reject_once"},
			map[string]any{"optionId": "reject-always", "name": "Always reject", "kind": "reject_always"},
		}
		if t.a.cfg.permNoAlways {
			options = []any{options[0], options[2]}
		}
		tc := map[string]any{"toolCallId": id, "title": title, "kind": kind, "status": "pending"}
		if meta != nil {
			tc["_meta"] = meta
		}
		m := t.call("session/request_permission", map[string]any{"toolCall": tc, "options": options})
		var r struct {
			Outcome struct {
				Outcome  string `json:"outcome"`
				OptionID string `json:"optionId"`
			} `json:"outcome"`
		}
		_ = json.Unmarshal(m.Result, &r)
		switch {
		case m.Error != nil || r.Outcome.Outcome == "cancelled":
			t.toolDone(id, "failed", "permission cancelled")
			return "cancelled", nil, nil
		case strings.HasPrefix(r.Outcome.OptionID, "allow"):
			t.toolDone(id, "completed", "permission granted: "+r.Outcome.OptionID)
		default:
			t.toolDone(id, "failed", "permission denied: "+r.Outcome.OptionID)
		}
		t.say("permission outcome " + r.Outcome.OptionID)
	case "plan":
		entries := func(status string) []any {
			return []any{
				map[string]any{"content": "Read the code", "priority": "high", "status": status},
				map[string]any{"content": "Write the fix", "priority": "medium", "status": status},
				map[string]any{"content": "Run the tests", "priority": "low", "status": status},
			}
		}
		t.a.update(t.s, map[string]any{"sessionUpdate": "plan", "entries": entries("pending")})
		t.a.update(t.s, map[string]any{"sessionUpdate": "plan", "entries": entries("completed")})
		t.say("plan done")
	case "think":
		t.a.update(t.s, map[string]any{"sessionUpdate": "agent_thought_chunk", "messageId": t.a.next("thought"),
			"content": map[string]any{"type": "text", "text": "thinking about " + rest}})
		t.say("thought about " + rest)
	case "usage":
		t.a.update(t.s, map[string]any{"sessionUpdate": "usage_update", "used": 1234, "size": 200000,
			"cost": map[string]any{"amount": 0.25, "currency": "USD"}})
		t.say("usage reported")
		return "end_turn", map[string]any{"totalTokens": 150, "inputTokens": 100, "outputTokens": 50}, nil
	case "fail":
		code, err := strconv.Atoi(strings.TrimSpace(rest))
		if err != nil {
			code = -32603
		}
		return "", nil, &rpcError{Code: code, Message: "fake failure"}
	case "chunks":
		// chunks N: N small agent_message_chunk updates "0,", "1,", … in
		// one message (bench: ordered delivery with P2 coalescing).
		n, err := strconv.Atoi(strings.TrimSpace(rest))
		if err != nil || n < 0 || n > maxChunks {
			return "", nil, &rpcError{Code: -32602, Message: "chunks needs 0..100000"}
		}
		if t.msgID == "" {
			t.msgID = t.a.next("msg")
		}
		for i := range n {
			t.a.update(t.s, map[string]any{"sessionUpdate": "agent_message_chunk", "messageId": t.msgID,
				"content": map[string]any{"type": "text", "text": strconv.Itoa(i) + ","}})
		}
	case "bulk":
		// bulk N SIZE: N chunks of SIZE bytes, written as fast as the
		// pipe takes them, alternately of one message and one thought,
		// so no two consecutive deltas coalesce (bench: a large stream
		// of events live, replayed from a built outbox to compare).
		f := strings.Fields(rest)
		n, size := -1, -1
		if len(f) == 2 {
			n, _ = strconv.Atoi(f[0])
			size, _ = strconv.Atoi(f[1])
		}
		if n < 0 || n > maxChunks || size < 1 || size > maxBulkChunk {
			return "", nil, &rpcError{Code: -32602, Message: "bulk needs N (0..100000) and SIZE (1..65536)"}
		}
		if t.msgID == "" {
			t.msgID = t.a.next("msg")
		}
		thought := t.a.next("msg")
		for i := range n {
			kind, id := "agent_message_chunk", t.msgID
			if i%2 == 1 {
				kind, id = "agent_thought_chunk", thought
			}
			t.a.update(t.s, map[string]any{"sessionUpdate": kind, "messageId": id,
				"content": map[string]any{"type": "text", "text": fmt.Sprintf("%08d", i) + strings.Repeat("x", max(size-8, 0))}})
		}
	case "stamp":
		// stamp N GAPMS: N chunks "<unix-nanos>;" written GAPMS apart (bench
		// only: the one scenario with wall-clock content, so a consumer can
		// measure line-written → event-committed latency).
		f := strings.Fields(rest)
		n, gap := 0, 5
		if len(f) > 0 {
			n, _ = strconv.Atoi(f[0])
		}
		if len(f) > 1 {
			gap, _ = strconv.Atoi(f[1])
		}
		if n < 0 || n > maxChunks || gap < 0 || gap > 1000 {
			return "", nil, &rpcError{Code: -32602, Message: "stamp needs N (0..100000) and GAPMS (0..1000)"}
		}
		for range n {
			if !t.sleep(time.Duration(gap) * time.Millisecond) {
				return "cancelled", nil, nil
			}
			t.say(strconv.FormatInt(time.Now().UnixNano(), 10) + ";")
		}
	case "flood":
		return t.flood(rest)
	case "refuse":
		return "refusal", nil, nil
	case "max_tokens":
		t.say("truncated")
		return "max_tokens", nil, nil
	default:
		t.say(strings.TrimSpace(text))
	}
	return "end_turn", nil, nil
}

// readFile reads path through the client as a read tool call, and says
// what came back: "read <path>: <content>" or "read <path> failed <code>:
// <message>".
func (t *turn) readFile(path string) {
	id := t.toolCall("read", "Read "+path, []string{path})
	m := t.call("fs/read_text_file", map[string]any{"path": path})
	if m.Error != nil {
		t.toolDone(id, "failed", fmt.Sprintf("fs/read_text_file failed: %d", m.Error.Code))
		t.say(fmt.Sprintf("read %s failed %d: %s\n", path, m.Error.Code, m.Error.Message))
		return
	}
	var r struct {
		Content string `json:"content"`
	}
	_ = json.Unmarshal(m.Result, &r)
	t.toolDone(id, "completed", r.Content)
	t.say("read " + path + ": " + r.Content + "\n")
}

// stepSeparator chains scenario steps in one prompt.
const stepSeparator = " ;; "

// edit writes content to relpath (under the agent's working directory)
// itself, reported as an edit tool call whose content is the diff (ACP
// {type:"diff", path, oldText, newText}; oldText null for a new file),
// and says "edited [relpath](relpath)".
func (t *turn) edit(rel, content string) {
	abs, _ := filepath.Abs(rel)
	id := t.toolCall("edit", "Edit "+rel, []string{abs})
	var old any
	if b, err := os.ReadFile(abs); err == nil {
		old = string(b)
	}
	if err := os.WriteFile(abs, []byte(content), 0o644); err != nil {
		t.toolDone(id, "failed", "write failed")
		return
	}
	t.a.update(t.s, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": id, "status": "completed",
		"content": []any{map[string]any{"type": "diff", "path": abs, "oldText": old, "newText": content}}})
	t.say("edited [" + rel + "](" + rel + ")\n")
}

// deleteFile removes relpath, reported as a delete tool call with only
// its location.
func (t *turn) deleteFile(rel string) {
	abs, _ := filepath.Abs(rel)
	id := t.toolCall("delete", "Delete "+rel, []string{abs})
	if err := os.Remove(abs); err != nil {
		t.toolDone(id, "failed", "delete failed")
		return
	}
	t.toolDone(id, "completed", "")
	t.say("deleted " + rel + "\n")
}

// writeFile writes content to path through the client as an edit tool
// call, and says "wrote <path>" or "write <path> failed <code>: <message>".
func (t *turn) writeFile(path, content string) {
	id := t.toolCall("edit", "Write "+path, []string{path})
	m := t.call("fs/write_text_file", map[string]any{"path": path, "content": content})
	if m.Error != nil {
		t.toolDone(id, "failed", fmt.Sprintf("fs/write_text_file failed: %d", m.Error.Code))
		t.say(fmt.Sprintf("write %s failed %d: %s\n", path, m.Error.Code, m.Error.Message))
		return
	}
	t.toolDone(id, "completed", "written")
	t.say("wrote " + path + "\n")
}

func (t *turn) terminal(kill bool, command string) {
	id := t.toolCall("execute", "Run "+command, nil)
	m := t.call("terminal/create", map[string]any{"command": "sh", "args": []any{"-c", command}})
	if m.Error != nil {
		t.toolDone(id, "failed", fmt.Sprintf("terminal/create failed: %d", m.Error.Code))
		return
	}
	var r struct {
		TerminalID string `json:"terminalId"`
	}
	_ = json.Unmarshal(m.Result, &r)
	if kill {
		t.call("terminal/kill", map[string]any{"terminalId": r.TerminalID})
	} else {
		t.call("terminal/wait_for_exit", map[string]any{"terminalId": r.TerminalID})
	}
	out := t.call("terminal/output", map[string]any{"terminalId": r.TerminalID})
	t.call("terminal/release", map[string]any{"terminalId": r.TerminalID})
	var o struct {
		Output string `json:"output"`
	}
	_ = json.Unmarshal(out.Result, &o)
	t.toolDone(id, "completed", o.Output)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Files of the `flood` scenario, in the agent's working directory.
const (
	floodGoFile     = "flood-go"    // the test creates it: write the flood now
	cancelSeenFile  = "cancel-seen" // the agent creates it on session/cancel
	floodStartBound = 30 * time.Second
	floodPoll       = 10 * time.Millisecond
)

// flood is the scenario `flood N`: once the file flood-go exists, N tool
// calls in one burst (each its own item, so nothing coalesces), then a
// wait for session/cancel, recorded as the file cancel-seen. A test stops
// its core's reading first, so the runner's send path is really full
// when the interrupt comes.
func (t *turn) flood(rest string) (string, any, *rpcError) {
	n, err := strconv.Atoi(strings.TrimSpace(rest))
	if err != nil || n < 0 || n > maxChunks {
		return "", nil, &rpcError{Code: -32602, Message: "flood needs 0..100000"}
	}
	deadline := time.Now().Add(floodStartBound)
	for {
		if _, err := os.Stat(floodGoFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return "", nil, &rpcError{Code: -32603, Message: "flood-go never appeared"}
		}
		if !t.sleep(floodPoll) {
			return "cancelled", nil, nil
		}
	}
	// One write, so pcwrap reads the burst in as few event files as its
	// buffer allows and the runner maps hundreds of events per file.
	var burst []byte
	for range n {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{
			"sessionId": t.s.id, "update": map[string]any{"sessionUpdate": "tool_call", "toolCallId": t.a.next("call"),
				"title": "flood", "kind": "other", "status": "pending"}}})
		burst = append(append(burst, b...), '\n')
	}
	t.a.writeRaw(burst)
	if t.sleep(maxSleep) {
		return "end_turn", nil, nil
	}
	if err := os.WriteFile(cancelSeenFile, nil, 0o600); err != nil {
		return "", nil, &rpcError{Code: -32603, Message: "record the cancel: " + err.Error()}
	}
	return "cancelled", nil, nil
}
