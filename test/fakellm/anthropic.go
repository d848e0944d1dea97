package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Anthropic Messages API (POST /v1/messages): a request's last message is
// the turn; a user message holding tool_result blocks is a tool result.

type anthropicRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"` // a string or blocks
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

type anthropicBlock struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"` // tool_result: a string or blocks
}

// anthropicText joins the text of content (a string or blocks), and says
// whether it held tool_result blocks (then the text is theirs).
func anthropicText(content json.RawMessage) (text string, isResult bool) {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s, false
	}
	var blocks []anthropicBlock
	_ = json.Unmarshal(content, &blocks)
	var texts, results []string
	for _, b := range blocks {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "tool_result":
			t, _ := anthropicText(b.Content)
			results = append(results, t)
		}
	}
	if len(results) > 0 {
		return strings.Join(results, "\n"), true
	}
	return strings.Join(texts, "\n"), false
}

func (q *anthropicRequest) turn() turn {
	var t turn
	for _, tl := range q.Tools {
		t.tools = append(t.tools, tl.Name)
	}
	// The turn is the last user message: Claude Code puts system
	// messages after it. A tool result's prompt is the user message
	// before it that is not one (a directive's then WORDS).
	for i := len(q.Messages) - 1; i >= 0; i-- {
		switch q.Messages[i].Role {
		case "user":
			text, isResult := anthropicText(q.Messages[i].Content)
			switch {
			case !isResult:
				t.prompt = text
				return t
			case t.toolResult == nil:
				t.toolResult = &text
			}
		case "assistant":
			if t.toolResult == nil {
				return t
			}
		}
	}
	return t
}

func (s *server) anthropicCountTokens(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"input_tokens": inputTokens(r)})
}

func (s *server) anthropicMessages(w http.ResponseWriter, r *http.Request) {
	var q anthropicRequest
	if !readJSON(w, r, &q) {
		return
	}
	a := decide(q.turn())
	id := s.nextID("msg")
	model := q.Model
	if model == "" {
		model = "fakellm"
	}
	stop := "end_turn"
	var toolID string
	if a.call != nil {
		stop = "tool_use"
		toolID = s.nextID("toolu")
	}
	in, out := inputTokens(r), a.outputTokens()
	if !q.Stream {
		var content []any
		if len(a.chunks) > 0 {
			content = append(content, map[string]any{"type": "text", "text": a.text()})
		}
		if a.call != nil {
			content = append(content, map[string]any{"type": "tool_use", "id": toolID, "name": a.call.name, "input": a.call.args})
		}
		writeJSON(w, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": model, "content": content,
			"stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": in, "output_tokens": out},
		})
		return
	}
	e := startSSE(w, r)
	e.send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": in, "output_tokens": 1},
	}})
	e.send("ping", map[string]any{"type": "ping"})
	index := 0
	if len(a.chunks) > 0 {
		e.send("content_block_start", map[string]any{"type": "content_block_start", "index": index,
			"content_block": map[string]any{"type": "text", "text": ""}})
		for i, c := range a.chunks {
			if i > 0 && !e.pause(a.delay) {
				return
			}
			e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
				"delta": map[string]any{"type": "text_delta", "text": c}})
		}
		e.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
	}
	if a.call != nil {
		e.send("content_block_start", map[string]any{"type": "content_block_start", "index": index,
			"content_block": map[string]any{"type": "tool_use", "id": toolID, "name": a.call.name, "input": map[string]any{}}})
		for _, part := range splitHalves(string(a.call.args)) {
			e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
		}
		e.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
	}
	e.send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": out}})
	e.send("message_stop", map[string]any{"type": "message_stop"})
}

// splitHalves cuts s in two deltas (one when short), so clients must join
// partial JSON as they do with a real model.
func splitHalves(s string) []string {
	i := len(s) / 2
	for i > 0 && !utf8.RuneStart(s[i]) {
		i-- // never cut a character: each delta is valid UTF-8
	}
	if i == 0 {
		return []string{s}
	}
	return []string{s[:i], s[i:]}
}
