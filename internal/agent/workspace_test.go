package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// wsTurn runs one turn and returns its events, from turn.started to
// run.terminal.
func (r *rig) wsTurn(text string) (string, []provider.Event) {
	r.t.Helper()
	_, before := r.sink.snapshot()
	n := count(before, "run.terminal")
	turn := r.turn(text)
	evs := r.sink.waitFor(r.t, "turn end", func(_ Stored, evs []provider.Event) bool { return count(evs, "run.terminal") > n })
	var out []provider.Event
	for _, e := range evs[len(before):] {
		if e.TurnID == turn {
			out = append(out, e)
		}
	}
	return turn, out
}

func isWorkspace(e provider.Event) bool {
	return strings.HasPrefix(e.EventType, "workspace.")
}

func workspaceEvents(evs []provider.Event) []provider.Event {
	var out []provider.Event
	for _, e := range evs {
		if isWorkspace(e) || (e.EventType == prp.EventHarnessDiagnostic && strings.HasPrefix(code(e), "workspace_")) {
			out = append(out, e)
		}
	}
	return out
}

func code(e provider.Event) string { s, _ := e.Payload["code"].(string); return s }

func files(e provider.Event) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, f := range e.Payload["files"].([]any) {
		m := f.(map[string]any)
		out[m["path"].(string)] = m
	}
	return out
}

// requireEndOrder: the workspace events come before the turn's terminal
// event, and the last workspace.change.updated is the verified set.
func requireEndOrder(t *testing.T, evs []provider.Event) {
	t.Helper()
	end := turnEnd(evs, evs[0].TurnID)
	require.GreaterOrEqual(t, end, 0)
	for _, e := range evs[end:] {
		require.False(t, isWorkspace(e), "%s after the turn's end", e.EventType)
	}
}

// TestWorkspace05_HarnessChangeSet: an edit tool call with diff content
// → a harness_reported change set with the turn's id, P2, counts; a
// second edit of the file in the turn → both hunks in one entry; the
// next turn has another changeSetId; no payload has itemId or
// providerTurnId; the envelope keeps the turn's ids; the verified set
// comes last before the turn's end (scenario 12).
func TestWorkspace05_HarnessChangeSet(t *testing.T) {
	r := newRig(t)
	lines := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "a.txt"), []byte(lines), 0o644))
	r.prepare()
	r.open()
	edit1 := strings.Replace(lines, "2\n", "two\n", 1)
	edit2 := strings.Replace(edit1, "9\n", "nine\n", 1)
	esc := func(s string) string { return strings.ReplaceAll(s, "\n", `\n`) }
	turn, evs := r.wsTurn("edit a.txt " + esc(edit1) + " ;; sleep 1100 ;; edit a.txt " + esc(edit2))
	ws := workspaceEvents(evs)
	require.Equal(t, []string{"workspace.change.updated", "workspace.change.updated", "workspace.change.updated",
		"workspace.diff.recorded", "workspace.file.referenced"}, types(ws))
	for i, e := range ws[:2] {
		require.Equal(t, provider.P2, e.Priority)
		require.Equal(t, turn+":workspace", e.Payload["changeSetId"])
		require.EqualValues(t, i+1, e.Payload["revision"])
		require.Equal(t, "harness_reported", e.Payload["source"])
		require.Equal(t, false, e.Payload["complete"])
	}
	a1, a2 := files(ws[0])["a.txt"], files(ws[1])["a.txt"]
	require.EqualValues(t, 1, a1["additions"])
	require.EqualValues(t, 2, a2["additions"])
	require.EqualValues(t, 2, a2["deletions"])
	require.Equal(t, 2, strings.Count(a2["diff"].(string), "\n@@ "))
	verified := ws[2]
	require.Equal(t, provider.P1, verified.Priority)
	require.Equal(t, "runner_verified", verified.Payload["source"])
	require.EqualValues(t, 3, verified.Payload["revision"])
	require.EqualValues(t, 2, files(verified)["a.txt"]["additions"], "the verified diff of the whole turn")
	require.Equal(t, true, ws[3].Payload["complete"])
	require.Equal(t, "runner_verified", ws[3].Payload["source"])
	require.Equal(t, "a.txt", ws[4].Payload["path"])
	requireEndOrder(t, evs)
	ids := map[any]bool{}
	for _, e := range ws {
		if e.EventType != "workspace.file.referenced" {
			ids[e.Payload["changeSetId"]] = true
		}
		require.Equal(t, turn, e.TurnID)
		require.NotContains(t, e.Payload, "itemId")
		require.NotContains(t, e.Payload, "providerTurnId")
	}
	require.Len(t, ids, 1, "one change set per turn")
	prpschema.RequireValidEvents(t, evs)

	turn2, evs2 := r.wsTurn("edit b.txt new")
	ws2 := workspaceEvents(evs2)
	require.NotEmpty(t, ws2)
	require.Equal(t, turn2+":workspace", ws2[0].Payload["changeSetId"])
	require.NotEqual(t, turn, turn2)
	require.Equal(t, "create", files(ws2[0])["b.txt"]["operation"])
}

