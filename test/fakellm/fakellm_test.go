package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit)) }

// testWait bounds every wait on the fake server: its start, an answer, its
// exit.
const testWait = 20 * time.Second

// fake is one fakellm process.
type fake struct {
	url    string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan error
	client *http.Client
}

// startFake runs the built binary with args and reads its URL line.
func startFake(t *testing.T, args ...string) *fake {
	t.Helper()
	cmd := exec.Command(testbin.Build(t, "test/fakellm"), args...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	f := &fake{cmd: cmd, stdin: stdin, exited: make(chan error, 1),
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: testWait}}
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, r) // until the process closes stdout
		f.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = stdin.Close()
		f.waitExit(t)
	})
	select {
	case line := <-lines:
		u, ok := strings.CutPrefix(strings.TrimSpace(line), "FAKELLM_URL=")
		require.True(t, ok, "first stdout line %q", line)
		f.url = u
	case <-time.After(testWait):
		t.Fatal("no FAKELLM_URL line")
	}
	return f
}

// waitExit waits, bounded, for the process to end and returns its error.
func (f *fake) waitExit(t *testing.T) error {
	t.Helper()
	select {
	case err, ok := <-f.exited:
		if ok {
			close(f.exited)
		}
		return err
	case <-time.After(testWait):
		t.Fatal("fakellm did not exit")
		return nil
	}
}

func (f *fake) post(t *testing.T, path string, body any, header ...string) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, f.url+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := f.client.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return resp
}

func decodeJSON(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	return m
}

// event is one Server-Sent Event.
type event struct {
	name string
	data map[string]any
	raw  string
}

// readSSE decodes a whole event stream: "event:" and "data:" fields, blank
// line separated.
func readSSE(t *testing.T, resp *http.Response) []event {
	t.Helper()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var evs []event
	var cur event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.raw != "" {
				if cur.raw != "[DONE]" {
					require.NoError(t, json.Unmarshal([]byte(cur.raw), &cur.data), cur.raw)
				}
				evs = append(evs, cur)
			}
			cur = event{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.raw += strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("bad SSE line %q", line)
		}
	}
	require.NoError(t, sc.Err())
	require.Empty(t, cur.raw, "a trailing event without its blank line")
	return evs
}

func names(evs []event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.name)
	}
	return out
}

// at walks a decoded JSON value by keys and indexes.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

// compress collapses runs of the same name, so a sequence check does not
// depend on how many deltas a text takes.
func compress(ns []string) []string {
	var out []string
	for _, n := range ns {
		if len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	return out
}

const toolPrompt = `Please run it.
FAKELLM: tool Bash {"command": "ls -l é", "description": "list"}
(agent context after the directive)`

var toolArgs = map[string]any{"command": "ls -l é", "description": "list"}

func TestAnthropicMessagesStreamAndToolRoundTrip(t *testing.T) {
	f := startFake(t)
	tools := []any{map[string]any{"name": "Read"}, map[string]any{"name": "Bash"}}
	resp := f.post(t, "/v1/messages?beta=true", map[string]any{"model": "claude-x", "stream": true, "max_tokens": 100,
		"tools": tools, "messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
			map[string]any{"type": "text", "text": toolPrompt}}},
			// Claude Code sends a system message after the user's.
			map[string]any{"role": "system", "content": "Available agent types: FAKELLM: text not this"}}},
		"x-api-key", "sk-ant-test")
	evs := readSSE(t, resp)
	require.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, compress(names(evs)))
	for _, e := range evs {
		require.Equal(t, e.name, e.data["type"], "the event name is the data's type")
	}
	require.Equal(t, "tool_use", at(evs[2].data, "content_block", "type"))
	require.Equal(t, "Bash", at(evs[2].data, "content_block", "name"))
	toolID := at(evs[2].data, "content_block", "id").(string)
	var partial string
	for _, e := range evs {
		if e.name == "content_block_delta" {
			require.Equal(t, "input_json_delta", at(e.data, "delta", "type"))
			partial += at(e.data, "delta", "partial_json").(string)
		}
	}
	var args map[string]any
	require.NoError(t, json.Unmarshal([]byte(partial), &args))
	require.Equal(t, toolArgs, args)
	md := evs[len(evs)-2].data
	require.Equal(t, "tool_use", at(md, "delta", "stop_reason"))
	require.NotNil(t, at(md, "usage", "output_tokens"))
	require.NotNil(t, at(evs[0].data, "message", "usage", "input_tokens"))

	// The tool result comes back: the model quotes it.
	resp = f.post(t, "/v1/messages", map[string]any{"model": "claude-x", "stream": true, "tools": tools,
		"messages": []any{
			map[string]any{"role": "user", "content": toolPrompt},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": toolID, "name": "Bash", "input": args}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": toolID,
				"content": []any{map[string]any{"type": "text", "text": "file-a file-b"}}}}},
		}}, "authorization", "Bearer tok")
	evs = readSSE(t, resp)
	require.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, compress(names(evs)))
	var text string
	for _, e := range evs {
		if e.name == "content_block_delta" {
			require.Equal(t, "text_delta", at(e.data, "delta", "type"))
			text += at(e.data, "delta", "text").(string)
		}
	}
	require.Equal(t, "tool said: file-a file-b", text)
	require.Equal(t, "end_turn", at(evs[len(evs)-2].data, "delta", "stop_reason"))

	// Not streamed: one Message.
	m := decodeJSON(t, f.post(t, "/v1/messages", map[string]any{"model": "claude-x", "messages": []any{
		map[string]any{"role": "user", "content": "FAKELLM: text plain answer"}}}))
	require.Equal(t, "message", m["type"])
	require.Equal(t, "plain answer", at(m, "content", 0, "text"))
	require.Equal(t, "end_turn", m["stop_reason"])

	for _, method := range []string{http.MethodHead, http.MethodGet} {
		req, err := http.NewRequest(method, f.url+"/", nil)
		require.NoError(t, err)
		r, err := f.client.Do(req)
		require.NoError(t, err)
		_ = r.Body.Close()
		require.Equal(t, http.StatusOK, r.StatusCode, method)
	}
}

