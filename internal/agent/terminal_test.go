package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/terminal"
)

// TestTools12_TerminalThroughAgent: with terminal advertised, fakeacp runs
// commands in client terminals (tools.md §9 scenario 12): a command that
// exits is reported with its output (its wait_for_exit answered after the
// read loop moved on), and one whose shell and grandchild ignore TERM is
// killed. Every terminal is released. Before, terminal/* got -32601.
func TestTools12_TerminalThroughAgent(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	require.Equal(t, "shell exit 3 output \"hi\\n\"\n", r.say("shell sleep 0.2; echo hi; exit 3"))
	require.Equal(t, "shell exit SIGKILL output \"hi\\n\"\n",
		r.say(`shell-kill trap "" TERM; sleep 300 & echo hi; sleep 300`))
	require.Zero(t, r.m.terms.Open(), "released")
	st, _ := r.sink.snapshot()
	require.True(t, st.Session.ClientCapabilities.Terminal, "the record holds what was advertised")
}

// TestTerminalReleasedAtSessionEnd: a terminal the agent left open is
// killed and released when the session closes.
func TestTerminalReleasedAtSessionEnd(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	r.m.mu.Lock()
	rec := r.m.cl.Record()
	params, _ := json.Marshal(map[string]any{"sessionId": rec.ACPSessionID, "command": "sleep", "args": []string{"300"}})
	r.m.mu.Unlock()
	r.handleAsAgent(t, provider.Inbound{Kind: provider.KindRequest, ID: json.RawMessage(`"t1"`), Method: terminal.MethodCreate, Params: params})
	require.Equal(t, 1, r.m.terms.Open())
	_, err := r.m.CloseSession(t.Context())
	require.NoError(t, err)
	require.Zero(t, r.m.terms.Open())
	eventually(t, "terminal files removed", func() bool {
		ents, _ := os.ReadDir(filepath.Join(r.state, terminal.Dir))
		return len(ents) == 0
	})
}

// TestClientTerminalSwitchOff: provider.clientCapabilities.terminal false
// advertises terminal: false, and terminal/* gets -32601 like any unknown method; a
// non-boolean switch fails run.prepare.
func TestClientTerminalSwitchOff(t *testing.T) {
	r := newRig(t)
	r.prepareDesc(map[string]any{"clientCapabilities": map[string]any{"terminal": false}})
	r.open()
	require.Equal(t, `clientCapabilities {"fs":{"readTextFile":true,"writeTextFile":true},"terminal":false}`, r.say("caps"))
	require.Contains(t, r.say("shell true"), "shell terminal/create failed -32601: ")
	_, err := parseDescriptor(json.RawMessage(`{"provider":{"kind":"acpx","agent":"claude","clientCapabilities":{"terminal":1}}}`), testDrivers)
	require.Error(t, err)
}

// TestTools12_TerminalSurvivesRestart: runnerd goes away (Close leaves the
// agent and its terminal running, as a SIGKILL does) while fakeacp waits
// for a terminal's exit; after the restart the terminal is adopted, the
// pending wait_for_exit is answered when the command exits, and the
// output read afterwards holds what was printed before and after.
func TestTools12_TerminalSurvivesRestart(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	gate := filepath.Join(t.TempDir(), "go")
	_, before := r.sink.snapshot()
	n := count(before, "run.terminal")
	turn := r.turn("shell echo before; while [ ! -e " + gate + " ]; do sleep 0.02; done; echo after")
	eventually(t, "a terminal with output and a pending wait", func() bool {
		ents, _ := os.ReadDir(filepath.Join(r.state, terminal.Dir))
		for _, e := range ents {
			b, _ := os.ReadFile(filepath.Join(r.state, terminal.Dir, e.Name()))
			if strings.Contains(string(b), `"waiters"`) && strings.HasSuffix(string(b), "before\n") {
				return true
			}
		}
		return false
	})
	r.m.Close()
	st, _ := r.sink.snapshot()
	r.m = NewManager(r.cfg, st) // the rig's cleanup shuts it down
	require.NoError(t, r.m.Start())
	require.Equal(t, 1, r.m.terms.Open(), "the terminal is adopted")
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	evs := r.sink.waitFor(t, "turn end", func(_ Stored, evs []provider.Event) bool { return count(evs, "run.terminal") > n })
	out := ""
	for _, e := range evs {
		if e.EventType == "item.delta" && e.TurnID == turn && e.Payload["kind"] == "assistant_message" {
			out += e.Payload["text"].(string)
		}
	}
	require.Equal(t, "shell exit 0 output \"before\\nafter\\n\"\n", out)
}

