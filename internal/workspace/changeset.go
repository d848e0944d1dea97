package workspace

import (
	"encoding/json"
	"slices"
	"time"
)

// Change set values (workspace-diff.schema.json).
const (
	DiffSchema      = "paperclip.workspace.diff.v1"
	SourceHarness   = "harness_reported"
	SourceVerified  = "runner_verified"
	changeSetSuffix = ":workspace"
	// MaxPayloadBytes bounds one change set's encoded payload (§3.4: the
	// event envelope stays under 480 KiB; the rest of the envelope is far
	// smaller than the margin kept here).
	MaxPayloadBytes = 480<<10 - 8<<10
)

// FileChange is one file entry of a change set.
type FileChange struct {
	Path         string  `json:"path"`
	Operation    string  `json:"operation"`
	PreviousPath *string `json:"previousPath"`
	Additions    *int    `json:"additions"`
	Deletions    *int    `json:"deletions"`
	Binary       bool    `json:"binary"`
	Diff         *string `json:"diff"`
}

// Totals sums a change set; Additions and Deletions are null when any
// file's is.
type Totals struct {
	Files     int  `json:"files"`
	Additions *int `json:"additions"`
	Deletions *int `json:"deletions"`
}

// ChangeSet is a paperclip.workspace.diff.v1 payload.
type ChangeSet struct {
	Schema           string       `json:"schema"`
	ChangeSetID      string       `json:"changeSetId"`
	Revision         int          `json:"revision"`
	Source           string       `json:"source"`
	Complete         bool         `json:"complete"`
	Files            []FileChange `json:"files"`
	Totals           Totals       `json:"totals"`
	PatchArtifactRef *string      `json:"patchArtifactRef"`
}

// ChangeSetID is a turn's change set id (§3.1).
func ChangeSetID(providerTurnID string) string { return providerTurnID + changeSetSuffix }

// NewChangeSet builds a change set of files (sorted by path, totals
// summed, bounded by Bound).
func NewChangeSet(id string, revision int, source string, complete bool, files []FileChange) ChangeSet {
	files = slices.Clone(files)
	if files == nil {
		files = []FileChange{}
	}
	slices.SortFunc(files, func(a, b FileChange) int { return compareStrings(a.Path, b.Path) })
	cs := ChangeSet{Schema: DiffSchema, ChangeSetID: id, Revision: revision, Source: source,
		Complete: complete, Files: files}
	cs.Bound(MaxPayloadBytes)
	return cs
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sum recomputes the totals.
func (cs *ChangeSet) sum() {
	adds, dels, known := 0, 0, true
	for _, f := range cs.Files {
		if f.Additions == nil || f.Deletions == nil {
			known = false
			continue
		}
		adds += *f.Additions
		dels += *f.Deletions
	}
	cs.Totals = Totals{Files: len(cs.Files)}
	if known {
		cs.Totals.Additions, cs.Totals.Deletions = &adds, &dels
	}
}

// Bound keeps at most MaxFiles entries and drops diff text file by file
// from the end (diff null, stats kept) until the encoded payload is at
// most maxBytes (§3.4); it reports whether the payload fits.
func (cs *ChangeSet) Bound(maxBytes int) bool {
	if len(cs.Files) > MaxFiles {
		cs.Files = cs.Files[:MaxFiles]
	}
	cs.sum()
	for i := len(cs.Files) - 1; ; i-- {
		if cs.Size() <= maxBytes {
			return true
		}
		for i >= 0 && cs.Files[i].Diff == nil {
			i--
		}
		if i < 0 {
			return false
		}
		cs.Files[i].Diff = nil
	}
}

// Size is the encoded payload's length in bytes.
func (cs *ChangeSet) Size() int {
	b, err := json.Marshal(cs)
	if err != nil {
		return 0
	}
	return len(b)
}

// Payload is the change set as an event payload.
func (cs ChangeSet) Payload() map[string]any { return toMap(cs) }

// toMap is v's JSON object as a map (the form of event payloads).
func toMap(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil
	}
	return m
}

// Budget is a turn's shared diff time (WorkspaceDiffBudget): diffs
// computed once it is spent have null stats and text.
type Budget struct {
	deadline time.Time
	now      func() time.Time
}

// NewBudget starts a budget of d at now().
func NewBudget(d time.Duration, now func() time.Time) *Budget {
	return &Budget{deadline: now().Add(d), now: now}
}

// Spent reports whether the budget is used up.
func (b *Budget) Spent() bool { return b != nil && !b.now().Before(b.deadline) }

func intp(n int) *int       { return &n }
func strp(s string) *string { return &s }
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// diffEntry is the entry of path from a to b (nil a: created; nil b:
// deleted), with stats and a bounded, redacted diff unless a side is
// binary or the budget is spent.
func diffEntry(path, op string, a, b *Entry, budget *Budget, redact func(string) string) FileChange {
	fc := FileChange{Path: path, Operation: op}
	if (a != nil && a.Binary) || (b != nil && b.Binary) {
		fc.Binary = true
		return fc
	}
	if budget.Spent() {
		return fc
	}
	var ac, bc []byte
	if a != nil {
		ac = nonNil(a.Content)
	}
	if b != nil {
		bc = nonNil(b.Content)
	}
	text, adds, dels := Unified(path, ac, bc)
	fc.Additions, fc.Deletions = intp(adds), intp(dels)
	fc.Diff = strp(Cut(redact(text)))
	return fc
}

// Compare is the runner-verified change list from before to after
// (§4.4), sorted by path: created, deleted, modified files, and a deleted
// and a created file of equal hash as one rename. Both snapshots must be
// complete. redact scrubs each diff text.
func Compare(before, after *Snapshot, budget *Budget, redact func(string) string) []FileChange {
	var created, deleted []string
	var out []FileChange
	for _, p := range sortedPaths(after.Files) {
		a, b := before.Files[p], after.Files[p]
		switch {
		case a == nil:
			created = append(created, p)
		case !a.sameContent(b):
			out = append(out, diffEntry(p, OpModify, a, b, budget, redact))
		}
	}
	for _, p := range sortedPaths(before.Files) {
		if after.Files[p] == nil {
			deleted = append(deleted, p)
		}
	}
	// Renames pair a deleted with a created file of equal hash, each in
	// path order.
	byHash := map[[32]byte][]string{}
	for _, p := range deleted {
		if e := before.Files[p]; e.Hashed {
			byHash[e.Hash] = append(byHash[e.Hash], p)
		}
	}
	renamedFrom := map[string]bool{}
	for _, p := range created {
		e := after.Files[p]
		if from := byHash[e.Hash]; e.Hashed && len(from) > 0 {
			byHash[e.Hash] = from[1:]
			renamedFrom[from[0]] = true
			text := "diff --git a/" + from[0] + " b/" + p + "\nsimilarity index 100%\nrename from " + from[0] +
				"\nrename to " + p + "\n"
			out = append(out, FileChange{Path: p, Operation: OpRename, PreviousPath: strp(from[0]),
				Additions: intp(0), Deletions: intp(0), Binary: e.Binary, Diff: strp(text)})
			continue
		}
		out = append(out, diffEntry(p, OpCreate, nil, e, budget, redact))
	}
	for _, p := range deleted {
		if !renamedFrom[p] {
			out = append(out, diffEntry(p, OpDelete, before.Files[p], nil, budget, redact))
		}
	}
	slices.SortFunc(out, func(a, b FileChange) int { return compareStrings(a.Path, b.Path) })
	return out
}

func sortedPaths(m map[string]*Entry) []string {
	ps := make([]string, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}