// TestAnthropicToolThen: a tool directive's then WORDS are the answer
// once the tool's result is back (the prompt is the user message before
// the results, however many tool rounds came between).
func TestAnthropicToolThen(t *testing.T) {
	f := startFake(t)
	prompt := `FAKELLM: tool Write {"file_path":"/w/n.md","content":"x"} then Wrote [n](n.md).`
	use := map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "t1", "name": "Write", "input": map[string]any{}}}}
	result := map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "t1", "content": "File created"}}}
	m := decodeJSON(t, f.post(t, "/v1/messages", map[string]any{"model": "claude-x", "tools": []any{map[string]any{"name": "Write"}},
		"messages": []any{map[string]any{"role": "user", "content": prompt}}}))
	require.Equal(t, "tool_use", at(m, "content", 0, "type"))
	require.Equal(t, "Write", at(m, "content", 0, "name"))
	m = decodeJSON(t, f.post(t, "/v1/messages", map[string]any{"model": "claude-x", "tools": []any{map[string]any{"name": "Write"}},
		"messages": []any{map[string]any{"role": "user", "content": prompt}, use, result, use, result}}))
	require.Equal(t, "Wrote [n](n.md).", at(m, "content", 0, "text"))
	require.Equal(t, "end_turn", m["stop_reason"])
}