// TestWorkspace06_DeleteLocation: a read tool with a location → no
// workspace event; a delete tool with only a location → a delete entry,
// stats and diff null; the verified set agrees.
func TestWorkspace06_DeleteLocation(t *testing.T) {
	r := newRig(t)
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "gone.txt"), []byte("bye\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "keep.txt"), []byte("keep\n"), 0o644))
	r.prepare()
	r.open()
	_, evs := r.wsTurn("read " + filepath.Join(r.cwd, "keep.txt"))
	require.Empty(t, workspaceEvents(evs))
	_, evs = r.wsTurn("delete gone.txt")
	ws := workspaceEvents(evs)
	require.Equal(t, []string{"workspace.change.updated", "workspace.change.updated", "workspace.diff.recorded"}, types(ws))
	g := files(ws[0])["gone.txt"]
	require.Equal(t, "delete", g["operation"])
	require.Nil(t, g["additions"])
	require.Nil(t, g["diff"])
	require.Equal(t, "delete", files(ws[1])["gone.txt"]["operation"])
	require.EqualValues(t, 1, files(ws[1])["gone.txt"]["deletions"])
	prpschema.RequireValidEvents(t, evs)
}

// TestWorkspace07_ShellChanges: changes made by a shell (no tool edit)
// → the verified change.updated (P1) then diff.recorded, in path order,
// before turn.completed; skipped dirs and runnerd's state never appear
// (scenario 8).
func TestWorkspace07_ShellChanges(t *testing.T) {
	r := newRig(t)
	for name, content := range map[string]string{"old.txt": "a\nb\n", "gone.txt": "x\n", "r.txt": "move me\n"} {
		require.NoError(t, os.WriteFile(filepath.Join(r.cwd, name), []byte(content), 0o644))
	}
	r.prepare()
	r.open()
	_, evs := r.wsTurn("shell printf 'export {}\\n' > new.ts; printf 'a\\nB\\n' > old.txt; rm gone.txt; mv r.txt r2.txt; " +
		"mkdir -p node_modules/x .git target .venv __pycache__; touch node_modules/x/i.js .git/HEAD target/t .venv/v __pycache__/c; ln -s /etc/passwd pw")
	ws := workspaceEvents(evs)
	require.Equal(t, []string{"workspace.change.updated", "workspace.diff.recorded"}, types(ws))
	require.Equal(t, provider.P1, ws[0].Priority)
	var order []string
	for _, f := range ws[1].Payload["files"].([]any) {
		m := f.(map[string]any)
		order = append(order, m["path"].(string)+":"+m["operation"].(string))
	}
	require.Equal(t, []string{"gone.txt:delete", "new.ts:create", "old.txt:modify", "r2.txt:rename"}, order)
	require.Equal(t, "r.txt", files(ws[1])["r2.txt"]["previousPath"])
	requireEndOrder(t, evs)
	require.Equal(t, "turn.completed", evs[turnEnd(evs, evs[0].TurnID)].EventType)
	prpschema.RequireValidEvents(t, evs)
}

// TestWorkspace10_NothingChanged: no change and no tool edit → no
// workspace event; an edit that is undone → the verified empty set.
func TestWorkspace10_NothingChanged(t *testing.T) {
	r := newRig(t)
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "a.txt"), []byte("same\n"), 0o644))
	r.prepare()
	r.open()
	_, evs := r.wsTurn("echo hi")
	require.Empty(t, workspaceEvents(evs))
	_, evs = r.wsTurn(`edit a.txt other\n ;; shell printf 'same\n' > a.txt`)
	ws := workspaceEvents(evs)
	require.Equal(t, []string{"workspace.change.updated", "workspace.change.updated", "workspace.diff.recorded", "workspace.file.referenced"}, types(ws))
	require.Empty(t, ws[1].Payload["files"])
	require.Empty(t, ws[2].Payload["files"])
	require.Equal(t, "runner_verified", ws[2].Payload["source"])
	prpschema.RequireValidEvents(t, evs)
}

