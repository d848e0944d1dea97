package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/quote"
)

// Script bounds (beyond: prpctl's own; the core journal holds 500 commands,
// prp.md §7.1).
const (
	// maxScriptSteps bounds one script (the core journal holds 500 commands).
	maxScriptSteps = 500
	// maxScriptLineBytes bounds one script line (a command must fit the 1 MiB frame, prp.md §1.4).
	maxScriptLineBytes = 1 << 20
	// maxSleep bounds one sleep step so a script cannot stall prpctl unbounded.
	maxSleep = 10 * time.Minute
)

// step is one script action. Exactly one field is set.
type step struct {
	// Command queues a command of this type with Payload (default {}).
	Command string          `json:"command,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// SleepMs pauses the script.
	SleepMs int64 `json:"sleepMs,omitempty"`
	// Ping sends a PRP ping.
	Ping bool `json:"ping,omitempty"`
	// Revoke revokes the lease at this epoch.
	Revoke int64 `json:"revoke,omitempty"`
	// Drop drops the current connection as a network failure would.
	Drop bool `json:"drop,omitempty"`
	// Wait waits until every command queued so far has a result.
	Wait bool `json:"wait,omitempty"`
	// Attach queues a warm run.attach (prp.md §9.5) handing the runner to
	// the named identity and connection; parseStep turns it into a Command.
	Attach *attachStep `json:"attach,omitempty"`
	// autoConnection: the attach step's connection was "auto"; execute
	// fills in this session's own route for the new run.
	autoConnection bool
	// ToolResults sets the standing result per operationId that answers
	// the agent's tool calls (semantic_tool.input); ToolErrors queues
	// isError results, each answering one call before the standing one.
	ToolResults map[string]json.RawMessage `json:"toolResults,omitempty"`
	ToolErrors  map[string]json.RawMessage `json:"toolErrors,omitempty"`
	// WaitEvent waits for the next committed event of this type: the n-th
	// waitEvent of a type waits for the n-th such event of the run.
	WaitEvent string `json:"waitEvent,omitempty"`
	// Resolve answers the latest runtime request still open with the
	// choice of this kind (see resolveAction).
	Resolve string `json:"resolve,omitempty"`
}

// attachStep names the next run: its six identity fields and its
// connection ({mode:"connect", connectUrl[, caBundlePath]} or {mode:"listen",
// listenAddress, listenPort, listenPath}), or "auto": the route of this
// prpctl session for the new run (its core's dial route, or the listening
// runnerd's socket with the new run's path), which a script cannot know in
// advance. Payload holds the rest of the run.attach payload (the provider
// seed, which must equal the current one).
type attachStep struct {
	Identity   json.RawMessage `json:"identity"`
	Connection json.RawMessage `json:"connection"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// errScript marks a malformed script; its text names the line, never its content.
var errScript = errors.New("invalid script")

// parseScript reads JSON lines (blank lines and lines starting with # are
// skipped). Each line is one step object.
func parseScript(r io.Reader) ([]step, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxScriptLineBytes)
	var steps []step
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		s, err := parseStep(b)
		if err != nil {
			return nil, fmt.Errorf("parse script line %d: %w", line, err)
		}
		if len(steps) == maxScriptSteps {
			return nil, fmt.Errorf("parse script: %w: more than %d steps", errScript, maxScriptSteps)
		}
		steps = append(steps, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read script: %w", err)
	}
	return steps, nil
}