func TestOpenAIResponsesStreamAndToolRoundTrip(t *testing.T) {
	f := startFake(t)
	tools := []any{
		map[string]any{"type": "function", "name": "exec_command", "parameters": map[string]any{}},
		map[string]any{"type": "custom", "name": "apply_patch"},
	}
	resp := f.post(t, "/v1/responses", map[string]any{"model": "gpt-x", "stream": true, "tools": tools,
		"input": []any{
			map[string]any{"type": "message", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": "sys"}}},
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "FAKELLM: shell echo hi"}}},
		}}, "authorization", "Bearer sk-test")
	evs := readSSE(t, resp)
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.function_call_arguments.delta", "response.function_call_arguments.done",
		"response.output_item.done", "response.completed"}, compress(names(evs)))
	for i, e := range evs {
		require.Equal(t, e.name, e.data["type"])
		require.EqualValues(t, i, e.data["sequence_number"])
	}
	added := evs[2].data
	require.Equal(t, "function_call", at(added, "item", "type"))
	require.Equal(t, "exec_command", at(added, "item", "name"))
	callID := at(added, "item", "call_id").(string)
	itemID := at(added, "item", "id").(string)
	var args string
	var done map[string]any
	for _, e := range evs {
		switch e.name {
		case "response.function_call_arguments.delta":
			require.Equal(t, itemID, e.data["item_id"])
			args += e.data["delta"].(string)
		case "response.function_call_arguments.done":
			done = e.data
		}
	}
	require.Equal(t, args, done["arguments"])
	require.JSONEq(t, `{"cmd":"echo hi","sandbox_permissions":"require_escalated","justification":"fakellm shell call"}`, args)
	completed := evs[len(evs)-1].data
	require.Equal(t, "completed", at(completed, "response", "status"))
	require.NotNil(t, at(completed, "response", "usage", "total_tokens"))
	require.Equal(t, callID, at(completed, "response", "output", 0, "call_id"))

	resp = f.post(t, "/v1/responses", map[string]any{"model": "gpt-x", "stream": true, "tools": tools,
		"input": []any{
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "FAKELLM: shell echo hi"}}},
			map[string]any{"type": "function_call", "call_id": callID, "name": "exec_command", "arguments": args},
			map[string]any{"type": "function_call_output", "call_id": callID, "output": "hi"},
		}})
	evs = readSSE(t, resp)
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.content_part.added", "response.output_text.delta", "response.output_text.done",
		"response.content_part.done", "response.output_item.done", "response.completed"}, compress(names(evs)))
	var text string
	for _, e := range evs {
		if e.name == "response.output_text.delta" {
			text += e.data["delta"].(string)
		}
	}
	require.Equal(t, "tool said: hi", text)
	require.Equal(t, "message", at(evs[len(evs)-1].data, "response", "output", 0, "type"))
	require.Equal(t, text, at(evs[len(evs)-1].data, "response", "output", 0, "content", 0, "text"))

	m := decodeJSON(t, f.post(t, "/v1/responses", map[string]any{"model": "gpt-x", "input": "FAKELLM: text not streamed"}))
	require.Equal(t, "completed", m["status"])
	require.Equal(t, "not streamed", at(m, "output", 0, "content", 0, "text"))
}

// TestOpenAIResponsesFreeformTool: a tool directive naming a tool the
// request offers as a custom (freeform) tool, such as Codex's apply_patch,
// is answered with a custom_tool_call whose input is the directive's
// "input" string; the call's output gets the directive's then WORDS.
func TestOpenAIResponsesFreeformTool(t *testing.T) {
	f := startFake(t)
	tools := []any{
		map[string]any{"type": "function", "name": "exec_command", "parameters": map[string]any{}},
		map[string]any{"type": "custom", "name": "apply_patch", "format": map[string]any{"type": "grammar"}},
	}
	const patch = "*** Begin Patch\n*** Update File: n.md\n@@\n-one\n+uno é\n*** End Patch\n"
	args, err := json.Marshal(map[string]string{"input": patch})
	require.NoError(t, err)
	prompt := "FAKELLM: tool apply_patch " + string(args) + " then Patched."
	user := map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": prompt}}}
	evs := readSSE(t, f.post(t, "/v1/responses", map[string]any{"model": "gpt-x", "stream": true, "tools": tools,
		"input": []any{user}}))
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
		"response.output_item.done", "response.completed"}, compress(names(evs)))
	added := evs[2].data
	require.Equal(t, "custom_tool_call", at(added, "item", "type"))
	require.Equal(t, "apply_patch", at(added, "item", "name"))
	itemID, callID := at(added, "item", "id").(string), at(added, "item", "call_id").(string)
	var input string
	for _, e := range evs {
		switch e.name {
		case "response.custom_tool_call_input.delta":
			require.Equal(t, itemID, e.data["item_id"])
			input += e.data["delta"].(string)
		case "response.custom_tool_call_input.done":
			require.Equal(t, patch, e.data["input"])
		case "response.output_item.done":
			require.Equal(t, patch, at(e.data, "item", "input"))
			require.Equal(t, callID, at(e.data, "item", "call_id"))
		}
	}
	require.Equal(t, patch, input)
	require.Equal(t, "custom_tool_call", at(evs[len(evs)-1].data, "response", "output", 0, "type"))

	// The call's output gets the then WORDS.
	m := decodeJSON(t, f.post(t, "/v1/responses", map[string]any{"model": "gpt-x", "tools": tools,
		"input": []any{user,
			map[string]any{"type": "custom_tool_call", "call_id": callID, "name": "apply_patch", "input": patch},
			map[string]any{"type": "custom_tool_call_output", "call_id": callID, "output": "Success."},
		}}))
	require.Equal(t, "Patched.", at(m, "output", 0, "content", 0, "text"))

	// A freeform call needs its input as a string.
	m = decodeJSON(t, f.post(t, "/v1/responses", map[string]any{"model": "gpt-x", "tools": tools,
		"input": "FAKELLM: tool apply_patch {\"patch\":\"x\"}"}))
	require.Contains(t, at(m, "output", 0, "content", 0, "text"), "wants a string \"input\" member")
}