// TestWorkspace11_BaselineTimeout: a baseline past its bound (a walk
// bound too short to finish) → workspace_walk_capped, the turn proceeds,
// and the harness set is recorded as harness_reported.
func TestWorkspace11_BaselineTimeout(t *testing.T) {
	r := newRig(t, func(c *Config) { c.WorkspaceWalkTimeout = time.Nanosecond })
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "a.txt"), []byte("a\n"), 0o644))
	r.prepare()
	r.open()
	_, evs := r.wsTurn("edit a.txt b")
	ws := workspaceEvents(evs)
	// The references' reads share the (here impossibly short) bound: none.
	require.Equal(t, []string{"harness.diagnostic", "workspace.change.updated", "workspace.diff.recorded"}, types(ws))
	require.Equal(t, diagWalkCapped, code(ws[0]))
	require.Equal(t, "harness_reported", ws[2].Payload["source"])
	require.Equal(t, true, ws[2].Payload["complete"])
	require.EqualValues(t, 1, ws[2].Payload["revision"])
	require.Equal(t, "turn.completed", evs[turnEnd(evs, evs[0].TurnID)].EventType)
	prpschema.RequireValidEvents(t, evs)
}

// TestWorkspace13_FileReference: the final message's links → one
// reference per file beneath the root, none for a URL or a path out.
func TestWorkspace13_FileReference(t *testing.T) {
	r := newRig(t)
	require.NoError(t, os.MkdirAll(filepath.Join(r.cwd, "docs"), 0o755))
	guide := []byte("# Guide\nline two\n")
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "docs/guide.md"), guide, 0o644))
	r.prepare()
	r.open()
	turn, evs := r.wsTurn("echo See [the guide](docs/guide.md#L2), [x](https://e.com/a.md), [out](/etc/passwd), [dup](docs/guide.md#L2)")
	ws := workspaceEvents(evs)
	require.Equal(t, []string{"workspace.file.referenced"}, types(ws))
	p := ws[0].Payload
	require.Equal(t, "docs/guide.md", p["path"])
	require.EqualValues(t, 2, p["line"])
	require.Equal(t, "the guide", p["displayName"])
	require.Equal(t, "document", p["presentation"])
	require.Equal(t, "text/markdown", p["mediaType"])
	sum := sha256.Sum256(guide)
	require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), p["contentDigest"])
	id := sha256.Sum256([]byte(turn + "\x00docs/guide.md:2"))
	require.Equal(t, turn+":file:"+hex.EncodeToString(id[:])[:24], p["referenceId"])
	require.Equal(t, provider.P1, ws[0].Priority)
	requireEndOrder(t, evs)
	prpschema.RequireValidEvents(t, evs)
}

// TestWorkspace02_Unavailable: a cwd that is gone → one
// workspace_unavailable diagnostic, no workspace event later.
func TestWorkspace02_Unavailable(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	require.NoError(t, os.RemoveAll(r.cwd))
	_, evs := r.wsTurn("echo hi")
	ws := workspaceEvents(evs)
	require.Equal(t, []string{"harness.diagnostic"}, types(ws))
	require.Equal(t, diagWorkspaceUnavailable, code(ws[0]))
	_, evs = r.wsTurn("echo again [x](x.md)")
	require.Empty(t, workspaceEvents(evs))
}

// TestWorkspace26_AfterWalkCapped: a turn that leaves more than 2,000
// files → no verified set, workspace_walk_capped, the harness set
// recorded as harness_reported; never an empty verified set.
func TestWorkspace26_AfterWalkCapped(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	_, evs := r.wsTurn(`edit a.txt x ;; shell mkdir many && cd many && seq 1 2001 | xargs touch`)
	ws := workspaceEvents(evs)
	require.Equal(t, []string{"workspace.change.updated", "harness.diagnostic", "workspace.diff.recorded", "workspace.file.referenced"}, types(ws))
	require.Equal(t, diagWalkCapped, code(ws[1]))
	require.Equal(t, "harness_reported", ws[2].Payload["source"])
	require.NotEmpty(t, ws[2].Payload["files"])
	prpschema.RequireValidEvents(t, evs)
}

