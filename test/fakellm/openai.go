package main

import (
	"encoding/json"
	"net/http"
	"strings"
)

// OpenAI Responses API (POST /v1/responses) and Chat Completions
// (POST /v1/chat/completions, GET /v1/models).

// openaiText joins the text of content: a string or parts carrying text
// (input_text, output_text, text).
func openaiText(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(content, &parts)
	var texts []string
	for _, p := range parts {
		if p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

type responsesRequest struct {
	Model  string          `json:"model"`
	Stream bool            `json:"stream"`
	Input  json.RawMessage `json:"input"` // a string or items
	Tools  []struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

type responsesItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Output  json.RawMessage `json:"output"` // function_call_output: a string or parts
}

func (q *responsesRequest) turn() turn {
	var t turn
	for _, tl := range q.Tools {
		if tl.Name != "" {
			t.tools = append(t.tools, tl.Name)
			if tl.Type == "custom" {
				t.freeform = append(t.freeform, tl.Name)
			}
		} else if tl.Function.Name != "" {
			t.tools = append(t.tools, tl.Function.Name)
		}
	}
	var s string
	if json.Unmarshal(q.Input, &s) == nil {
		t.prompt = s
		return t
	}
	var items []responsesItem
	_ = json.Unmarshal(q.Input, &items)
	// The turn is the last tool output or user message; system and
	// developer messages after it do not count. A tool output's prompt is
	// the user message before it (a directive's then WORDS).
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i]
		switch {
		case it.Type == "function_call_output" || it.Type == "custom_tool_call_output":
			if t.toolResult == nil {
				out := openaiText(it.Output)
				t.toolResult = &out
			}
		case it.Role == "user":
			t.prompt = openaiText(it.Content)
			return t
		case it.Role == "assistant" || it.Type == "function_call" || it.Type == "custom_tool_call":
			if t.toolResult == nil {
				return t
			}
		}
	}
	return t
}

