package provider

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestDecodeGoalMeta: the extension's snapshot decodes with its optional
// members; null is a cleared goal; a snapshot without an objective, with
// an unknown status or a negative count is refused; an oversized objective
// is cut to 4000 characters on a rune boundary.
func TestDecodeGoalMeta(t *testing.T) {
	snap, present, err := DecodeGoalMeta(json.RawMessage(`{"goal":{"objective":" Ship it ","status":"active",` +
		`"createdAt":1710000000000,"updatedAt":"2024-03-09T16:00:12Z","tokenBudget":null,"tokensUsed":42,` +
		`"timeUsedSeconds":12,"iterations":3,"lastReason":"why","controlMethod":"_session/goal"},"other":1}`))
	require.NoError(t, err)
	require.True(t, present)
	require.Equal(t, "Ship it", snap.Objective)
	require.Equal(t, int64(1710000000000), *snap.CreatedAt)
	require.Equal(t, int64(1710000012000), *snap.UpdatedAt, "an RFC 3339 timestamp reads as milliseconds")
	require.Nil(t, snap.TokenBudget)
	require.EqualValues(t, 42, *snap.TokensUsed)

	snap, present, err = DecodeGoalMeta(json.RawMessage(`{"goal":null}`))
	require.NoError(t, err)
	require.True(t, present)
	require.Nil(t, snap, "null: cleared")

	_, present, err = DecodeGoalMeta(json.RawMessage(`{"title":"x"}`))
	require.NoError(t, err)
	require.False(t, present)

	for name, bad := range map[string]string{
		"no objective":   `{"goal":{"objective":"  ","status":"active"}}`,
		"unknown status": `{"goal":{"objective":"x","status":"usageLimited"}}`,
		"negative":       `{"goal":{"objective":"x","status":"active","tokensUsed":-1}}`,
		"bad time":       `{"goal":{"objective":"x","status":"active","createdAt":"yesterday"}}`,
		"not an object":  `{"goal":[1]}`,
		"meta array":     `[]`,
	} {
		_, _, err := DecodeGoalMeta(json.RawMessage(bad))
		require.ErrorIs(t, err, errGoalMeta, name)
		require.NotContains(t, err.Error(), "usageLimited", "errors never carry peer text")
	}

	long := strings.Repeat("é", MaxGoalObjectiveChars+10)
	b, _ := json.Marshal(map[string]any{"goal": map[string]any{"objective": long, "status": "paused"}})
	snap, _, err = DecodeGoalMeta(b)
	require.NoError(t, err)
	require.Equal(t, MaxGoalObjectiveChars, utf8.RuneCountInString(snap.Objective))
}

// TestGoalProjection: the projection of a full extension lists its
// actions in the extension's order and maps the snapshot (timeUsedSeconds
// → elapsedSeconds, ISO timestamps, completedAt from updatedAt for a
// complete goal); a subset without set (claude-agent-acp's clear alone)
// or no extension is unsupported, with no goal.
func TestGoalProjection(t *testing.T) {
	full := &GoalCapability{Version: 1, ControlMethod: MethodSessionGoal, Actions: []string{"clear", "resume", "set", "pause", "clear", "stop"}}
	ms := int64(1710000012000)
	used := 3.5
	g := GoalRecord{Capability: full, Snapshot: &GoalSnapshot{Objective: "x", Status: "complete", UpdatedAt: &ms, TimeUsedSeconds: &used}}
	p := g.Project(4, true, "req")
	require.Equal(t, goalSnapshotSchema, p.Schema)
	require.Equal(t, "available", p.SessionGoals.Availability)
	require.Equal(t, []string{"set", "pause", "resume", "clear"}, p.SessionGoals.Actions)
	require.False(t, p.SessionGoals.TokenBudgetControl)
	require.Equal(t, "2024-03-09T16:00:12.000Z", *p.Goal.CompletedAt)
	require.Equal(t, 3.5, *p.Goal.ElapsedSeconds)
	require.False(t, p.WorkingNow, "a complete goal is not being worked on")
	require.Equal(t, uint64(4), p.Revision)

	for name, c := range map[string]*GoalCapability{
		"subset":  {Version: 1, ControlMethod: MethodSessionGoal, Actions: []string{"clear"}},
		"version": {Version: 2, ControlMethod: MethodSessionGoal, Actions: []string{"set", "clear"}},
		"method":  {Version: 1, ControlMethod: "_codex/session/goal_control", Actions: []string{"set", "clear"}},
		"none":    nil,
	} {
		g := GoalRecord{Capability: c, Snapshot: &GoalSnapshot{Objective: "x", Status: "active"}}
		p := g.Project(1, true, "")
		require.Equal(t, "unsupported", p.SessionGoals.Availability, name)
		require.Empty(t, p.SessionGoals.Actions, name)
		require.NotNil(t, p.SessionGoals.Actions, "an empty list, never null")
		require.Equal(t, goalReasonExtensionRequired, p.SessionGoals.ReasonCode, name)
		require.Nil(t, p.Goal, name)
		require.False(t, c.Allows(GoalClear), name)
	}
}
