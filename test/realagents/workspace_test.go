package realagents

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// TestWorkspaceRealClaudeEdit: Claude Code's model (fakellm) writes a
// file in a scratch workspace with its Write tool and links it in its
// answer; the Write call's diff makes the harness set, and the turn's
// verified set (runner_verified, the last
// workspace.change.updated, then workspace.diff.recorded) holds the file
// with its exact counts, the file reference names it, and every workspace
// event precedes turn.completed (workspace.md §4.5, §5).
func TestWorkspaceRealClaudeEdit(t *testing.T) {
	spec := specs["claude"]
	dir := agentDir(t, spec)
	slots <- struct{}{}
	defer func() { <-slots }()
	schemas := prpschema.Load(t)
	r := newRig(t, spec, dir)
	proc := r.start()
	cwd := t.TempDir()
	step(t, "claude", "workspace session.open", func() {
		r.must("run.prepare", map[string]any{"provider": map[string]any{"kind": "acpx", "agent": spec.name,
			"command": spec.argv(dir)[0], "args": spec.argv(dir)[1:], "cwd": cwd, "permissionMode": "approve-all"}})
		r.must("session.open", map[string]any{"reuse": "same_session"})
	})
	step(t, "claude", "workspace edit turn", func() {
		args, err := json.Marshal(map[string]string{"file_path": filepath.Join(cwd, "notes.md"), "content": "# Notes\none\ntwo\n"})
		require.NoError(t, err)
		r.must("turn.start", map[string]any{"text": "FAKELLM: tool Write " + string(args) + " then Wrote [the notes](notes.md)."})
		evs := turnEvents(r.waitCount("run.terminal", 1), 1)
		require.Len(t, prptest.OfType(evs, "turn.completed"), 1, "turn events: %v", types(evs))
		b, err := os.ReadFile(filepath.Join(cwd, "notes.md"))
		require.NoError(t, err)
		require.Equal(t, "# Notes\none\ntwo\n", string(b), "Claude wrote the file")

		ws := workspaceBeforeEnd(t, evs)
		updates := prptest.OfType(ws, "workspace.change.updated")
		require.NotEmpty(t, updates)
		harness := payload(t, updates[0])
		require.Equal(t, "harness_reported", harness["source"], "the Write call's diff (ACP diff content)")
		require.EqualValues(t, 3, harness["files"].([]any)[0].(map[string]any)["additions"])
		verified := payload(t, updates[len(updates)-1])
		require.Equal(t, "runner_verified", verified["source"], "the last change.updated is the verified set")
		recorded := prptest.OfType(ws, "workspace.diff.recorded")
		require.Len(t, recorded, 1)
		for _, p := range []map[string]any{verified, payload(t, recorded[0])} {
			files := p["files"].([]any)
			require.Len(t, files, 1)
			f := files[0].(map[string]any)
			require.Equal(t, "notes.md", f["path"])
			require.Equal(t, "create", f["operation"])
			require.EqualValues(t, 3, f["additions"])
			require.EqualValues(t, 0, f["deletions"])
			require.Contains(t, f["diff"], "+two\n")
		}
		refs := prptest.OfType(ws, "workspace.file.referenced")
		require.Len(t, refs, 1)
		ref := payload(t, refs[0])
		require.Equal(t, "notes.md", ref["path"])
		require.Equal(t, "text/markdown", ref["mediaType"])
	})
	require.NoError(t, proc.Process.Signal(syscall.SIGTERM))
	waitExit(t, proc)
	validateEvents(t, schemas, r.core.Snapshot().Events)
}

// workspaceBeforeEnd returns the turn's workspace events, requiring every
// one of them before the turn's turn.completed (workspace.md §4: the
// verified set is part of the turn).
func workspaceBeforeEnd(t *testing.T, evs []prptest.Event) []prptest.Event {
	t.Helper()
	var ws []prptest.Event
	end := -1
	for i, e := range evs {
		if strings.HasPrefix(e.EventType, "workspace.") {
			require.Equal(t, -1, end, "%s after the turn's end", e.EventType)
			ws = append(ws, e)
		}
		if e.EventType == "turn.completed" {
			end = i
		}
	}
	t.Logf("workspace events: %v", types(ws))
	return ws
}