func TestOpenAIChatCompletionsStreamAndToolRoundTrip(t *testing.T) {
	f := startFake(t)
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "bash"}}}
	resp := f.post(t, "/v1/chat/completions", map[string]any{"model": "m", "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "tools": tools,
		"messages": []any{map[string]any{"role": "system", "content": "sys"},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "FAKELLM: shell ls"}}}}})
	evs := readSSE(t, resp)
	require.Equal(t, "[DONE]", evs[len(evs)-1].raw)
	evs = evs[:len(evs)-1]
	var name, callID, args, finish string
	for _, e := range evs {
		require.Empty(t, e.name, "chat chunks are data-only events")
		require.Equal(t, "chat.completion.chunk", e.data["object"])
		tcs, _ := at(e.data, "choices", 0, "delta", "tool_calls").([]any)
		for _, tc := range tcs {
			if n, ok := at(tc, "function", "name").(string); ok {
				name, callID = n, at(tc, "id").(string)
			}
			args += at(tc, "function", "arguments").(string)
		}
		if fr, ok := at(e.data, "choices", 0, "finish_reason").(string); ok {
			finish = fr
		}
	}
	require.Equal(t, "bash", name)
	require.JSONEq(t, `{"command":"ls","description":"fakellm shell call"}`, args)
	require.Equal(t, "tool_calls", finish)
	require.NotNil(t, at(evs[len(evs)-1].data, "usage", "total_tokens"), "the usage chunk comes last")

	resp = f.post(t, "/v1/chat/completions", map[string]any{"model": "m", "stream": true, "tools": tools,
		"messages": []any{map[string]any{"role": "user", "content": "FAKELLM: shell ls"},
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": callID, "type": "function",
				"function": map[string]any{"name": "bash", "arguments": args}}}},
			map[string]any{"role": "tool", "tool_call_id": callID, "content": "a.txt"},
			map[string]any{"role": "system", "content": "late system text"}}})
	evs = readSSE(t, resp)
	require.Equal(t, "[DONE]", evs[len(evs)-1].raw)
	var text string
	for _, e := range evs[:len(evs)-1] {
		if c, ok := at(e.data, "choices", 0, "delta", "content").(string); ok {
			text += c
		}
	}
	require.Equal(t, "tool said: a.txt", text)
	require.Equal(t, "stop", at(evs[len(evs)-2].data, "choices", 0, "finish_reason"))

	r, err := f.client.Get(f.url + "/v1/models")
	require.NoError(t, err)
	m := decodeJSON(t, r)
	_ = r.Body.Close()
	require.Equal(t, "list", m["object"])
	require.Equal(t, "fakellm", at(m, "data", 0, "id"))
}

