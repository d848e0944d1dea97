package main

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// defaultSentence answers a prompt without a directive.
const defaultSentence = "Hello from fakellm: no script in the prompt."

// maxQuotedResult bounds how much of a tool result the answer quotes, so a
// huge command output does not make a huge answer.
const maxQuotedResult = 2000

// turn is what the model reads of a request, whatever its API.
type turn struct {
	prompt     string   // the text of the last user message that is not a tool result
	toolResult *string  // set when the last message is a tool result
	tools      []string // the names of the tools the request offers
	freeform   []string // those of them that take free text (Responses API custom tools)
}

// toolCall is a call the model answers with.
type toolCall struct {
	name string
	args json.RawMessage // a JSON object
	// freeform marks a call of a free-text tool (a Responses API custom
	// tool such as Codex's apply_patch): its input is the directive's
	// string member freeformInput, not the JSON object.
	freeform bool
	input    string
}

// freeformInput is the member of a tool directive's JSON object that
// holds a free-text tool's input, so a patch with newlines fits on the
// directive's one line as a JSON string.
const freeformInput = "input"

// answer is what the model says: text in chunks, then at most one call.
type answer struct {
	chunks []string
	delay  time.Duration // before each chunk after the first
	call   *toolCall
}

func (a answer) text() string { return strings.Join(a.chunks, "") }

// shellTools are the shell tools of the agents fakellm serves, in the order
// one is picked from a request's tools: Claude Code's Bash, Codex's
// exec_command and older shell, OpenCode's and Pi's bash, Gemini CLI's
// run_shell_command.
var shellTools = []string{"Bash", "exec_command", "shell", "bash", "run_shell_command"}

// decide is the model: the same turn always gets the same answer.
func decide(t turn) answer {
	if t.toolResult != nil {
		if s, err := parseScript(t.prompt); err == nil && s.kind == kindTool && s.then != "" {
			return textAnswer(s.then)
		}
		r := *t.toolResult
		if len(r) > maxQuotedResult {
			r = r[:maxQuotedResult] + "..."
		}
		return textAnswer("tool said: " + r)
	}
	s, err := parseScript(t.prompt)
	if err != nil {
		return textAnswer("fakellm: bad script: " + err.Error())
	}
	switch s.kind {
	case kindText:
		return textAnswer(s.text)
	case kindTool:
		if len(t.tools) == 0 {
			return textAnswer("fakellm: the request offers no tools for " + s.name)
		}
		name := resolveTool(s.name, t.tools)
		if slices.Contains(t.freeform, name) {
			var in map[string]json.RawMessage
			var text string
			if json.Unmarshal(s.args, &in) != nil || json.Unmarshal(in[freeformInput], &text) != nil {
				return textAnswer("fakellm: the free-text tool " + name + " wants a string \"" + freeformInput + "\" member")
			}
			return answer{call: &toolCall{name: name, args: s.args, freeform: true, input: text}}
		}
		return answer{call: &toolCall{name: name, args: s.args}}
	case kindShell:
		for _, name := range shellTools {
			for _, offered := range t.tools {
				if offered == name {
					return answer{call: &toolCall{name: name, args: shellArgs(name, s.cmd)}}
				}
			}
		}
		return textAnswer("fakellm: the request offers no shell tool")
	case kindSlow:
		a := answer{delay: s.delay}
		for i := range s.chunks {
			w := s.text
			if i > 0 {
				w = " " + w
			}
			a.chunks = append(a.chunks, w)
		}
		return a
	default:
		return textAnswer(defaultSentence)
	}
}

// resolveTool picks the offered tool named name, else the first whose
// name ends in "_"+name (an MCP tool under its server's prefix, such as
// mcp__paperclip__op for op or paperclip__op), else name itself.
func resolveTool(name string, offered []string) string {
	for _, o := range offered {
		if o == name {
			return o
		}
	}
	for _, o := range offered {
		if strings.HasSuffix(o, "_"+name) {
			return o
		}
	}
	return name
}

// shellArgs are the arguments each shell tool takes. Codex's calls ask for
// escalated sandbox permissions, so that Codex asks permission and does not
// try a sandbox the test machine lacks.
func shellArgs(tool, cmd string) json.RawMessage {
	const why = "fakellm shell call"
	var v any
	switch tool {
	case "exec_command":
		v = map[string]any{"cmd": cmd, "sandbox_permissions": "require_escalated", "justification": why}
	case "shell":
		v = map[string]any{"command": []string{"bash", "-lc", cmd}, "sandbox_permissions": "require_escalated", "justification": why}
	default:
		v = map[string]any{"command": cmd, "description": why}
	}
	b, _ := json.Marshal(v)
	return b
}

// textAnswer splits text into word chunks (each word with its leading
// space), so every stream carries several deltas.
func textAnswer(text string) answer {
	var chunks []string
	start := 0
	for i := 1; i < len(text); i++ {
		if text[i] == ' ' && text[i-1] != ' ' {
			chunks = append(chunks, text[start:i])
			start = i
		}
	}
	chunks = append(chunks, text[start:])
	return answer{chunks: chunks}
}

// outputTokens is a deterministic token count for usage fields.
func (a answer) outputTokens() int {
	n := len(a.chunks)
	if a.call != nil {
		n += 1 + len(a.call.args)/4
	}
	return n
}
