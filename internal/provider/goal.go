package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// The ACP goal extension (codex-acp docs/goal-extension.md, also in
// claude-agent-acp): the agent advertises it in the initialize result's
// top-level _meta.goal, is driven by the _session/goal request and
// publishes its snapshot in session_info_update._meta.goal (null once
// cleared). runnerd maps PRP v2 session.goal.* onto it.
const (
	// MethodSessionGoal is the extension's control method.
	MethodSessionGoal = "_session/goal"
	// goalExtensionVersion is the only extension version runnerd speaks.
	goalExtensionVersion = 1
	// goalSnapshotSchema is the schema of the PRP goal projection (the
	// reference's acpxGoalProjection).
	goalSnapshotSchema = "paperclip.session_goal.snapshot.v1"
	// MaxGoalObjectiveChars bounds an objective (prp.md §7.5: objective
	// ≤4000; command-v2.schema.json session.goal.set).
	MaxGoalObjectiveChars = 4000
	// maxGoalReasonChars cuts lastReason (the reference takes its first
	// 1,000 characters).
	maxGoalReasonChars = 1000
	// maxGoalMetaBytes bounds the _meta object a goal snapshot is decoded
	// from: the objective and reason at 4 bytes a character, with room for
	// the numbers and names.
	maxGoalMetaBytes = 32 << 10
)

// Goal actions of _session/goal.
const (
	GoalSet    = "set"
	GoalPause  = "pause"
	GoalResume = "resume"
	GoalClear  = "clear"
)

// goalActions are the actions runnerd knows, in the extension's order.
var goalActions = []string{GoalSet, GoalPause, GoalResume, GoalClear}

// goalStatuses are the snapshot statuses of the extension; Codex's
// usageLimited/budgetLimited arrive already mapped to limited.
var goalStatuses = []string{"active", "paused", "blocked", "limited", "complete"}

// GoalCapability is the initialize result's _meta.goal.
type GoalCapability struct {
	Version       int      `json:"version"`
	ControlMethod string   `json:"controlMethod"`
	Actions       []string `json:"actions"`
}

// Available reports whether the capability grants goal controls. Like the
// reference (acpxGoalProjection), only a version-1 extension on
// _session/goal that offers both set and clear counts; an agent that
// advertises a subset (claude-agent-acp offers clear alone) reads as
// unsupported.
func (g *GoalCapability) Available() bool {
	return g != nil && g.Version == goalExtensionVersion && g.ControlMethod == MethodSessionGoal &&
		slices.Contains(g.Actions, GoalSet) && slices.Contains(g.Actions, GoalClear)
}

// Allows reports whether action may be sent: the extension is available
// and advertises it (clients must not infer an action).
func (g *GoalCapability) Allows(action string) bool {
	return g.Available() && slices.Contains(g.Actions, action)
}

// GoalSnapshot is the agent's goal as session_info_update._meta.goal
// publishes it. Timestamps are Unix milliseconds; absent optional fields
// are nil.
type GoalSnapshot struct {
	Objective       string   `json:"objective"`
	Status          string   `json:"status"`
	TokenBudget     *int64   `json:"tokenBudget,omitempty"`
	TokensUsed      *int64   `json:"tokensUsed,omitempty"`
	TimeUsedSeconds *float64 `json:"timeUsedSeconds,omitempty"`
	Iterations      *int64   `json:"iterations,omitempty"`
	LastReason      *string  `json:"lastReason,omitempty"`
	CreatedAt       *int64   `json:"createdAt,omitempty"`
	UpdatedAt       *int64   `json:"updatedAt,omitempty"`
	CompletedAt     *int64   `json:"completedAt,omitempty"`
}

// GoalRecord is the session record's goal state: what initialize
// advertised, the agent's latest snapshot (nil: none or cleared) and the
// revision of the latest projection runnerd emitted.
type GoalRecord struct {
	Capability *GoalCapability `json:"capability,omitempty"`
	Snapshot   *GoalSnapshot   `json:"snapshot,omitempty"`
	Revision   uint64          `json:"revision,omitempty"`
}

// Decoder errors: the messages name the field, never its value.
var (
	errGoalMeta     = errors.New("decode goal meta")
	errGoalTooLarge = errors.New("goal meta exceeds its size bound")
)