func TestGeminiStreamAndToolRoundTrip(t *testing.T) {
	f := startFake(t)
	tools := []any{map[string]any{"functionDeclarations": []any{map[string]any{"name": "read_file"}, map[string]any{"name": "run_shell_command"}}}}
	resp := f.post(t, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", map[string]any{"tools": tools,
		"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": "FAKELLM: shell pwd"}}}}},
		"x-goog-api-key", "AIza-test")
	evs := readSSE(t, resp)
	require.Len(t, evs, 1)
	call := at(evs[0].data, "candidates", 0, "content", "parts", 0, "functionCall")
	require.Equal(t, "run_shell_command", at(call, "name"))
	require.Equal(t, map[string]any{"command": "pwd", "description": "fakellm shell call"}, at(call, "args"))
	require.Equal(t, "STOP", at(evs[0].data, "candidates", 0, "finishReason"))
	require.NotNil(t, at(evs[0].data, "usageMetadata", "totalTokenCount"))

	resp = f.post(t, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", map[string]any{"tools": tools,
		"contents": []any{
			map[string]any{"role": "user", "parts": []any{map[string]any{"text": "FAKELLM: shell pwd"}}},
			map[string]any{"role": "model", "parts": []any{map[string]any{"functionCall": call}}},
			map[string]any{"role": "user", "parts": []any{map[string]any{"functionResponse": map[string]any{
				"name": "run_shell_command", "response": map[string]any{"output": "/work"}}}}},
		}})
	evs = readSSE(t, resp)
	var text string
	for i, e := range evs {
		text += at(e.data, "candidates", 0, "content", "parts", 0, "text").(string)
		if i < len(evs)-1 {
			require.Nil(t, at(e.data, "candidates", 0, "finishReason"))
		}
	}
	require.Greater(t, len(evs), 1, "text streams in several chunks")
	require.Equal(t, "tool said: /work", text)
	require.Equal(t, "STOP", at(evs[len(evs)-1].data, "candidates", 0, "finishReason"))

	m := decodeJSON(t, f.post(t, "/v1beta/models/gemini-x:generateContent", map[string]any{
		"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": "FAKELLM: text whole"}}}}}))
	require.Equal(t, "whole", at(m, "candidates", 0, "content", "parts", 0, "text"))
}

// jsonSchemas are schemas a side call may ask for: Gemini CLI's router
// (reasoning and an enum choice), nesting, arrays with a minimum length,
// references, bounded numbers, const, anyOf and type lists.
var jsonSchemas = []string{
	`{"type":"object","properties":{"reasoning":{"type":"string"},"model_choice":{"type":"string","enum":["flash","pro"]}},"required":["reasoning","model_choice"]}`,
	`{"type":"object","properties":{"a":{"type":"array","minItems":2,"items":{"type":"object","properties":{"n":{"type":"integer","minimum":3,"maximum":9}},"required":["n"]}},"b":{"type":"number","exclusiveMinimum":1.5},"c":{"type":"boolean"}},"required":["a","b","c"],"additionalProperties":false}`,
	`{"$defs":{"item":{"type":"string","minLength":12}},"type":"object","properties":{"x":{"$ref":"#/$defs/item"},"y":{"const":42},"z":{"anyOf":[{"type":"null"},{"type":"string"}]},"w":{"type":["null","integer"]},"v":{"type":"string","maxLength":3}},"required":["x","y","z","w","v"]}`,
	`{"allOf":[{"type":"object","properties":{"p":{"type":"string"}},"required":["p"]},{"properties":{"q":{"type":"integer"}},"required":["q"]}]}`,
	`{"type":"array","items":{"type":"string"}}`,
	`{"type":"object","properties":{"lo":{"type":"integer","maximum":-3},"hi":{"type":"number","exclusiveMaximum":0.5},"mid":{"type":"integer","exclusiveMinimum":7,"exclusiveMaximum":9}},"required":["lo","hi","mid"]}`,
	// Gemini CLI 0.61's numerical router, as recorded.
	`{"type":"OBJECT","properties":{"complexity_reasoning":{"type":"STRING"},"complexity_score":{"type":"INTEGER","description":"Complexity score from 1-100."}},"required":["complexity_reasoning","complexity_score"]}`,
}

// TestGeminiJSONSchemaAnswer: a request asking for application/json with a
// schema gets JSON valid under it, in either field and either method.
func TestGeminiJSONSchemaAnswer(t *testing.T) {
	f := startFake(t)
	for i, schema := range jsonSchemas {
		for _, field := range []string{"responseJsonSchema", "responseSchema"} {
			sch := schema
			if field == "responseSchema" { // the OpenAPI subset spells types in upper case
				for _, ty := range []string{"object", "string", "array", "integer", "number", "boolean"} {
					sch = strings.ReplaceAll(sch, `"type":"`+ty+`"`, `"type":"`+strings.ToUpper(ty)+`"`)
				}
			}
			req := map[string]any{
				"contents":         []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": "FAKELLM: text not json"}}}},
				"generationConfig": map[string]any{"responseMimeType": "application/json", field: json.RawMessage(sch)},
			}
			for _, method := range []string{"generateContent", "streamGenerateContent?alt=sse"} {
				resp := f.post(t, "/v1beta/models/gemini-flash-lite:"+method, req)
				var text string
				if strings.HasPrefix(method, "stream") {
					for _, e := range readSSE(t, resp) {
						text += at(e.data, "candidates", 0, "content", "parts", 0, "text").(string)
					}
				} else {
					text = at(decodeJSON(t, resp), "candidates", 0, "content", "parts", 0, "text").(string)
				}
				validate(t, schema, text, i)
			}
		}
	}
}

