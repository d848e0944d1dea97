package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// runTurn streams one turn's notifications, in a fixed order: turn/started,
// plan, a command execution, a dynamic tool call, a user-input request, the
// message deltas, usage, then turn/completed (interrupted after a
// turn/interrupt; never with --hang-turn until one). A prompt "sleep N"
// waits N ms and says "slept N ms"; "chunks N" streams N deltas "0,",
// "1,", … (the hot-restart test's turns, as fakeacp's).
func (s *server) runTurn(turn, prompt string, stop chan struct{}) {
	defer s.wg.Done()
	th := s.thread
	ev := func(extra map[string]any) map[string]any {
		m := map[string]any{"threadId": th, "turnId": turn}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	s.notify("turn/started", map[string]any{"threadId": th, "turn": turnObject(turn, "inProgress")})
	if s.cfg.plan {
		s.notify("turn/plan/updated", ev(map[string]any{"explanation": nil, "plan": []any{
			map[string]any{"step": "read the task", "status": "completed"},
			map[string]any{"step": "answer", "status": "inProgress"},
		}}))
	}
	if s.cfg.command {
		id := s.nextItem()
		item := map[string]any{"type": "commandExecution", "id": id, "command": "echo fake", "cwd": "/",
			"processId": nil, "source": "agent", "status": "inProgress", "commandActions": []any{}, "aggregatedOutput": nil,
			"exitCode": nil, "durationMs": nil}
		// Fixed lifecycle times (durationMs apart) keep transcripts
		// byte for byte comparable.
		s.notify("item/started", ev(map[string]any{"item": item, "startedAtMs": 0}))
		done := map[string]any{}
		for k, v := range item {
			done[k] = v
		}
		done["status"], done["aggregatedOutput"], done["exitCode"], done["durationMs"] = "completed", "fake\n", 0, 1
		if s.cfg.approval {
			ans, ok := s.request("item/commandExecution/requestApproval", ev(map[string]any{"itemId": id,
				"command": "echo fake", "cwd": "/", "reason": "the fake wants to run a command", "startedAtMs": 0}), stop)
			var r struct {
				Decision string `json:"decision"`
			}
			if ok {
				_ = json.Unmarshal(ans.Result, &r)
			}
			if r.Decision != "accept" && r.Decision != "acceptForSession" {
				done["status"], done["aggregatedOutput"], done["exitCode"] = "declined", nil, nil
			}
		}
		s.notify("item/completed", ev(map[string]any{"item": done, "completedAtMs": 1}))
	}
	text := "hello from fakecodex"
	if s.cfg.toolCall != "" {
		s.mu.Lock()
		s.srvReq++
		callID := fmt.Sprintf("call-%04d", s.srvReq)
		s.mu.Unlock()
		ans, ok := s.request("item/tool/call", ev(map[string]any{"callId": callID, "tool": s.cfg.toolCall,
			"arguments": json.RawMessage(s.cfg.toolArgs)}), stop)
		if ok {
			text = "tool answered: " + summarise(ans)
		} else {
			text = "tool call abandoned"
		}
	}
	if s.cfg.userInput {
		ans, ok := s.request("item/tool/requestUserInput", ev(map[string]any{"itemId": s.nextItem(), "isBlocking": true, "questions": []any{
			map[string]any{"id": "q1", "header": "Pick", "question": "Which one?", "isOther": false, "isSecret": false,
				"options": []any{map[string]any{"label": "A", "description": "a"}}},
		}}), stop)
		if ok {
			text += "; user answered: " + summarise(ans)
		}
	}
	if s.cfg.finish != "" {
		s.mu.Lock()
		s.srvReq++
		callID := fmt.Sprintf("call-%04d", s.srvReq)
		s.mu.Unlock()
		if ans, ok := s.request("item/tool/call", ev(map[string]any{"callId": callID, "tool": "paperclip_finish",
			"arguments": json.RawMessage(s.cfg.finish)}), stop); ok {
			text += "; finish answered: " + summarise(ans)
		}
	}
	if s.cfg.hangTurn {
		<-stop
	}
	if prompt == "turndiff" {
		s.notify("turn/diff/updated", ev(map[string]any{"diff": fakeTurnDiff}))
	}
	msgID := s.nextItem()
	var ms, chunks int
	switch {
	case sscan(prompt, "sleep %d", &ms):
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-stop:
		}
		s.notify("item/agentMessage/delta", ev(map[string]any{"itemId": msgID, "delta": fmt.Sprintf("slept %d ms", ms)}))
	case strings.HasPrefix(prompt, "stamp "):
		// stamp N GAPMS: N deltas "<unix-nanos>;" written GAPMS apart (bench
		// only: the one output with wall-clock content, so a consumer can
		// measure line-written → event-committed latency).
		var gap int
		if _, err := fmt.Sscanf(prompt, "stamp %d %d", &chunks, &gap); err != nil || chunks < 0 || chunks > 100000 || gap < 0 || gap > 1000 {
			break
		}
		for k := 0; k < chunks; k++ {
			select {
			case <-time.After(time.Duration(gap) * time.Millisecond):
			case <-stop:
				k = chunks
				continue
			}
			s.notify("item/agentMessage/delta", ev(map[string]any{"itemId": msgID, "delta": strconv.FormatInt(time.Now().UnixNano(), 10) + ";"}))
		}
	case sscan(prompt, "chunks %d", &chunks):
		for k := 0; k < chunks; k++ {
			s.notify("item/agentMessage/delta", ev(map[string]any{"itemId": msgID, "delta": fmt.Sprintf("%d,", k)}))
		}
	default:
		n := s.cfg.deltas
		for i := 0; i < n; i++ {
			part := text
			if n > 1 {
				part = fmt.Sprintf("%s [%d]", text, i+1)
			}
			s.notify("item/agentMessage/delta", ev(map[string]any{"itemId": msgID, "delta": part}))
		}
	}
	if s.cfg.usage {
		b := map[string]any{"totalTokens": 30, "inputTokens": 20, "cachedInputTokens": 5, "outputTokens": 10, "reasoningOutputTokens": 0}
		s.notify("thread/tokenUsage/updated", ev(map[string]any{"tokenUsage": map[string]any{"total": b, "last": b, "modelContextWindow": nil}}))
	}
	status := "completed"
	select {
	case <-stop:
		status = "interrupted"
	default:
	}
	s.mu.Lock()
	s.active, s.activeID = nil, ""
	s.mu.Unlock()
	s.notify("turn/completed", map[string]any{"threadId": th, "turn": turnObject(turn, status)})
}