func parseStep(b []byte) (step, error) {
	var s step
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return step{}, fmt.Errorf("%w: not a step object", errScript)
	}
	if dec.More() {
		return step{}, fmt.Errorf("%w: trailing data", errScript)
	}
	set := 0
	for _, on := range []bool{s.Command != "", s.SleepMs != 0, s.Ping, s.Revoke != 0, s.Drop, s.Wait, s.Attach != nil,
		s.ToolResults != nil || s.ToolErrors != nil, s.WaitEvent != "", s.Resolve != ""} {
		if on {
			set++
		}
	}
	switch {
	case set != 1:
		return step{}, fmt.Errorf("%w: exactly one action per line", errScript)
	case s.Payload != nil && s.Command == "":
		return step{}, fmt.Errorf("%w: payload without command", errScript)
	case s.SleepMs < 0 || time.Duration(s.SleepMs)*time.Millisecond > maxSleep:
		return step{}, fmt.Errorf("%w: sleepMs outside 0..%d", errScript, maxSleep.Milliseconds())
	case s.Revoke < 0:
		return step{}, fmt.Errorf("%w: revoke epoch must be positive", errScript)
	case s.WaitEvent != "" && checkTypeName(s.WaitEvent) != nil:
		return step{}, fmt.Errorf("%w: waitEvent type empty, too long or has spaces", errScript)
	case s.Resolve != "" && resolveAction(s.Resolve) == "":
		return step{}, fmt.Errorf("%w: resolve must be allow, allow_always, reject or cancel", errScript)
	}
	for _, m := range []map[string]json.RawMessage{s.ToolResults, s.ToolErrors} {
		for op, r := range m {
			if op == "" || r == nil || string(r) == "null" {
				return step{}, fmt.Errorf("%w: a tool result needs an operationId and a JSON value", errScript)
			}
		}
	}
	if s.Attach != nil {
		p, err := attachPayload(*s.Attach)
		if err != nil {
			return step{}, err
		}
		s.autoConnection = string(bytes.TrimSpace(s.Attach.Connection)) == `"auto"`
		s.Command, s.Payload, s.Attach = prp.CommandRunAttach, p, nil
	}
	if s.Command != "" {
		if err := checkCommandType(s.Command); err != nil {
			return step{}, err
		}
		if s.Payload == nil {
			s.Payload = json.RawMessage(`{}`)
		}
		if !isObject(s.Payload) {
			return step{}, fmt.Errorf("%w: payload is not an object", errScript)
		}
	}
	return s, nil
}

// attachPayload builds the run.attach payload of an attach step and checks
// its paperclipNextAuthority shape as the core will.
func attachPayload(a attachStep) (json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if a.Payload != nil {
		if !isObject(a.Payload) {
			return nil, fmt.Errorf("%w: attach payload is not an object", errScript)
		}
		_ = json.Unmarshal(a.Payload, &m)
	}
	if _, ok := m["paperclipNextAuthority"]; ok {
		return nil, fmt.Errorf("%w: attach payload must not carry paperclipNextAuthority", errScript)
	}
	auto := string(bytes.TrimSpace(a.Connection)) == `"auto"`
	if !isObject(a.Identity) || (!isObject(a.Connection) && !auto) {
		return nil, fmt.Errorf("%w: attach needs an identity object and a connection object or \"auto\"", errScript)
	}
	conn := a.Connection
	if auto { // checked with a stand-in route; execute puts the real one in
		conn = json.RawMessage(`{"mode":"connect","connectUrl":"ws://127.0.0.1:1/api/runner/v1/connect/x"}`)
	}
	m["paperclipNextAuthority"] = jsonenc.MustMarshal(map[string]json.RawMessage{"identity": a.Identity, "connection": conn})
	p := jsonenc.MustMarshal(m)
	if _, _, err := prp.ParseNextAuthority(p); err != nil {
		return nil, fmt.Errorf("%w: attach: %w", errScript, err)
	}
	return p, nil
}

// withConnection replaces a run.attach payload's
// paperclipNextAuthority.connection by route(the new runId).
func withConnection(payload json.RawMessage, route func(runID string) json.RawMessage) (json.RawMessage, error) {
	next, _, err := prp.ParseNextAuthority(payload)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return nil, err
	}
	m["paperclipNextAuthority"] = jsonenc.MustMarshal(map[string]any{"identity": next.Identity, "connection": route(next.Identity.RunID)})
	return jsonenc.MustMarshal(m), nil
}

// parseCommandFlag parses --command TYPE or TYPE=JSON.
func parseCommandFlag(v string) (step, error) {
	typ, payload, hasPayload := strings.Cut(v, "=")
	if err := checkCommandType(typ); err != nil {
		return step{}, err
	}
	s := step{Command: typ, Payload: json.RawMessage(`{}`)}
	if hasPayload {
		if !isObject([]byte(payload)) {
			return step{}, fmt.Errorf("%w: --command %s: payload is not a JSON object", errScript, typ)
		}
		s.Payload = json.RawMessage(payload)
	}
	return s, nil
}

// checkTypeName checks the shape of a command or event type name.
func checkTypeName(typ string) error {
	if typ == "" || len(typ) > 64 || strings.ContainsFunc(typ, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return errScript
	}
	return nil
}

// checkCommandType refuses a type prp.md §7.5 does not list, naming it,
// before anything starts: runnerd would answer only "unknown type".
func checkCommandType(typ string) error {
	if err := checkTypeName(typ); err != nil {
		return fmt.Errorf("%w: command type empty, too long or has spaces", errScript)
	}
	if _, ok := prp.LookupCommand(typ); !ok {
		return fmt.Errorf("%w: unknown command type %s (known: %s)", errScript, quote.Text(typ), strings.Join(prp.CommandTypes(), ", "))
	}
	return nil
}

func isObject(b []byte) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil && m != nil
}