func validate(t *testing.T, schema, instance string, i int) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	lowerTypes(doc) // the Gemini API's OpenAPI subset spells types in upper case
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("schema.json", doc))
	sch, err := c.Compile("schema.json")
	require.NoError(t, err)
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(instance))
	require.NoError(t, err, "schema %d: answer %q is not JSON", i, instance)
	require.NoError(t, sch.Validate(v), "schema %d: answer %s", i, instance)
}

func lowerTypes(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if str, ok := e.(string); ok && k == "type" {
				x[k] = strings.ToLower(str)
			} else {
				lowerTypes(e)
			}
		}
	case []any:
		for _, e := range x {
			lowerTypes(e)
		}
	}
}

func TestSlowStream(t *testing.T) {
	f := startFake(t)
	resp := f.post(t, "/v1/messages", map[string]any{"model": "m", "stream": true, "messages": []any{
		map[string]any{"role": "user", "content": "FAKELLM: slow 5 1 tick"}}})
	var deltas []string
	for _, e := range readSSE(t, resp) {
		if e.name == "content_block_delta" {
			deltas = append(deltas, at(e.data, "delta", "text").(string))
		}
	}
	require.Equal(t, []string{"tick", " tick", " tick", " tick", " tick"}, deltas)

	// A client that goes away mid-stream (an interrupt) ends the stream;
	// the server keeps serving.
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/chat/completions",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"FAKELLM: slow 40 250"}]}`))
	require.NoError(t, err)
	r, err := f.client.Do(req)
	require.NoError(t, err)
	line, err := bufio.NewReader(r.Body).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "chat.completion.chunk")
	cancel()
	_ = r.Body.Close()
	m := decodeJSON(t, f.post(t, "/v1/messages", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}}))
	require.Equal(t, defaultSentence, at(m, "content", 0, "text"))
}

// TestIdleExit: with no request for --idle, fakellm exits 0 by itself; a
// request resets the clock.
func TestIdleExit(t *testing.T) {
	f := startFake(t, "--idle", "300ms")
	r, err := f.client.Get(f.url + "/")
	require.NoError(t, err)
	_ = r.Body.Close()
	require.NoError(t, f.waitExit(t))
}

func TestExitOnStdinEOF(t *testing.T) {
	f := startFake(t, "--exit-on-stdin-eof")
	require.NoError(t, f.stdin.Close())
	require.NoError(t, f.waitExit(t))
}

// TestLoopbackOnly: fakellm listens on 127.0.0.1 and nowhere else.
func TestLoopbackOnly(t *testing.T) {
	f := startFake(t)
	u, err := url.Parse(f.url)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", u.Hostname())
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	tried := 0
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.To4() == nil {
			continue
		}
		tried++
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ipn.IP.String(), u.Port()), testWait)
		if err == nil {
			_ = c.Close()
			t.Fatalf("fakellm answers on %s", ipn.IP)
		}
	}
	for _, host := range []string{"127.0.0.2", "[::1]"} {
		c, err := net.DialTimeout("tcp", host+":"+u.Port(), testWait)
		if err == nil {
			_ = c.Close()
			t.Fatalf("fakellm answers on %s", host)
		}
	}
	t.Logf("checked %d non-loopback addresses", tried)
}