// handleAsAgent handles a client request as if the agent had sent it,
// running its operation the way the reader does (no answer line: the
// client knows no such pending request).
func (r *rig) handleAsAgent(t *testing.T, in provider.Inbound) {
	t.Helper()
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	_, op, ok := r.m.terminalLocked(in)
	if !ok {
		_, op, ok = r.m.clientFSLocked(in)
	}
	require.True(t, ok, "not a client request")
	if op != nil {
		_, ok = r.m.runClientOpLocked(r.m.proc, op)
		require.True(t, ok, "the process changed while the operation ran")
	}
}

// TestClientOpRunsWithoutTheLock: a client operation (a file write's
// fsyncs, a terminal's spawn) runs with the Manager's lock released, so
// commands and interrupts go on meanwhile; if the process changes while it
// runs, its answer is dropped and the reader stops.
func TestClientOpRunsWithoutTheLock(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	running, release := make(chan struct{}), make(chan struct{})
	op := &clientOp{in: provider.Inbound{Kind: provider.KindRequest, ID: json.RawMessage(`7`), Method: "fs/read_text_file"},
		what: "test", run: func() (any, bool, error) {
			close(running)
			<-release
			return map[string]string{"content": "x"}, true, nil
		}}
	done := make(chan bool, 1)
	go func() {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		_, ok := r.m.runClientOpLocked(r.m.proc, op)
		done <- ok
	}()
	<-running
	requireLockFree(t, r.m, "the Manager's lock is held while a client operation runs")
	close(release)
	require.True(t, <-done) // no answer line: the client knows no such pending request

	// The process goes away while the next operation runs.
	op.run = func() (any, bool, error) {
		r.m.mu.Lock()
		r.m.proc = nil
		r.m.mu.Unlock()
		return nil, true, nil
	}
	r.m.mu.Lock()
	p := r.m.proc
	lines, ok := r.m.runClientOpLocked(p, op)
	r.m.proc = p
	r.m.mu.Unlock()
	require.False(t, ok)
	require.Empty(t, lines)
}

// TestTerminalCreatedForAnEndedSessionIsReleased: a terminal whose create
// ran while its session ended is released, not left running unanswered.
func TestTerminalCreatedForAnEndedSessionIsReleased(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	rec := r.m.cl.Record()
	params, _ := json.Marshal(map[string]any{"sessionId": rec.ACPSessionID, "command": "sleep", "args": []string{"300"}})
	_, op, ok := r.m.terminalLocked(provider.Inbound{Kind: provider.KindRequest, ID: json.RawMessage(`"t1"`), Method: terminal.MethodCreate, Params: params})
	require.True(t, ok)
	require.NotNil(t, op)
	p := r.m.proc
	create := op.run
	op.run = func() (any, bool, error) {
		res, answer, err := create()
		r.m.mu.Lock()
		r.m.proc = nil // the session ends while the terminal starts
		r.m.mu.Unlock()
		return res, answer, err
	}
	_, ok = r.m.runClientOpLocked(p, op)
	r.m.proc = p
	require.False(t, ok)
	require.Zero(t, r.m.terms.Open(), "the terminal is released")
}
