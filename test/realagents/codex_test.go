package realagents

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// codexCLI is the real `codex app-server` (@openai/codex, pinned in
// test/realagents/npm/codexcli) driven by runnerd's own Codex driver
// (provider.kind "codex", codex.md §7). Its HOME gets no config: under
// kind codex runnerd writes the model provider into the session's
// isolated CODEX_HOME from OPENAI_BASE_URL and OPENAI_API_KEY in its own
// environment (codex.md §2), so those two are all it is given.
var codexCLI = agentSpec{name: "codex", prefix: "codexcli",
	argv: func(dir string) []string {
		return []string{filepath.Join(dir, "node_modules", ".bin", "codex"), "app-server"}
	},
	configure: func(t *testing.T, home, url string) []string {
		return []string{"OPENAI_BASE_URL=" + url + "/v1", "OPENAI_API_KEY=" + fakeKey}
	},
}

// codexModel is the model runnerd asks for: Codex knows gpt-5's family
// (fakellm answers any model).
const codexModel = "gpt-5"

// TestRealCodexAppServer drives the real codex app-server under kind
// codex through runnerd and pcwrap, offline against fakellm, in one
// session: a text turn; automatic tool calls under approvalPolicy never
// (a shell command through exec_command, and a Paperclip catalog tool
// through dynamicTools: item/tool/call → semantic_tool.input → the core's
// semantic_tool.result); turn.interrupt mid-stream; a re-open
// on the live app-server and another turn; session.close, a re-open
// (thread/resume in a new app-server) and another turn; a SIGKILL of runnerd mid-turn with
// the app-server re-adopted and a further turn.
// Permission cases apply to codex-acp only. Every committed event
// validates against the reference schemas and no process is left behind.
func TestRealCodexAppServer(t *testing.T) {
	spec := codexCLI
	dir := agentDir(t, spec)
	slots <- struct{}{}
	defer func() { <-slots }()
	schemas := prpschema.Load(t)
	r := newRig(t, spec, dir)
	argv := spec.argv(dir)
	// A wrapper records what runnerd writes to the app-server, so the test
	// can tell that the re-open resumed the thread.
	wire := t.TempDir()
	wrapper := filepath.Join(wire, "codex-tee")
	script := fmt.Sprintf("#!/bin/sh\ntee -a %q/in.ndjson | %q \"$@\"\n", wire, argv[0])
	require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o755))
	proc := r.start()
	// A dotted operation id (tools.md §1): Codex refuses any dynamic tool
	// name outside [A-Za-z0-9_-], so runnerd offers it as issue_comment
	// and maps the model's call back to issue.comment.
	op := catalog.Operation{OperationID: "issue.comment", Version: 1, Description: "Comment on the task.",
		InputSchema:    json.RawMessage(`{"type":"object","required":["body"],"properties":{"body":{"type":"string"}}}`),
		ResponseSchema: json.RawMessage(`{"type":"object"}`)}
	terminals := 0
	turn := func(textIn string) []prptest.Event {
		t.Helper()
		r.must("turn.start", map[string]any{"text": textIn})
		terminals++
		return turnEvents(r.waitCount("run.terminal", terminals), terminals)
	}
	completed := func(evs []prptest.Event) {
		t.Helper()
		require.Len(t, prptest.OfType(evs, "turn.completed"), 1, "turn events: %v", types(evs))
	}
	const a = "codexcli"
	t.Cleanup(func() {
		timings.Lock()
		defer timings.Unlock()
		var rows []string
		for _, row := range timings.rows {
			if strings.HasPrefix(row, a+" ") {
				rows = append(rows, row)
			}
		}
		t.Logf("codexcli × case timings:\n%s", strings.Join(rows, "\n"))
	})

	step(t, a, "session.open", func() {
		r.must("run.prepare", map[string]any{
			"provider": map[string]any{"kind": "codex", "command": wrapper, "args": argv[1:],
				"cwd": t.TempDir(), "approvalPolicy": "never", "model": codexModel},
			"authorizedTools": map[string]any{"schema": catalog.Schema, "schemaVersion": 1,
				"catalogDigest": catalog.Digest([]catalog.Operation{op}), "operations": []catalog.Operation{op}},
		})
		r.must("session.open", map[string]any{"reuse": "same_session"})
	})
	step(t, a, "text", func() {
		evs := turn("FAKELLM: text pcrunner real codex says hi")
		completed(evs)
		require.Contains(t, text(t, evs), "real codex says hi")
	})
	step(t, a, "tool exec_command", func() {
		// exec_command with plain arguments: fakellm's "shell" directive
		// asks for escalation, which Codex refuses under approvalPolicy
		// never (see TestCodex07_RealCLI).
		evs := turn(`FAKELLM: tool exec_command {"cmd":"printf 'pcrunner-%d\\n' 42"}`)
		completed(evs)
		require.Empty(t, prptest.OfType(evs, "runtime_request.created"))
		require.Contains(t, text(t, evs), shellOutput)
	})
	step(t, a, "tool catalog", func() {
		r.must("turn.start", map[string]any{"text": `FAKELLM: tool issue_comment {"body":"from codex"}`})
		terminals++
		evs := r.waitCount("semantic_tool.input", 1)
		st := payload(t, prptest.OfType(evs, "semantic_tool.input")[0])["semantic_tool"].(map[string]any)
		require.Equal(t, "issue.comment", st["operationId"])
		r.must("semantic_tool.result", map[string]any{"callId": st["callId"], "operationId": st["operationId"],
			"inputDigest": st["content"].(map[string]any)["digest"], "result": map[string]any{"id": "comment-13"}, "isError": false})
		evs = turnEvents(r.waitCount("run.terminal", terminals), terminals)
		completed(evs)
		require.Contains(t, text(t, evs), "comment-13", "the next message quotes the result")
	})
	step(t, a, "interrupt", func() {
		before := len(prptest.OfType(r.events(), "item.delta"))
		r.must("turn.start", map[string]any{"text": "FAKELLM: slow 40 250 tick"})
		terminals++
		r.waitCount("item.delta", before+1)
		r.must("turn.interrupt", map[string]any{})
		evs := turnEvents(r.waitCount("run.terminal", terminals), terminals)
		require.Len(t, prptest.OfType(evs, "turn.interrupted"), 1, "turn events: %v", types(evs))
	})
	step(t, a, "re-open + text", func() {
		r.must("session.open", map[string]any{"reuse": "same_session"})
		evs := turn("FAKELLM: text back after the interrupt")
		completed(evs)
		require.Contains(t, text(t, evs), "after the interrupt")
	})
	step(t, a, "close + resume + text", func() {
		// With the app-server still running, a re-open keeps its loaded
		// thread (session.resumed, nothing written); after session.close
		// ends its process group, a new app-server resumes the thread.
		require.True(t, reopen(t, r), "the app-server resumes its thread")
		evs := turn("FAKELLM: text back after the resume")
		completed(evs)
		require.Contains(t, text(t, evs), "after the resume")
		methods := wroteMethods(t, filepath.Join(wire, "in.ndjson"))
		require.Equal(t, 1, countOf(methods, "thread/start"), "methods: %v", methods)
		require.Equal(t, 1, countOf(methods, "thread/resume"), "the re-open resumes the thread: %v", methods)
		require.Contains(t, methods, "thread/read")
	})
	step(t, a, "runnerd SIGKILL", func() {
		pgid := r.childPgid()
		before := len(prptest.OfType(r.events(), "item.delta"))
		r.must("turn.start", map[string]any{"text": "FAKELLM: slow 12 250 kept"})
		terminals++
		r.waitCount("item.delta", before+1)
		require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
		waitExit(t, proc)
		proc = r.start()
		r.waitCount("runner.reconciled", 1)
		rec := prptest.OfType(r.waitCount("session.reconciled", 1), "session.reconciled")
		require.Equal(t, "adopted", payload(t, rec[0])["outcome"])
		evs := turnEvents(r.waitCount("run.terminal", terminals), terminals)
		t.Logf("codex app-server: the turn runnerd was killed in settled: %v", types(evs))
		require.Equal(t, pgid, r.childPgid(), "the same app-server process")
		require.NoError(t, syscall.Kill(-pgid, 0), "the app-server still runs")
		evs = turn("FAKELLM: text after the restart")
		completed(evs)
		require.Contains(t, text(t, evs), "after the restart")
	})
	require.NoError(t, proc.Process.Signal(syscall.SIGTERM))
	waitExit(t, proc)
	validateEvents(t, schemas, r.core.Snapshot().Events)
}