// TestWorkspace31_HarnessRate: 20 tool edits in a burst → at most one
// harness snapshot per second of the turn plus the flush before the
// verified set; the last holds all 20 files.
func TestWorkspace31_HarnessRate(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	var steps []string
	for i := range 20 {
		steps = append(steps, "edit f"+strings.Repeat("x", i)+".txt v")
	}
	_, evs := r.wsTurn(strings.Join(steps, " ;; "))
	var harness []provider.Event
	for _, e := range workspaceEvents(evs) {
		if e.EventType == "workspace.change.updated" && e.Payload["source"] == "harness_reported" {
			harness = append(harness, e)
		}
	}
	require.GreaterOrEqual(t, len(harness), 1)
	require.LessOrEqual(t, len(harness), 3, "a burst well under 2 s: the first, at most one a second later, and the flush")
	require.Len(t, harness[len(harness)-1].Payload["files"], 20)
}

// TestWorkspace29_FrameBound: with a small payload bound the later
// files' diff text is dropped (stats kept) so each event fits.
func TestWorkspace29_FrameBound(t *testing.T) {
	r := newRig(t, func(c *Config) { c.WorkspaceMaxPayloadBytes = 24 << 10 })
	r.prepare()
	r.open()
	body := strings.Repeat(`twenty kib of text\n`, 20<<10/19)
	var steps []string
	for i := range 4 {
		steps = append(steps, "edit f"+strings.Repeat("x", i)+".txt "+body)
	}
	_, evs := r.wsTurn(strings.Join(steps, " ;; "))
	for _, e := range workspaceEvents(evs) {
		if !strings.HasPrefix(e.EventType, "workspace.") || e.EventType == "workspace.file.referenced" {
			continue
		}
		b, err := json.Marshal(e.Payload)
		require.NoError(t, err)
		require.LessOrEqual(t, len(b), 24<<10, e.EventType)
		fs := e.Payload["files"].([]any)
		last := fs[len(fs)-1].(map[string]any)
		require.NotNil(t, last["additions"])
		if len(fs) > 1 {
			require.Nil(t, last["diff"])
		}
	}
	prpschema.RequireValidEvents(t, evs)
}

// TestWorkspace30_RestartLosesBaseline: runnerd restarts mid-turn after
// the baseline; the agent edits afterwards → workspace_baseline_incomplete,
// no verified set, the harness set recorded as harness_reported.
func TestWorkspace30_RestartLosesBaseline(t *testing.T) {
	r := newRig(t)
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "a.txt"), []byte("a\n"), 0o644))
	r.prepare()
	r.open()
	turn := r.turn(`sleep 1000 ;; edit a.txt b\n`)
	r.m.Close()
	st, _ := r.sink.snapshot()
	r.m = NewManager(r.cfg, st) // the rig's cleanup shuts it down
	require.NoError(t, r.m.Start())
	evs := r.sink.waitFor(t, "turn end", func(_ Stored, evs []provider.Event) bool { return count(evs, "run.terminal") > 0 })
	var mine []provider.Event
	for _, e := range evs {
		if e.TurnID == turn {
			mine = append(mine, e)
		}
	}
	ws := workspaceEvents(mine)
	require.Equal(t, []string{"harness.diagnostic", "workspace.change.updated", "workspace.diff.recorded", "workspace.file.referenced"}, types(ws))
	require.Equal(t, diagBaselineIncomplete, code(ws[0]))
	require.Equal(t, "harness_reported", ws[2].Payload["source"])
	require.Equal(t, true, ws[2].Payload["complete"])
	requireEndOrder(t, mine)
	prpschema.RequireValidEvents(t, mine)
}

// TestWorkspaceOpenCodeVerified: an OpenCode turn (its events arrive
// over HTTP, not through the reader) gets the verified set too: a file
// written during the turn → change.updated and diff.recorded before
// turn.completed.
func TestWorkspaceOpenCodeVerified(t *testing.T) {
	r := newOpenCodeRig(t)
	r.prepareOpenCode()
	r.open()
	n := len(r.sink.waitEvent(t, "session.started"))
	turn := r.turn("FAKEOC: slow 50 20")
	r.sink.waitEvent(t, "item.delta")
	require.NoError(t, os.WriteFile(filepath.Join(r.cwd, "made.txt"), []byte("during the turn\n"), 0o644))
	evs := since(r.sink.waitEvent(t, "run.terminal"), n)
	var mine []provider.Event
	for _, e := range evs {
		if e.TurnID == turn {
			mine = append(mine, e)
		}
	}
	ws := workspaceEvents(mine)
	require.Equal(t, []string{"workspace.change.updated", "workspace.diff.recorded"}, types(ws))
	require.Equal(t, "create", files(ws[1])["made.txt"]["operation"])
	requireEndOrder(t, mine)
	prpschema.RequireValidEvents(t, mine)
}

