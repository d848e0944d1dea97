package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Directive bounds.
const (
	maxSlowChunks = 1000
	maxSlowDelay  = 10 * time.Second
)

const defaultSentence = "Hello from fakeopencode."

func (s *server) promptAsync(w http.ResponseWriter, r *http.Request) {
	b, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(b, &raw) != nil {
		badRequest(w, "body is not an object")
		return
	}
	// OpenCode 1.18's body schema has additionalProperties: false.
	for k := range raw {
		switch k {
		case "messageID", "model", "agent", "noReply", "tools", "format", "system", "variant", "parts":
		default:
			badRequest(w, "unknown field "+k)
			return
		}
	}
	var body struct {
		Model *struct {
			ProviderID string `json:"providerID"`
			ModelID    string `json:"modelID"`
		} `json:"model"`
		System string `json:"system"`
		Parts  []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"parts"`
	}
	if json.Unmarshal(b, &body) != nil || body.Parts == nil {
		badRequest(w, "parts is required")
		return
	}
	if body.Model != nil && (body.Model.ProviderID == "" || body.Model.ModelID == "") {
		badRequest(w, "model needs providerID and modelID")
		return
	}
	var text strings.Builder
	for _, p := range body.Parts {
		if p.Type == "text" {
			text.WriteString(p.Text)
		}
	}
	s.mu.Lock()
	ss, ok := s.sessions[r.PathValue("id")]
	if !ok {
		s.mu.Unlock()
		notFound(w, "session")
		return
	}
	if ss.busy {
		s.mu.Unlock()
		http.Error(w, "session is busy", http.StatusConflict)
		return
	}
	ss.busy, ss.abort, ss.done = true, make(chan struct{}), make(chan struct{})
	t := &turn{s: s, ss: ss, sid: ss.info["id"].(string)}
	t.begin(text.String(), body.System)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	go t.run(directive(text.String()))
}

// turn is one running prompt.
type turn struct {
	s     *server
	ss    *session
	sid   string
	user  string
	asst  *message
	words int
	// silent is set by the drop directive: the rest of the turn is
	// stored but not published.
	silent bool
}

// begin stores the user message and publishes its events. s.mu held.
func (t *turn) begin(text, system string) {
	s := t.s
	t.user = s.idLocked("msg")
	info := map[string]any{"id": t.user, "sessionID": t.sid, "role": "user",
		"time": map[string]any{"created": s.nowLocked()}, "agent": "build"}
	if system != "" {
		info["system"] = system
	}
	part := map[string]any{"id": s.idLocked("prt"), "sessionID": t.sid, "messageID": t.user, "type": "text", "text": text}
	t.ss.messages = append(t.ss.messages, &message{info: info, parts: []map[string]any{part}})
	s.publishLocked("message.updated", map[string]any{"sessionID": t.sid, "info": info})
	s.publishLocked("message.part.updated", map[string]any{"sessionID": t.sid, "part": part, "time": s.nowLocked()})
	s.publishLocked("session.status", map[string]any{"sessionID": t.sid, "status": map[string]string{"type": "busy"}})
	id := s.idLocked("msg")
	t.asst = &message{info: map[string]any{"id": id, "sessionID": t.sid, "role": "assistant", "parentID": t.user,
		"mode": "build", "agent": "build", "modelID": "fake-model", "providerID": "fake",
		"path": map[string]string{"cwd": "/", "root": "/"}, "cost": 0,
		"tokens": tokens(0, 0), "time": map[string]any{"created": s.nowLocked()}}}
	t.ss.messages = append(t.ss.messages, t.asst)
	t.publish("message.updated", map[string]any{"sessionID": t.sid, "info": t.asst.info})
	t.addPart(map[string]any{"type": "step-start"})
}

func tokens(in, out int) map[string]any {
	return map[string]any{"total": in + out, "input": in, "output": out, "reasoning": 0,
		"cache": map[string]int{"read": 0, "write": 0}}
}

// publish sends unless the turn went silent. s.mu held.
func (t *turn) publish(typ string, props map[string]any) {
	if !t.silent {
		t.s.publishLocked(typ, props)
	}
}

// addPart stores a new part of the assistant message and publishes it.
// s.mu held.
func (t *turn) addPart(p map[string]any) map[string]any {
	p["id"], p["sessionID"], p["messageID"] = t.s.idLocked("prt"), t.sid, t.asst.info["id"]
	t.asst.parts = append(t.asst.parts, p)
	t.publishPart(p)
	return p
}

func (t *turn) publishPart(p map[string]any) {
	t.publish("message.part.updated", map[string]any{"sessionID": t.sid, "part": clone(p), "time": t.s.nowLocked()})
}

func clone(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	json.Unmarshal(b, &out)
	return out
}

// aborted reports whether abort was called.
func (t *turn) aborted() bool {
	select {
	case <-t.ss.abort:
		return true
	default:
		return false
	}
}

// text streams one text (or reasoning) part, a delta per chunk, with
// delay between chunks; dropAfter > 0 goes silent after that many
// deltas. It reports false when the turn was aborted.
func (t *turn) text(kind string, chunks []string, delay time.Duration, dropAfter int) bool {
	t.s.mu.Lock()
	p := t.addPart(map[string]any{"type": kind, "text": "", "time": map[string]any{"start": t.s.nowLocked()}})
	t.s.mu.Unlock()
	for i, c := range chunks {
		if i > 0 && delay > 0 {
			select {
			case <-t.ss.abort:
			case <-time.After(delay):
			}
		}
		if t.aborted() {
			t.s.mu.Lock()
			t.endText(p)
			t.s.mu.Unlock()
			return false
		}
		t.s.mu.Lock()
		p["text"] = p["text"].(string) + c
		t.words++
		t.publish("message.part.delta", map[string]any{"sessionID": t.sid, "messageID": t.asst.info["id"],
			"partID": p["id"], "field": "text", "delta": c})
		if dropAfter > 0 && i+1 == dropAfter {
			t.silent = true
			t.s.closeStreamsLocked()
		}
		t.s.mu.Unlock()
	}
	t.s.mu.Lock()
	t.endText(p)
	t.s.mu.Unlock()
	return true
}

func (t *turn) endText(p map[string]any) {
	p["time"].(map[string]any)["end"] = t.s.nowLocked()
	t.publishPart(p)
}

func words(ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		if i < len(ws)-1 {
			w += " "
		}
		out[i] = w
	}
	return out
}

// run plays the directive, then ends the turn.
func (t *turn) run(d []string) {
	errName := ""
	ok := true
	verb := ""
	var args []string
	if len(d) > 0 {
		verb, args = d[0], d[1:]
	}
	switch verb {
	case "text":
		ok = t.text("text", words(args), 0, 0)
	case "reasoning":
		ok = t.text("reasoning", words(args), 0, 0) && t.text("text", []string{"done"}, 0, 0)
	case "tool":
		ok = t.tool(strings.Join(args, " "), false) && t.text("text", []string{"done"}, 0, 0)
	case "permission":
		ok = t.tool(strings.Join(args, " "), true)
		if ok {
			ok = t.text("text", []string{"done"}, 0, 0)
		}
	case "slow":
		n, ms := 3, 50
		if len(args) >= 2 {
			n, _ = strconv.Atoi(args[0])
			ms, _ = strconv.Atoi(args[1])
		}
		n = min(max(n, 1), maxSlowChunks)
		delay := min(time.Duration(max(ms, 0))*time.Millisecond, maxSlowDelay)
		chunks := make([]string, n)
		for i := range chunks {
			chunks[i] = "slow "
		}
		ok = t.text("text", chunks, delay, 0)
	case "drop":
		ok = t.text("text", words(args), 0, 1)
	case "todo":
		t.s.mu.Lock()
		t.publish("todo.updated", map[string]any{"sessionID": t.sid, "todos": []map[string]string{
			{"content": "read the code", "status": "completed", "priority": "high"},
			{"content": "write the test", "status": "in_progress", "priority": "medium"},
		}})
		t.s.mu.Unlock()
		ok = t.text("text", []string{"planned"}, 0, 0)
	case "error":
		errName = "UnknownError"
		if len(args) > 0 {
			errName = args[0]
		}
	default:
		ok = t.text("text", words(strings.Fields(defaultSentence)), 0, 0)
	}
	if !ok {
		errName = "MessageAbortedError"
	}
	t.finish(errName)
}

// tool runs one bash tool part; ask makes it wait for a permission
// reply first. It reports false when the turn was aborted.
func (t *turn) tool(cmd string, ask bool) bool {
	s := t.s
	s.mu.Lock()
	callID := "call_" + s.idLocked("cal")
	p := t.addPart(map[string]any{"type": "tool", "tool": "bash", "callID": callID,
		"state": map[string]any{"status": "pending", "input": map[string]any{}, "raw": ""}})
	input := map[string]any{"command": cmd, "description": "fakeopencode tool call"}
	start := s.nowLocked()
	p["state"] = map[string]any{"status": "running", "input": input, "time": map[string]any{"start": start}}
	t.publishPart(p)
	var reply chan string
	if ask {
		perm := s.idLocked("per")
		reply = make(chan string, 1)
		s.perms[perm] = reply
		ask := map[string]any{"id": perm, "sessionID": t.sid, "permission": "bash",
			"patterns": []string{cmd}, "metadata": map[string]any{}, "always": []string{"*"},
			"tool": map[string]string{"messageID": t.asst.info["id"].(string), "callID": callID}}
		s.asks[perm] = ask
		s.askOrder = append(s.askOrder, perm)
		t.publish("permission.asked", ask)
	}
	s.mu.Unlock()
	answer := "once"
	if ask {
		select {
		case answer = <-reply:
		case <-t.ss.abort:
			answer = "aborted"
		}
		s.mu.Lock()
		for id, ch := range s.perms {
			if ch == reply {
				delete(s.perms, id)
				delete(s.asks, id)
			}
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	end := s.nowLocked()
	switch answer {
	case "once", "always":
		p["state"] = map[string]any{"status": "completed", "input": input, "output": "ran: " + cmd, "title": cmd,
			"metadata": map[string]any{"exit": 0}, "time": map[string]any{"start": start, "end": end}}
	default:
		p["state"] = map[string]any{"status": "error", "input": input, "error": "The user rejected permission to use this specific tool call.",
			"time": map[string]any{"start": start, "end": end}}
	}
	t.publishPart(p)
	return answer != "aborted"
}

// finish ends the turn: step-finish, the message's end, idle.
func (t *turn) finish(errName string) {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	reason := "stop"
	if errName != "" {
		reason = "error"
	}
	t.addPart(map[string]any{"type": "step-finish", "reason": reason, "cost": 0, "tokens": tokens(10, t.words)})
	info := t.asst.info
	info["tokens"] = tokens(10, t.words)
	info["time"].(map[string]any)["completed"] = s.nowLocked()
	if errName != "" {
		info["error"] = map[string]any{"name": errName, "data": map[string]string{"message": "fakeopencode: " + errName}}
		t.publish("session.error", map[string]any{"sessionID": t.sid, "error": info["error"]})
	} else {
		info["finish"] = "stop"
	}
	t.publish("message.updated", map[string]any{"sessionID": t.sid, "info": info})
	// The turn's end is published even after a drop: a client that
	// reconnected learns the turn is over and reads what it missed.
	t.silent = false
	t.ss.busy = false
	t.publish("session.status", map[string]any{"sessionID": t.sid, "status": map[string]string{"type": "idle"}})
	t.publish("session.idle", map[string]any{"sessionID": t.sid})
	close(t.ss.done)
}