// wroteMethods lists the JSON-RPC methods in a recorded direction of the
// wire (one message a line).
func wroteMethods(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m struct {
			Method string `json:"method"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Method != "" {
			out = append(out, m.Method)
		}
	}
	return out
}

func countOf(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// codexPatchModel is a model of Codex's bundled catalog, for which Codex
// offers apply_patch (as a freeform tool: a Responses API custom tool
// fakellm calls with the patch as its input); for gpt-5, absent from the
// catalog, it offers none.
const codexPatchModel = "gpt-5.5"

// TestRealCodexAppServerApplyPatch: the real codex app-server's model
// (fakellm) edits a file in its cwd through Codex's apply_patch tool.
// Codex's turn/diff/updated makes the harness set (harness_reported); the
// runner's verified set (the last workspace.change.updated, then
// workspace.diff.recorded) holds the file with its exact counts; every
// workspace event precedes turn.completed and validates against the
// reference schemas (workspace.md §4.5, §5).
func TestRealCodexAppServerApplyPatch(t *testing.T) {
	spec := codexCLI
	dir := agentDir(t, spec)
	slots <- struct{}{}
	defer func() { <-slots }()
	schemas := prpschema.Load(t)
	r := newRig(t, spec, dir)
	proc := r.start()
	cwd := t.TempDir()
	notes := filepath.Join(cwd, "notes.md")
	require.NoError(t, os.WriteFile(notes, []byte("# Notes\none\ntwo\n"), 0o644))
	const a = "codexcli"
	step(t, a, "patch session.open", func() {
		r.must("run.prepare", map[string]any{"provider": map[string]any{"kind": "codex",
			"command": spec.argv(dir)[0], "args": spec.argv(dir)[1:], "cwd": cwd,
			"approvalPolicy": "never", "model": codexPatchModel}})
		r.must("session.open", map[string]any{"reuse": "same_session"})
	})
	step(t, a, "apply_patch turn", func() {
		patch := "*** Begin Patch\n*** Update File: notes.md\n@@\n # Notes\n-one\n+uno\n two\n+three\n*** End Patch\n"
		args, err := json.Marshal(map[string]string{"input": patch})
		require.NoError(t, err)
		r.must("turn.start", map[string]any{"text": "FAKELLM: tool apply_patch " + string(args) + " then Patched the notes."})
		evs := turnEvents(r.waitCount("run.terminal", 1), 1)
		require.Len(t, prptest.OfType(evs, "turn.completed"), 1, "turn events: %v", types(evs))
		require.Contains(t, text(t, evs), "Patched the notes.")
		b, err := os.ReadFile(notes)
		require.NoError(t, err)
		require.Equal(t, "# Notes\nuno\ntwo\nthree\n", string(b), "Codex applied the patch")

		ws := workspaceBeforeEnd(t, evs)
		updates := prptest.OfType(ws, "workspace.change.updated")
		require.GreaterOrEqual(t, len(updates), 2, "a harness set, then the verified set: %v", types(ws))
		harness := payload(t, updates[0])
		require.Equal(t, "harness_reported", harness["source"], "Codex's turn/diff/updated")
		verified := payload(t, updates[len(updates)-1])
		require.Equal(t, "runner_verified", verified["source"], "the last change.updated is the verified set")
		recorded := prptest.OfType(ws, "workspace.diff.recorded")
		require.Len(t, recorded, 1)
		for _, p := range []map[string]any{harness, verified, payload(t, recorded[0])} {
			files := p["files"].([]any)
			require.Len(t, files, 1, "source %v", p["source"])
			f := files[0].(map[string]any)
			require.Equal(t, "notes.md", f["path"])
			require.Equal(t, "modify", f["operation"])
			require.EqualValues(t, 2, f["additions"])
			require.EqualValues(t, 1, f["deletions"])
			require.Contains(t, f["diff"], "-one\n+uno\n two\n+three\n")
			totals := p["totals"].(map[string]any)
			require.EqualValues(t, 1, totals["files"])
			require.EqualValues(t, 2, totals["additions"])
			require.EqualValues(t, 1, totals["deletions"])
		}
		require.Equal(t, true, payload(t, recorded[0])["complete"])
	})
	require.NoError(t, proc.Process.Signal(syscall.SIGTERM))
	waitExit(t, proc)
	validateEvents(t, schemas, r.core.Snapshot().Events)
}