func (s *server) openaiResponses(w http.ResponseWriter, r *http.Request) {
	var q responsesRequest
	if !readJSON(w, r, &q) {
		return
	}
	a := decide(q.turn())
	model := q.Model
	if model == "" {
		model = "fakellm"
	}
	in, out := inputTokens(r), a.outputTokens()
	resp := map[string]any{
		"id": s.nextID("resp"), "object": "response", "created_at": 0, "status": "in_progress",
		"model": model, "output": []any{}, "usage": nil, "error": nil, "incomplete_details": nil,
	}
	usage := map[string]any{
		"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": out, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": in + out,
	}
	var msgID, fcID, callID string
	if len(a.chunks) > 0 {
		msgID = s.nextID("msg")
	}
	if a.call != nil {
		fcID, callID = s.nextID("fc"), s.nextID("call")
	}
	msgItem := func(status, text string) map[string]any {
		content := []any{}
		if status == "completed" {
			content = append(content, map[string]any{"type": "output_text", "text": text, "annotations": []any{}})
		}
		return map[string]any{"id": msgID, "type": "message", "status": status, "role": "assistant", "content": content}
	}
	fcItem := func(status, args string) map[string]any {
		if a.call.freeform {
			return map[string]any{"id": fcID, "type": "custom_tool_call", "status": status,
				"call_id": callID, "name": a.call.name, "input": args}
		}
		return map[string]any{"id": fcID, "type": "function_call", "status": status,
			"call_id": callID, "name": a.call.name, "arguments": args}
	}
	// callArgs is what the call carries: a free-text tool's input, else
	// the JSON arguments.
	var callArgs string
	if a.call != nil {
		callArgs = string(a.call.args)
		if a.call.freeform {
			callArgs = a.call.input
		}
	}
	var final []any
	if msgID != "" {
		final = append(final, msgItem("completed", a.text()))
	}
	if fcID != "" {
		final = append(final, fcItem("completed", callArgs))
	}
	if !q.Stream {
		resp["status"], resp["output"], resp["usage"] = "completed", final, usage
		writeJSON(w, resp)
		return
	}
	e := startSSE(w, r)
	seq := 0
	send := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		e.send(typ, fields)
	}
	send("response.created", map[string]any{"response": resp})
	send("response.in_progress", map[string]any{"response": resp})
	index := 0
	if msgID != "" {
		send("response.output_item.added", map[string]any{"output_index": index, "item": msgItem("in_progress", "")})
		send("response.content_part.added", map[string]any{"item_id": msgID, "output_index": index, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
		for i, c := range a.chunks {
			if i > 0 && !e.pause(a.delay) {
				return
			}
			send("response.output_text.delta", map[string]any{"item_id": msgID, "output_index": index, "content_index": 0, "delta": c})
		}
		send("response.output_text.done", map[string]any{"item_id": msgID, "output_index": index, "content_index": 0, "text": a.text()})
		send("response.content_part.done", map[string]any{"item_id": msgID, "output_index": index, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": a.text(), "annotations": []any{}}})
		send("response.output_item.done", map[string]any{"output_index": index, "item": msgItem("completed", a.text())})
		index++
	}
	if fcID != "" {
		send("response.output_item.added", map[string]any{"output_index": index, "item": fcItem("in_progress", "")})
		if a.call.freeform {
			for _, part := range splitHalves(callArgs) {
				send("response.custom_tool_call_input.delta", map[string]any{"item_id": fcID, "output_index": index, "delta": part})
			}
			send("response.custom_tool_call_input.done", map[string]any{"item_id": fcID, "output_index": index, "input": callArgs})
		} else {
			for _, part := range splitHalves(callArgs) {
				send("response.function_call_arguments.delta", map[string]any{"item_id": fcID, "output_index": index, "delta": part})
			}
			send("response.function_call_arguments.done", map[string]any{"item_id": fcID, "output_index": index,
				"name": a.call.name, "arguments": callArgs})
		}
		send("response.output_item.done", map[string]any{"output_index": index, "item": fcItem("completed", callArgs)})
	}
	resp["status"], resp["output"], resp["usage"] = "completed", final, usage
	send("response.completed", map[string]any{"response": resp})
}

type chatRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

func (q *chatRequest) turn() turn {
	var t turn
	for _, tl := range q.Tools {
		t.tools = append(t.tools, tl.Function.Name)
	}
	// The turn is the last tool or user message; system and developer
	// messages after it do not count.
	for i := len(q.Messages) - 1; i >= 0; i-- {
		switch q.Messages[i].Role {
		case "tool":
			out := openaiText(q.Messages[i].Content)
			t.toolResult = &out
			return t
		case "user":
			t.prompt = openaiText(q.Messages[i].Content)
			return t
		case "assistant":
			return t
		}
	}
	return t
}

func (s *server) openaiChat(w http.ResponseWriter, r *http.Request) {
	var q chatRequest
	if !readJSON(w, r, &q) {
		return
	}
	a := decide(q.turn())
	model := q.Model
	if model == "" {
		model = "fakellm"
	}
	id := s.nextID("chatcmpl")
	in, out := inputTokens(r), a.outputTokens()
	usage := map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}
	finish := "stop"
	var callID string
	if a.call != nil {
		finish, callID = "tool_calls", s.nextID("call")
	}
	if !q.Stream {
		msg := map[string]any{"role": "assistant", "content": nil}
		if len(a.chunks) > 0 {
			msg["content"] = a.text()
		}
		if a.call != nil {
			msg["tool_calls"] = []any{map[string]any{"id": callID, "type": "function",
				"function": map[string]any{"name": a.call.name, "arguments": string(a.call.args)}}}
		}
		writeJSON(w, map[string]any{"id": id, "object": "chat.completion", "created": 0, "model": model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
		return
	}
	e := startSSE(w, r)
	chunk := func(delta map[string]any, finishReason any) {
		e.send("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finishReason}}})
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	for i, c := range a.chunks {
		if i > 0 && !e.pause(a.delay) {
			return
		}
		chunk(map[string]any{"content": c}, nil)
	}
	if a.call != nil {
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": callID, "type": "function",
			"function": map[string]any{"name": a.call.name, "arguments": ""}}}}, nil)
		for _, part := range splitHalves(string(a.call.args)) {
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0,
				"function": map[string]any{"arguments": part}}}}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	if q.StreamOptions.IncludeUsage {
		e.send("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
			"choices": []any{}, "usage": usage})
	}
	e.raw([]byte("data: [DONE]\n\n"))
}

// openaiModels lists the one model in a shape both OpenAI's and
// Anthropic's model list clients read: each ignores the other's fields.
func (s *server) openaiModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]any{"object": "list", "has_more": false, "first_id": "fakellm", "last_id": "fakellm",
		"data": []any{map[string]any{"id": "fakellm", "object": "model", "created": 0, "owned_by": "fakellm",
			"type": "model", "display_name": "fakellm", "created_at": "1970-01-01T00:00:00Z"}},
	})
}