// TestWorkspaceCommitDuringAfterWalk: another change committed while a
// turn's after-walk runs (a command result, a terminal answer) takes none
// of the turn's end events with it: the verified set still comes before
// the turn's terminal event, and the write made meanwhile records the
// event-file cursor from before the turn's end, so a crash then re-reads
// the end rather than losing it.
func TestWorkspaceCommitDuringAfterWalk(t *testing.T) {
	r := newRig(t)
	r.prepare()
	r.open()
	var (
		once    sync.Once
		during  Stored
		walkErr error
	)
	r.m.duringWalk = func() {
		once.Do(func() {
			r.m.mu.Lock()
			walkErr = r.m.commitThenWriteLocked([]provider.Event{{EventType: prp.EventHarnessDiagnostic,
				Priority: provider.P1, Payload: map[string]any{"reasonCode": "during_walk"}}}, nil)
			r.m.mu.Unlock()
			deadline := time.Now().Add(testWait)
			for time.Now().Before(deadline) {
				st, evs := r.sink.snapshot()
				if slices.ContainsFunc(evs, func(e provider.Event) bool { return e.Payload["reasonCode"] == "during_walk" }) {
					during = st
					return
				}
				time.Sleep(time.Millisecond)
			}
			walkErr = errors.New("the commit made during the walk never became durable")
		})
	}
	_, before := r.sink.snapshot()
	turn, mine := r.wsTurn(`edit a.txt one\n`)
	require.NoError(t, walkErr)
	ws := workspaceEvents(mine)
	require.Equal(t, []string{"workspace.change.updated", "workspace.change.updated", "workspace.diff.recorded",
		"workspace.file.referenced"}, types(ws))
	requireEndOrder(t, mine)
	_, all := r.sink.snapshot()
	all = all[len(before):]
	diag := slices.IndexFunc(all, func(e provider.Event) bool { return e.Payload["reasonCode"] == "during_walk" })
	end := turnEnd(all, turn)
	require.Less(t, diag, end, "the change committed during the walk comes before the turn's end")
	final, _ := r.sink.snapshot()
	require.NotNil(t, during.Session)
	require.Less(t, during.Session.Process.ConsumedEventSeq, final.Session.Process.ConsumedEventSeq,
		"the write during the walk does not record the files that ended the turn")
}

// TestWorkspace28_CodexTurnDiff: a Codex turn's turn/diff/updated with a
// rename, a mode change and a binary → a harness_reported change set
// (P2) with rename + previousPath, mode_change, and binary with stats and
// diff null, counts only from hunks; the verified set still comes last
// before the turn's end.
func TestWorkspace28_CodexTurnDiff(t *testing.T) {
	r := newRig(t)
	r.prepareCodex(nil)
	r.open()
	_, evs := r.wsTurn("turndiff")
	ws := workspaceEvents(evs)
	require.Equal(t, []string{"workspace.change.updated", "workspace.change.updated", "workspace.diff.recorded"}, types(ws))
	h := ws[0]
	require.Equal(t, provider.P2, h.Priority)
	require.Equal(t, "harness_reported", h.Payload["source"])
	fs := files(h)
	require.Len(t, fs, 3)
	require.Equal(t, "rename", fs["new.go"]["operation"])
	require.Equal(t, "old.go", fs["new.go"]["previousPath"])
	require.EqualValues(t, 1, fs["new.go"]["additions"])
	require.EqualValues(t, 1, fs["new.go"]["deletions"])
	require.Equal(t, "mode_change", fs["run.sh"]["operation"])
	require.Equal(t, true, fs["logo.png"]["binary"])
	require.Nil(t, fs["logo.png"]["additions"])
	require.Nil(t, fs["logo.png"]["diff"])
	require.Equal(t, "runner_verified", ws[1].Payload["source"])
	requireEndOrder(t, evs)
	prpschema.RequireValidEvents(t, evs)
}
