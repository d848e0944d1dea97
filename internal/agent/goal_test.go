package agent

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// goal runs one goal command on the rig's Manager and checks that the
// result was recorded as completed in the same commit as its two events:
// session.capabilities.updated, then wantEvent (prp.md §7.2 item 8).
func (r *rig) goal(id string, cmd GoalCommand, payload, wantEvent string) provider.GoalProjection {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	res, err := r.m.Goal(ctx, id, cmd, json.RawMessage(payload))
	require.NoError(r.t, err, "%s %s", id, payload)
	r.sink.mu.Lock()
	out, evs := r.sink.outcomes[id], r.sink.outcomeEvents[id]
	r.sink.mu.Unlock()
	require.Equal(r.t, outcomeCompleted, out.Status)
	require.JSONEq(r.t, string(res), string(out.Result))
	require.Equal(r.t, []string{prp.EventSessionCapabilitiesUpdated, wantEvent}, evs[len(evs)-2:])
	var p provider.GoalProjection
	require.NoError(r.t, json.Unmarshal(res, &p))
	return p
}

// goalErr runs a goal command expecting an error.
func (r *rig) goalErr(cmd GoalCommand, payload string) error {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err := r.m.Goal(ctx, "cmd-goal-err", cmd, json.RawMessage(payload))
	require.Error(r.t, err)
	return err
}

// TestGoalActionsThroughAgent: each goal action against fakeacp's
// extension through the Manager: the projection follows what the agent
// published; an action the agent refuses fails without a goal change; a
// runnerd restart (a new Manager re-adopting the live agent) keeps the
// snapshot and the capability from the record and still drives the agent.
func TestGoalActionsThroughAgent(t *testing.T) {
	r := newRig(t)
	r.prepare("--goal-actions", "set,pause,resume,clear")
	r.open()

	p := r.goal("g1", GoalGet, `{}`, prp.EventSessionGoalSnapshot)
	require.Equal(t, "available", p.SessionGoals.Availability)
	require.Nil(t, p.Goal)

	// fakeacp refuses pause without a goal: a failure, not a projection.
	var ce *CommandError
	require.ErrorAs(t, r.goalErr(GoalSet, `{"status":"paused"}`), &ce)
	require.Equal(t, codeCommandExecutionFailed, ce.Code)
	require.Equal(t, "the agent refused the goal control", ce.Message, "never the agent's text")

	p = r.goal("g2", GoalSet, `{"objective":"Ship the change","status":"active"}`, prp.EventSessionGoalUpdated)
	require.Equal(t, "Ship the change", p.Goal.Objective)
	require.Equal(t, "active", p.Goal.Status)
	p = r.goal("g3", GoalSet, `{"status":"paused"}`, prp.EventSessionGoalUpdated)
	require.Equal(t, "paused", p.Goal.Status)
	pausedAt := *p.Goal.UpdatedAt

	// A new Manager over the same record: runnerd restarted, the agent lives.
	st, _ := r.sink.snapshot()
	r.m.Close()
	r.m = NewManager(r.cfg, st)
	require.NoError(t, r.m.Start())
	p = r.goal("g4", GoalGet, `{}`, prp.EventSessionGoalSnapshot)
	require.Equal(t, "paused", p.Goal.Status, "the snapshot lives in the session record")
	require.Equal(t, pausedAt, *p.Goal.UpdatedAt)
	p = r.goal("g5", GoalSet, `{"status":"active"}`, prp.EventSessionGoalUpdated)
	require.Equal(t, "active", p.Goal.Status, "resume reaches the adopted agent")
	require.Greater(t, p.Revision, uint64(4))

	p = r.goal("g6", GoalClear, `{"requestId":"r-9"}`, prp.EventSessionGoalCleared)
	require.Nil(t, p.Goal)
	require.Equal(t, "r-9", p.RequestID)
	st, _ = r.sink.snapshot()
	require.Nil(t, st.Session.Goal.Snapshot)
}

// TestGoalRefusalsThroughAgent: without the extension every action is a
// Rejection session_goal_action_unavailable (get answers unsupported);
// a non-null tokenBudget is refused before the agent is asked; a bad
// objective or status fails; no open session fails.
func TestGoalRefusalsThroughAgent(t *testing.T) {
	r := newRig(t)
	var ce *CommandError
	require.ErrorAs(t, r.goalErr(GoalGet, `{}`), &ce, "no session yet")
	r.prepare()
	r.open()
	p := r.goal("g1", GoalGet, `{}`, prp.EventSessionGoalSnapshot)
	require.Equal(t, "unsupported", p.SessionGoals.Availability)
	for _, c := range []struct {
		cmd     GoalCommand
		payload string
	}{{GoalSet, `{"objective":"x"}`}, {GoalSet, `{}`}, {GoalClear, `{}`}, {GoalSet, `{"objective":"x","tokenBudget":5}`}} {
		var rej *CommandError
		require.ErrorAs(t, r.goalErr(c.cmd, c.payload), &rej, c.payload)
		require.Equal(t, CodeGoalActionUnavailable, rej.Code)
		require.True(t, rej.Rejected, "refused before any effect")
	}
	for _, bad := range []string{`{"objective":""}`, `{"objective":"  "}`, `{"status":"done"}`, `[]`} {
		require.ErrorAs(t, r.goalErr(GoalSet, bad), &ce, bad)
		require.Equal(t, codeCommandExecutionFailed, ce.Code)
	}
	var rej *CommandError
	require.ErrorAs(t, ProviderCommandUnavailable(), &rej)
	require.Equal(t, CodeProviderCommandUnavailable, rej.Code)
	require.True(t, rej.Rejected)
}
