package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// directiveMarker starts a script directive anywhere in the prompt text;
// the directive runs to the end of its line.
const directiveMarker = "FAKELLM:"

// Bounds of the slow directive: 1000 chunks of at most 10 s keep a
// mistyped script from holding a test for hours (the tests use
// 40 chunks x 250 ms).
const (
	maxSlowChunks = 1000
	maxSlowDelay  = 10 * time.Second
)

// thenWord starts a tool directive's answer to the tool's result.
const thenWord = "then "

// maxScriptLine bounds the directive line parsed; a prompt is bounded by
// the request body limit, this keeps the tool arguments small.
const maxScriptLine = 64 << 10

// kind is what a directive asks the model to answer.
type kind int

const (
	kindDefault kind = iota // no directive: the fixed sentence
	kindText                // text WORDS
	kindTool                // tool NAME [JSON object] [then WORDS]
	kindShell               // shell COMMAND
	kindSlow                // slow N MS [WORDS]
)

// script is one parsed directive.
type script struct {
	kind   kind
	text   string          // text, slow: the words to answer
	name   string          // tool: the tool name
	args   json.RawMessage // tool: a JSON object
	then   string          // tool: the words to answer once its result is back ("": quote the result)
	cmd    string          // shell: the command line
	chunks int             // slow: how many chunks
	delay  time.Duration   // slow: the pause before each chunk
}

var errNoDirective = errors.New("no directive")

// parseScript finds the first directive in prompt and parses it. A prompt
// without one gives kindDefault and no error; a malformed directive gives
// an error naming the problem (the model then answers the error as text).
func parseScript(prompt string) (script, error) {
	i := strings.Index(prompt, directiveMarker)
	if i < 0 {
		return script{kind: kindDefault}, nil
	}
	line := prompt[i+len(directiveMarker):]
	if j := strings.IndexAny(line, "\r\n"); j >= 0 {
		line = line[:j]
	}
	// A directive quoted whole loses its quotes: opencode run sends its
	// message argument as "FAKELLM: ...".
	if i > 0 && strings.ContainsRune("\"'`", rune(prompt[i-1])) {
		line = strings.TrimSuffix(strings.TrimRight(line, " \t"), prompt[i-1:i])
	}
	if len(line) > maxScriptLine {
		return script{}, fmt.Errorf("parse directive: longer than %d bytes", maxScriptLine)
	}
	verb, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	rest = strings.TrimSpace(rest)
	switch verb {
	case "text":
		return script{kind: kindText, text: rest}, nil
	case "tool":
		name, args, _ := strings.Cut(rest, " ")
		if name == "" {
			return script{}, errors.New("parse tool: no tool name")
		}
		args = strings.TrimSpace(args)
		if args == "" {
			args = "{}"
		}
		var obj map[string]json.RawMessage
		dec := json.NewDecoder(strings.NewReader(args))
		if err := dec.Decode(&obj); err != nil || obj == nil {
			return script{}, errors.New("parse tool: arguments are not a JSON object")
		}
		args, after := args[:dec.InputOffset()], strings.TrimSpace(args[dec.InputOffset():])
		then, hasThen := strings.CutPrefix(after, thenWord)
		if after != "" && (!hasThen || strings.TrimSpace(then) == "") {
			return script{}, errors.New("parse tool: text after the JSON object other than then WORDS")
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(args)); err != nil {
			return script{}, fmt.Errorf("parse tool: %w", err)
		}
		return script{kind: kindTool, name: name, args: buf.Bytes(), then: strings.TrimSpace(then)}, nil
	case "shell":
		if rest == "" {
			return script{}, errors.New("parse shell: no command")
		}
		return script{kind: kindShell, cmd: rest}, nil
	case "slow":
		f := strings.Fields(rest)
		if len(f) < 2 {
			return script{}, errors.New("parse slow: want N MS [WORDS]")
		}
		n, err := strconv.Atoi(f[0])
		if err != nil || n < 1 || n > maxSlowChunks {
			return script{}, fmt.Errorf("parse slow: chunk count not in 1..%d", maxSlowChunks)
		}
		ms, err := strconv.Atoi(f[1])
		if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > maxSlowDelay {
			return script{}, fmt.Errorf("parse slow: delay not in 0..%d ms", maxSlowDelay.Milliseconds())
		}
		words := strings.Join(f[2:], " ")
		if words == "" {
			words = "slow"
		}
		return script{kind: kindSlow, chunks: n, delay: time.Duration(ms) * time.Millisecond, text: words}, nil
	case "":
		return script{}, fmt.Errorf("parse directive: %w", errNoDirective)
	default:
		return script{}, errors.New("parse directive: unknown verb")
	}
}
