package workspace

import (
	"strings"
	"time"
)

// HarnessInterval is the least time between two harness snapshots of a
// turn (§3.3, beyond).
const HarnessInterval = time.Second

// Harness is one turn's cumulative harness-reported change set (§3.3):
// one entry per path, a later edit of a path appending its hunks and
// adding to its counts. It is not safe for concurrent use.
type Harness struct {
	id       string
	revision int
	files    map[string]*FileChange
	order    []string
	budget   *Budget
	redact   func(string) string
	// dirty is set by a change not yet in a snapshot.
	dirty bool
	// last is the latest snapshot taken (valid when revision > 0).
	last ChangeSet
}

// NewHarness starts the change set of the turn providerTurnID; budget is
// the turn's shared diff budget, redact scrubs diff text.
func NewHarness(providerTurnID string, budget *Budget, redact func(string) string) *Harness {
	return &Harness{id: ChangeSetID(providerTurnID), files: map[string]*FileChange{}, budget: budget, redact: redact}
}

// entry returns path's entry, creating it with op.
func (h *Harness) entry(path, op string) *FileChange {
	if fc := h.files[path]; fc != nil {
		return fc
	}
	if len(h.files) >= MaxFiles {
		return nil
	}
	fc := &FileChange{Path: path, Operation: op}
	h.files[path] = fc
	h.order = append(h.order, path)
	return fc
}

// AddDiff records an ACP diff content of a wire path (§3.2): a create
// when oldText is nil, else a modify, with the unified diff of the texts.
func (h *Harness) AddDiff(path string, oldText *string, newText string) {
	op := OpModify
	var a []byte
	if oldText == nil {
		op = OpCreate
	} else {
		a = []byte(*oldText)
	}
	fc := h.entry(path, op)
	if fc == nil {
		return
	}
	h.dirty = true
	if fc.Operation == OpDelete {
		fc.Operation = op
	}
	if h.budget.Spent() {
		fc.Additions, fc.Deletions, fc.Diff = nil, nil, nil
		return
	}
	if oldText != nil {
		a = nonNil(a)
	}
	text, adds, dels := Unified(path, a, []byte(newText))
	text = h.redact(text)
	switch {
	case fc.Diff == nil && fc.Additions == nil:
		fc.Diff, fc.Additions, fc.Deletions = strp(Cut(text)), intp(adds), intp(dels)
	case fc.Diff != nil && fc.Additions != nil:
		fc.Diff = strp(Cut(*fc.Diff + hunks(text)))
		fc.Additions, fc.Deletions = intp(*fc.Additions+adds), intp(*fc.Deletions+dels)
	}
}

// hunks is a unified diff without its header lines.
func hunks(text string) string {
	if i := strings.Index(text, "\n@@"); i >= 0 {
		return text[i+1:]
	}
	return ""
}

// AddLocation records a location of an edit, delete or move tool call
// without diff content (§3.2): kind "delete" makes a delete, any other a
// modify, stats and diff null. A path already in the set keeps its entry.
func (h *Harness) AddLocation(path, kind string) {
	op := OpModify
	if kind == "delete" {
		op = OpDelete
	}
	if fc := h.files[path]; fc != nil {
		if op == OpDelete && fc.Operation != OpDelete {
			fc.Operation, fc.Additions, fc.Deletions, fc.Diff = OpDelete, nil, nil, nil
			h.dirty = true
		}
		return
	}
	if h.entry(path, op) != nil {
		h.dirty = true
	}
}

// Dirty reports whether a change awaits a snapshot.
func (h *Harness) Dirty() bool { return h.dirty }

// Reported reports whether any snapshot was taken.
func (h *Harness) Reported() bool { return h.revision > 0 }

// Revision is the latest snapshot's revision (0: none).
func (h *Harness) Revision() int { return h.revision }

// ID is the change set id.
func (h *Harness) ID() string { return h.id }

// Snapshot takes the next revision of the cumulative set
// (harness_reported, complete false).
func (h *Harness) Snapshot() ChangeSet {
	h.revision++
	h.dirty = false
	files := make([]FileChange, 0, len(h.order))
	for _, p := range h.order {
		files = append(files, cloneChange(*h.files[p]))
	}
	h.last = NewChangeSet(h.id, h.revision, SourceHarness, false, files)
	return h.last
}

// Last is the latest snapshot, ok false when none was taken.
func (h *Harness) Last() (ChangeSet, bool) { return h.last, h.revision > 0 }

func cloneChange(fc FileChange) FileChange {
	if fc.Diff != nil {
		fc.Diff = strp(*fc.Diff)
	}
	if fc.Additions != nil {
		fc.Additions = intp(*fc.Additions)
	}
	if fc.Deletions != nil {
		fc.Deletions = intp(*fc.Deletions)
	}
	return fc
}

// Budget is the turn's shared diff budget (the verified diff spends the
// rest of it).
func (h *Harness) Budget() *Budget { return h.budget }

// ReplaceGit makes the set the aggregated git diff text of the turn so far
// (Codex's turn/diff/updated, §3.2), in place of what it held. wire maps
// each path the diff names to its wire path (Root.WirePath); an entry
// whose path or previous path it refuses (out of the root) is left out.
// Diff text is scrubbed.
func (h *Harness) ReplaceGit(text string, wire func(string) (string, bool)) {
	if h.budget.Spent() {
		return
	}
	files := ParseGitDiff(text)
	h.files, h.order = make(map[string]*FileChange, len(files)), nil
	for i := range files {
		fc := &files[i]
		p, ok := wire(fc.Path)
		if !ok {
			continue
		}
		fc.Path = p
		if fc.PreviousPath != nil {
			prev, ok := wire(*fc.PreviousPath)
			if !ok {
				continue
			}
			fc.PreviousPath = &prev
		}
		if fc.Diff != nil {
			fc.Diff = strp(h.redact(*fc.Diff))
		}
		if h.files[p] == nil {
			h.order = append(h.order, p)
		}
		h.files[p] = fc
	}
	h.dirty = true
}
