package workspace

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// event is an event description as prpschema reads it.
type event struct {
	EventType string         `json:"eventType"`
	Priority  int            `json:"priority"`
	TurnID    string         `json:"turnId,omitempty"`
	ItemID    string         `json:"itemId,omitempty"`
	Payload   map[string]any `json:"payload"`
}

// requireValid validates change sets and references as the events that
// carry them, against the reference event schemas (v1 and v2).
func requireValid(t *testing.T, sets []ChangeSet, refs []FileReference) {
	t.Helper()
	var evs []event
	for _, cs := range sets {
		typ := "workspace.change.updated"
		if cs.Complete {
			typ = "workspace.diff.recorded"
		}
		evs = append(evs, event{EventType: typ, Priority: 1, TurnID: "turn-1", ItemID: "item-1", Payload: cs.Payload()})
	}
	for _, r := range refs {
		evs = append(evs, event{EventType: "workspace.file.referenced", Priority: 1, TurnID: "turn-1", ItemID: "item-1", Payload: r.Payload()})
	}
	prpschema.RequireValidEvents(t, evs)
	s := prpschema.Load(t)
	for i, ev := range evs {
		env := prpschema.Envelope(t, i+1, ev)
		env["schema"], env["schemaVersion"], env["sourceEpoch"] = "paperclip.prp.event.v2", 2, "0b7c6a1e-5d4f-4a3b-8c2d-1e0f9a8b7c6d"
		require.NoError(t, prpschema.Validate(s.EventV2, env), "event %d v2", i)
	}
}

// write creates a file under dir with parents.
func write(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

// age sets a file's mtime an hour back, out of the stat cache's recent
// window.
func age(t *testing.T, dir, rel string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(dir, filepath.FromSlash(rel)), old, old))
}

// walk snapshots root within a generous bound.
func walk(t *testing.T, r *Root, prev *Snapshot) *Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.Walk(ctx, prev)
}

func openRoot(t *testing.T, dir string, exclude ...string) *Root {
	t.Helper()
	r, err := Open(dir, exclude...)
	require.NoError(t, err)
	return r
}

func noRedact(s string) string { return s }

func byPath(files []FileChange) map[string]FileChange {
	m := map[string]FileChange{}
	for _, f := range files {
		m[f.Path] = f
	}
	return m
}

func paths(files []FileChange) []string {
	var ps []string
	for _, f := range files {
		ps = append(ps, f.Path)
	}
	return ps
}

func budget() *Budget { return NewBudget(WorkspaceDiffBudget, time.Now) }