// DecodeGoalCapability reads the initialize result's _meta; nil without a
// goal member or with one that does not decode (an unusable extension is
// no extension).
func DecodeGoalCapability(meta json.RawMessage) *GoalCapability {
	if len(meta) == 0 || len(meta) > maxGoalMetaBytes {
		return nil
	}
	var m struct {
		Goal *GoalCapability `json:"goal"`
	}
	if json.Unmarshal(meta, &m) != nil || m.Goal == nil {
		return nil
	}
	return m.Goal
}

// DecodeGoalMeta reads a session_info_update's _meta. present is false
// when it carries no goal member; a goal of null is present with a nil
// snapshot (the goal was cleared). A snapshot without an objective, with
// an unknown status or a negative count is an error, so a malformed
// publication never replaces a good one. The objective and lastReason
// are cut to their bounds on a UTF-8 boundary.
func DecodeGoalMeta(meta json.RawMessage) (snap *GoalSnapshot, present bool, err error) {
	if len(meta) == 0 {
		return nil, false, nil
	}
	if len(meta) > maxGoalMetaBytes {
		return nil, false, fmt.Errorf("%w: %w", errGoalMeta, errGoalTooLarge)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(meta, &m); err != nil {
		return nil, false, fmt.Errorf("%w: _meta is not an object", errGoalMeta)
	}
	raw, ok := m["goal"]
	if !ok {
		return nil, false, nil
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, true, nil
	}
	var w struct {
		GoalSnapshot
		CreatedAt   json.RawMessage `json:"createdAt"`
		UpdatedAt   json.RawMessage `json:"updatedAt"`
		CompletedAt json.RawMessage `json:"completedAt"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, true, fmt.Errorf("%w: goal is not a snapshot object", errGoalMeta)
	}
	s := w.GoalSnapshot
	s.Objective = cutRunes(strings.TrimSpace(s.Objective), MaxGoalObjectiveChars)
	if s.Objective == "" {
		return nil, true, fmt.Errorf("%w: goal has no objective", errGoalMeta)
	}
	if !slices.Contains(goalStatuses, s.Status) {
		return nil, true, fmt.Errorf("%w: goal status is not known", errGoalMeta)
	}
	for _, n := range []*int64{s.TokenBudget, s.TokensUsed, s.Iterations} {
		if n != nil && *n < 0 {
			return nil, true, fmt.Errorf("%w: goal count is negative", errGoalMeta)
		}
	}
	if s.TimeUsedSeconds != nil && *s.TimeUsedSeconds < 0 {
		return nil, true, fmt.Errorf("%w: goal time is negative", errGoalMeta)
	}
	if s.LastReason != nil {
		r := cutRunes(*s.LastReason, maxGoalReasonChars)
		s.LastReason = &r
	}
	for _, t := range []struct {
		raw json.RawMessage
		dst **int64
	}{{w.CreatedAt, &s.CreatedAt}, {w.UpdatedAt, &s.UpdatedAt}, {w.CompletedAt, &s.CompletedAt}} {
		ms, err := goalTimestamp(t.raw)
		if err != nil {
			return nil, true, err
		}
		*t.dst = ms
	}
	return &s, true, nil
}

// goalTimestamp reads Unix milliseconds, or an RFC 3339 string (the
// reference's projection accepts either); null or absent is nil.
func goalTimestamp(raw json.RawMessage) (*int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var ms float64
	if json.Unmarshal(raw, &ms) == nil {
		if ms < 0 || ms > maxGoalMillis {
			return nil, fmt.Errorf("%w: goal timestamp is out of range", errGoalMeta)
		}
		v := int64(ms)
		return &v, nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil, fmt.Errorf("%w: goal timestamp is not a number or a string", errGoalMeta)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.UnixMilli() < 0 || t.UnixMilli() > maxGoalMillis {
		return nil, fmt.Errorf("%w: goal timestamp is not a date", errGoalMeta)
	}
	v := t.UnixMilli()
	return &v, nil
}

// maxGoalMillis is the last instant a projection can print as a
// four-digit-year ISO date (9999-12-31T23:59:59.999Z).
const maxGoalMillis = 253402300799999

// cutRunes returns s cut to at most n characters, invalid UTF-8 replaced.
func cutRunes(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for range n {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}

// GoalProjection is the paperclip.session_goal.snapshot.v1 object: the
// result of session.goal.* and the payload of session.goal.snapshot,
// .updated and .cleared (the reference's
// acpxGoalProjection and goal_control).
type GoalProjection struct {
	Schema       string          `json:"schema"`
	SessionGoals GoalSessionCaps `json:"sessionGoals"`
	Goal         *GoalView       `json:"goal"`
	WorkingNow   bool            `json:"workingNow"`
	Revision     uint64          `json:"revision"`
	RequestID    string          `json:"requestId,omitempty"`
}

// GoalSessionCaps is the projection's sessionGoals (also the payload of
// session.capabilities.updated).
type GoalSessionCaps struct {
	Availability           string   `json:"availability"`
	Actions                []string `json:"actions"`
	AutonomousUpdates      bool     `json:"autonomousUpdates"`
	PersistentAcrossResume bool     `json:"persistentAcrossResume"`
	MaxObjectiveChars      int      `json:"maxObjectiveChars"`
	TokenBudgetControl     bool     `json:"tokenBudgetControl"`
	UsageReporting         bool     `json:"usageReporting"`
	ReasonCode             string   `json:"reasonCode,omitempty"`
	Reason                 string   `json:"reason,omitempty"`
}

// GoalView is the projection's goal: every member present, null when the
// agent did not report it; timestamps as ISO strings.
type GoalView struct {
	Objective      string   `json:"objective"`
	Status         string   `json:"status"`
	TokenBudget    *int64   `json:"tokenBudget"`
	TokensUsed     *int64   `json:"tokensUsed"`
	ElapsedSeconds *float64 `json:"elapsedSeconds"`
	Iterations     *int64   `json:"iterations"`
	LastReason     *string  `json:"lastReason"`
	CreatedAt      *string  `json:"createdAt"`
	UpdatedAt      *string  `json:"updatedAt"`
	CompletedAt    *string  `json:"completedAt"`
	WorkingNow     bool     `json:"workingNow"`
}

// Reason codes of an unsupported sessionGoals (the reference's).
const (
	goalReasonExtensionRequired = "persistent_session_goal_extension_required"
	goalReasonText              = "This persistent ACP session does not advertise a compatible goal extension with set and clear controls."
)

// GoalCaps is the sessionGoals block for capability c. v1 of the
// extension negotiates no budget control, so tokenBudgetControl is false.
func GoalCaps(c *GoalCapability) GoalSessionCaps {
	ok := c.Available()
	caps := GoalSessionCaps{
		Availability: "unsupported", Actions: []string{}, AutonomousUpdates: ok, PersistentAcrossResume: ok,
		MaxObjectiveChars: MaxGoalObjectiveChars, UsageReporting: ok,
	}
	if !ok {
		caps.ReasonCode, caps.Reason = goalReasonExtensionRequired, goalReasonText
		return caps
	}
	caps.Availability = "available"
	for _, a := range goalActions {
		if slices.Contains(c.Actions, a) {
			caps.Actions = append(caps.Actions, a)
		}
	}
	return caps
}

// Project builds the projection of g at revision rev. workingNow says a
// prompt is executing the goal now.
func (g GoalRecord) Project(rev uint64, workingNow bool, requestID string) GoalProjection {
	p := GoalProjection{Schema: goalSnapshotSchema, SessionGoals: GoalCaps(g.Capability), Revision: rev, RequestID: requestID}
	s := g.Snapshot
	if !g.Capability.Available() || s == nil {
		return p
	}
	working := workingNow && s.Status == "active"
	v := &GoalView{
		Objective: s.Objective, Status: s.Status, TokenBudget: s.TokenBudget, TokensUsed: s.TokensUsed,
		ElapsedSeconds: s.TimeUsedSeconds, Iterations: s.Iterations, LastReason: s.LastReason,
		CreatedAt: isoMillis(s.CreatedAt), UpdatedAt: isoMillis(s.UpdatedAt), CompletedAt: isoMillis(s.CompletedAt),
		WorkingNow: working,
	}
	if v.CompletedAt == nil && s.Status == "complete" {
		v.CompletedAt = v.UpdatedAt
	}
	p.Goal, p.WorkingNow = v, working
	return p
}

func isoMillis(ms *int64) *string {
	if ms == nil {
		return nil
	}
	s := time.UnixMilli(*ms).UTC().Format("2006-01-02T15:04:05.000Z")
	return &s
}