// TestRecordHasNoKeys: --record writes each request, with no credential
// header or query parameter; --addr-file holds the URL line.
func TestRecordHasNoKeys(t *testing.T) {
	dir := t.TempDir()
	rec, addr := filepath.Join(dir, "rec.ndjson"), filepath.Join(dir, "addr")
	f := startFake(t, "--record", rec, "--addr-file", addr)
	b, err := os.ReadFile(addr)
	require.NoError(t, err)
	require.Equal(t, "FAKELLM_URL="+f.url+"\n", string(b))
	f.post(t, "/v1/messages", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}},
		"x-api-key", "secret-anthropic-1", "Authorization", "Bearer secret-bearer-2")
	f.post(t, "/v1beta/models/g:generateContent?key=secret-query-3&alt=json", map[string]any{"contents": []any{}},
		"x-goog-api-key", "secret-goog-4")
	require.NoError(t, f.stdin.Close())
	_ = f.cmd.Process.Signal(os.Interrupt)
	require.NoError(t, f.waitExit(t))
	b, err = os.ReadFile(rec)
	require.NoError(t, err)
	require.NotContains(t, string(b), "secret-")
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 2)
	var first, second map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &second))
	require.Equal(t, "POST", first["method"])
	require.Equal(t, "/v1/messages", first["path"])
	require.Equal(t, "hi", at(first, "body", "messages", 0, "content"))
	require.Equal(t, "alt=json", second["query"])
	require.Equal(t, "application/json", at(first, "headers", "Content-Type"))
}

// TestSameRequestsSameBytes: ids count per process and nothing holds the
// time, so two servers answer the same requests with the same bytes.
func TestSameRequestsSameBytes(t *testing.T) {
	var outs [2][]byte
	for i := range outs {
		f := startFake(t)
		for _, prompt := range []string{"FAKELLM: tool Bash {}", "FAKELLM: text again"} {
			resp := f.post(t, "/v1/responses", map[string]any{"stream": true, "tools": []any{map[string]any{"type": "function", "name": "Bash"}},
				"input": prompt})
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			outs[i] = append(outs[i], b...)
		}
	}
	require.Equal(t, string(outs[0]), string(outs[1]))
}

// TestShellToolPerAgent: the shell directive calls each agent's shell tool
// with the arguments it takes.
func TestShellToolPerAgent(t *testing.T) {
	for tool, want := range map[string]string{
		"Bash":              `{"command":"make test","description":"fakellm shell call"}`,
		"exec_command":      `{"cmd":"make test","sandbox_permissions":"require_escalated","justification":"fakellm shell call"}`,
		"shell":             `{"command":["bash","-lc","make test"],"sandbox_permissions":"require_escalated","justification":"fakellm shell call"}`,
		"bash":              `{"command":"make test","description":"fakellm shell call"}`,
		"run_shell_command": `{"command":"make test","description":"fakellm shell call"}`,
	} {
		a := decide(turn{prompt: "FAKELLM: shell make test", tools: []string{"read", tool}})
		require.NotNil(t, a.call, tool)
		require.Equal(t, tool, a.call.name)
		require.JSONEq(t, want, string(a.call.args), tool)
	}
	a := decide(turn{prompt: "FAKELLM: shell ls", tools: []string{"read"}})
	require.Nil(t, a.call)
	require.Equal(t, "fakellm: the request offers no shell tool", a.text())
	a = decide(turn{prompt: "FAKELLM: tool issue_get {\"id\":1}", tools: []string{"Bash", "mcp__paperclip__issue_get"}})
	require.Equal(t, "mcp__paperclip__issue_get", a.call.name)
	a = decide(turn{prompt: "FAKELLM: tool issue_get", tools: nil})
	require.Nil(t, a.call, "no tools offered: text")
	r := strings.Repeat("y", 3000)
	a = decide(turn{prompt: "FAKELLM: tool x", toolResult: &r})
	require.Nil(t, a.call, "a tool result is answered with text, whatever the prompt")
	require.Len(t, a.text(), len("tool said: ")+maxQuotedResult+len("..."))
}

