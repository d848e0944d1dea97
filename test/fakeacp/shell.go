package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Bounds of the shell scenario's wait for first output before a kill.
const (
	shellOutputPolls = 500
	shellOutputPoll  = 20 * time.Millisecond
)

// shell runs script in a client terminal as an execute tool call: create
// (sh -c script), then for a kill wait until it printed something and
// terminal/kill it; then wait_for_exit, output, release. It says
// "shell exit <code|signal> output <quoted output>" or
// "shell <method> failed <code>: <message>".
func (t *turn) shell(kill bool, script string) {
	id := t.toolCall("execute", "Run "+script, nil)
	fail := func(method string, m message) {
		t.toolDone(id, "failed", fmt.Sprintf("%s failed: %d", method, m.Error.Code))
		t.say(fmt.Sprintf("shell %s failed %d: %s\n", method, m.Error.Code, m.Error.Message))
	}
	m := t.call("terminal/create", map[string]any{"command": "sh", "args": []any{"-c", script}})
	if m.Error != nil {
		fail("terminal/create", m)
		return
	}
	var r struct {
		TerminalID string `json:"terminalId"`
	}
	_ = json.Unmarshal(m.Result, &r)
	ref := func() map[string]any { return map[string]any{"terminalId": r.TerminalID} }
	type output struct {
		Output    string `json:"output"`
		Truncated bool   `json:"truncated"`
	}
	if kill {
		for range shellOutputPolls {
			var o output
			if m := t.call("terminal/output", ref()); m.Error == nil && json.Unmarshal(m.Result, &o) == nil && o.Output != "" {
				break
			}
			time.Sleep(shellOutputPoll)
		}
		if m := t.call("terminal/kill", ref()); m.Error != nil {
			fail("terminal/kill", m)
			return
		}
	}
	w := t.call("terminal/wait_for_exit", ref())
	if w.Error != nil {
		fail("terminal/wait_for_exit", w)
		return
	}
	var st struct {
		ExitCode *int    `json:"exitCode"`
		Signal   *string `json:"signal"`
	}
	_ = json.Unmarshal(w.Result, &st)
	status := "unknown"
	switch {
	case st.Signal != nil:
		status = *st.Signal
	case st.ExitCode != nil:
		status = strconv.Itoa(*st.ExitCode)
	}
	var o output
	if m := t.call("terminal/output", ref()); m.Error == nil {
		_ = json.Unmarshal(m.Result, &o)
	}
	if m := t.call("terminal/release", ref()); m.Error != nil {
		fail("terminal/release", m)
		return
	}
	t.toolDone(id, "completed", o.Output)
	t.say(fmt.Sprintf("shell exit %s output %q\n", status, o.Output))
}