// fakeTurnDiff is the turn's aggregated git diff the prompt "turndiff"
// gets: a rename with a hunk, a mode change and a binary file (the files
// themselves are not touched).
const fakeTurnDiff = `diff --git a/old.go b/new.go
similarity index 90%
rename from old.go
rename to new.go
--- a/old.go
+++ b/new.go
@@ -1,2 +1,2 @@
 package x
-var a = 1
+var a = 2
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
diff --git a/logo.png b/logo.png
new file mode 100644
Binary files /dev/null and b/logo.png differ
`

func sscan(s, format string, n *int) bool {
	_, err := fmt.Sscanf(s, format, n)
	return err == nil
}

// summarise is the text of a tool or input answer, cut short.
func summarise(m msg) string {
	if m.Error != nil {
		return "error"
	}
	s := string(m.Result)
	if len(s) > 200 {
		s = s[:200]
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// request sends a server request and waits for runnerd's answer, or the
// turn's interrupt (then serverRequest/resolved closes it).
func (s *server) request(method string, params map[string]any, stop chan struct{}) (msg, bool) {
	s.mu.Lock()
	s.srvReq++
	id := fmt.Sprintf("%q", fmt.Sprintf("srv-%d", s.srvReq))
	ch := make(chan msg, 1)
	s.waits[id] = ch
	s.mu.Unlock()
	s.write(map[string]any{"id": json.RawMessage(id), "method": method, "params": params})
	select {
	case m, ok := <-ch:
		return m, ok
	case <-stop:
		s.mu.Lock()
		delete(s.waits, id)
		s.mu.Unlock()
		s.notify("serverRequest/resolved", map[string]any{"threadId": s.thread, "requestId": json.RawMessage(id)})
		return msg{}, false
	}
}

func (s *server) notify(method string, params any) {
	s.write(map[string]any{"method": method, "params": params})
}

func (s *server) result(id json.RawMessage, result any) {
	s.write(map[string]any{"id": id, "result": result})
}

func (s *server) rpcError(id json.RawMessage, code int, message string) {
	s.write(map[string]any{"id": id, "error": map[string]any{"code": code, "message": message}})
}

func (s *server) write(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintln(s.log, "fakecodex: encode:", err)
		return
	}
	s.writeRaw(string(b))
}

func (s *server) writeRaw(line string) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := fmt.Fprintln(s.out, line); err != nil {
		fmt.Fprintln(os.Stderr, "fakecodex: write:", err)
	}
	s.record("out", []byte(line))
}

// record appends one wire line to the transcript (no timestamp: the
// golden comparison is byte for byte).
func (s *server) record(dir string, line []byte) {
	if s.trans == nil {
		return
	}
	body := strings.TrimRight(string(line), "\r\n")
	entry := map[string]any{"dir": dir}
	if json.Valid([]byte(body)) {
		entry["msg"] = json.RawMessage(body)
	} else {
		entry["text"] = body
	}
	b, _ := json.Marshal(entry)
	_, _ = s.trans.Write(append(b, '\n'))
}