func TestParseScript(t *testing.T) {
	for in, want := range map[string]script{
		"no directive":                     {kind: kindDefault},
		"x FAKELLM: text hello  world\ny":  {kind: kindText, text: "hello  world"},
		"FAKELLM: tool T":                  {kind: kindTool, name: "T", args: json.RawMessage(`{}`)},
		`FAKELLM: tool T { "a" : [1, 2] }`: {kind: kindTool, name: "T", args: json.RawMessage(`{"a":[1,2]}`)},
		"FAKELLM: shell ls -l | wc\r\n":    {kind: kindShell, cmd: "ls -l | wc"},
		"FAKELLM: slow 40 250":             {kind: kindSlow, chunks: 40, delay: 250 * time.Millisecond, text: "slow"},
		"FAKELLM: slow 2 0 a b":            {kind: kindSlow, chunks: 2, text: "a b"},
		`"FAKELLM: shell echo "hi""`:       {kind: kindShell, cmd: `echo "hi"`},
		"`FAKELLM: text a` b":              {kind: kindText, text: "a` b"},
		`say "FAKELLM: text quoted" `:      {kind: kindText, text: "quoted"},
		`FAKELLM: tool W {"a":1}  then  wrote [n](n.md)`: {kind: kindTool, name: "W", args: json.RawMessage(`{"a":1}`),
			then: "wrote [n](n.md)"},
	} {
		got, err := parseScript(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"FAKELLM:", "FAKELLM: dance", "FAKELLM: tool", "FAKELLM: tool T [1]",
		"FAKELLM: tool T {} {}", "FAKELLM: tool T {} then", "FAKELLM: tool T {} now x", "FAKELLM: tool T {", "FAKELLM: tool T null", "FAKELLM: shell", "FAKELLM: slow 1",
		"FAKELLM: slow 0 1", "FAKELLM: slow 1001 1", "FAKELLM: slow 1 10001", "FAKELLM: slow 1 -1"} {
		_, err := parseScript(bad)
		require.Error(t, err, bad)
	}
}

// FuzzParseScript: any prompt parses without panic; a tool directive's
// arguments are always a compact JSON object, and a slow one is in bounds.
func FuzzParseScript(f *testing.F) {
	for _, s := range []string{"hi", "FAKELLM: text a", "FAKELLM: tool T {\"a\":1}", "FAKELLM: shell ls",
		"FAKELLM: slow 3 10 w", "FAKELLM: tool T {\"a\":\"\xff\"}", "FAKELLM: tool T {}}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, prompt string) {
		s, err := parseScript(prompt)
		if err != nil {
			a := decide(turn{prompt: prompt})
			if !strings.HasPrefix(a.text(), "fakellm: bad script: ") {
				t.Fatalf("a bad script answers %q", a.text())
			}
			return
		}
		switch s.kind {
		case kindTool:
			var obj map[string]any
			if json.Unmarshal(s.args, &obj) != nil || obj == nil {
				t.Fatalf("tool args %q not an object", s.args)
			}
		case kindSlow:
			if s.chunks < 1 || s.chunks > maxSlowChunks || s.delay < 0 || s.delay > maxSlowDelay {
				t.Fatalf("slow out of bounds: %+v", s)
			}
		}
		_ = decide(turn{prompt: prompt, tools: []string{"Bash"}})
	})
}

// FuzzInstanceOf: any schema gives an instance without panic or endless
// recursion.
func FuzzInstanceOf(f *testing.F) {
	for _, s := range jsonSchemas {
		f.Add(s)
	}
	f.Add(`{"$ref":"#"}`)
	f.Add(`{"type":"array","minItems":1e9,"items":{"$ref":"#"}}`)
	f.Add(`{"$defs":{"a":{"type":"array","minItems":16,"items":{"$ref":"#/$defs/a"}}},"$ref":"#/$defs/a"}`)
	f.Fuzz(func(t *testing.T, schema string) {
		if _, err := json.Marshal(instanceOf(json.RawMessage(schema))); err != nil {
			t.Fatalf("instance does not encode: %v", err)
		}
	})
}

// TestInstanceNumberIsOne: where a schema allows it a number is 1, since
// Gemini CLI's router refuses a complexity score of 0 that its schema
// allows; bounds still win.
func TestInstanceNumberIsOne(t *testing.T) {
	got := instanceOf(json.RawMessage(jsonSchemas[len(jsonSchemas)-1]))
	require.Equal(t, map[string]any{"complexity_reasoning": "fakellm", "complexity_score": 1.0}, got)
	got = instanceOf(json.RawMessage(jsonSchemas[len(jsonSchemas)-2]))
	require.Equal(t, map[string]any{"lo": -3.0, "hi": 0.5 - 1e-6, "mid": 8.0}, got)
}
