package runner

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/agent"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// allGoalActions is fakeacp's --goal-actions for a full extension.
const allGoalActions = "set,pause,resume,clear"

// queueV2 queues a command under the v2 command schema (session.goal.*
// need it, prp.md §7.1).
func (h *harness) queueV2(typ, payload string) prp.Command {
	h.t.Helper()
	cmd, err := h.core.QueueCommand(prp.Command{Schema: prp.CommandSchemaV2, Type: typ, Payload: json.RawMessage(payload)})
	require.NoError(h.t, err)
	return cmd
}

// goalView is the part of a projection the tests read.
type goalView struct {
	Schema       string `json:"schema"`
	SessionGoals struct {
		Availability string   `json:"availability"`
		Actions      []string `json:"actions"`
		ReasonCode   string   `json:"reasonCode"`
	} `json:"sessionGoals"`
	Goal *struct {
		Objective   string  `json:"objective"`
		Status      string  `json:"status"`
		TokensUsed  *int64  `json:"tokensUsed"`
		Iterations  *int64  `json:"iterations"`
		CreatedAt   *string `json:"createdAt"`
		CompletedAt *string `json:"completedAt"`
	} `json:"goal"`
	Revision  uint64 `json:"revision"`
	RequestID string `json:"requestId"`
}

// goalCommand runs one goal command to completion and checks what the
// issue asks of it: a completed projection result, then exactly two new
// P0 events: session.capabilities.updated, then wantEvent carrying the
// result as its payload. Result and payloads validate against the required
// field list (the share has no session-goal schema) and every envelope
// against the reference v2 event schema.
func goalCommand(t *testing.T, h *harness, schemas *prpschema.Set, typ, payload, wantEvent string) goalView {
	t.Helper()
	before := len(h.core.Snapshot().Events)
	res := h.waitResult(h.queueV2(typ, payload).CommandID)
	require.Equal(t, "completed", res.Status, "%s %s: %s", typ, payload, res.Result)
	require.NoError(t, prpschema.Validate(schemas.GoalProjection, res.Result), "result %s", res.Result)
	s := h.waitCore(func(s control.Snapshot) bool { return len(s.Events) >= before+2 })
	evs := prptest.DecodeEvents(t, s.Events[before:])
	require.Equal(t, prp.EventSessionCapabilitiesUpdated, evs[0].EventType)
	require.Equal(t, wantEvent, evs[1].EventType)
	require.NoError(t, prpschema.Validate(schemas.GoalCapabilities, evs[0].Payload), "capabilities %s", evs[0].Payload)
	require.JSONEq(t, string(res.Result), string(evs[1].Payload), "the event carries the result")
	for _, raw := range s.Events[before : before+2] {
		var env struct {
			Payload struct {
				Priority      int `json:"priority"`
				SchemaVersion int `json:"schemaVersion"`
			} `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(raw, &env))
		require.Zero(t, env.Payload.Priority, "P0")
		require.Equal(t, 2, env.Payload.SchemaVersion)
		var whole struct {
			Payload json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(raw, &whole))
		require.NoError(t, prpschema.Validate(schemas.EventV2, whole.Payload))
	}
	var v goalView
	require.NoError(t, json.Unmarshal(res.Result, &v))
	return v
}

// TestGoalActionsThroughRunnerd: session.goal.get, .set (a new objective:
// set; a status alone: pause, resume) and .clear against fakeacp's goal
// extension, end to end through runnerd: each answers the projection the
// agent's session_info_update._meta.goal published, with the two P0
// events; a goal the agent completes during a turn arrives as an
// autonomous session.goal.updated; the record keeps the snapshot.
func TestGoalActionsThroughRunnerd(t *testing.T) {
	schemas := prpschema.Load(t)
	if schemas.GoalSchemaMissing {
		t.Log("the share lacks prp/v2/session-goal.schema.json: validating against the issue's field list")
	}
	h := newHarness(t, nil)
	run := h.agentRun()
	h.prepareFake("--goal-actions", allGoalActions)
	require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
	// session.open reports the goal state after session.started, as the
	// reference does.
	s := h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), prp.EventSessionGoalSnapshot)) == 1
	})
	var opened []string
	for _, e := range prptest.DecodeEvents(t, s.Events) {
		switch e.EventType {
		case "session.started", prp.EventSessionCapabilitiesUpdated, prp.EventSessionGoalSnapshot:
			opened = append(opened, e.EventType)
			if e.EventType == prp.EventSessionGoalSnapshot {
				require.NoError(t, prpschema.Validate(schemas.GoalProjection, e.Payload), "%s", e.Payload)
			}
		}
	}
	require.Equal(t, []string{"session.started", prp.EventSessionCapabilitiesUpdated, prp.EventSessionGoalSnapshot}, opened)

	v := goalCommand(t, h, schemas, "session.goal.get", `{}`, prp.EventSessionGoalSnapshot)
	require.Equal(t, "paperclip.session_goal.snapshot.v1", v.Schema)
	require.Equal(t, "available", v.SessionGoals.Availability)
	require.Equal(t, []string{"set", "pause", "resume", "clear"}, v.SessionGoals.Actions)
	require.Nil(t, v.Goal)
	rev := v.Revision

	v = goalCommand(t, h, schemas, "session.goal.set", `{"requestId":"req-1","objective":"Ship the change","tokenBudget":null}`, prp.EventSessionGoalUpdated)
	require.Equal(t, "req-1", v.RequestID)
	require.NotNil(t, v.Goal)
	require.Equal(t, "Ship the change", v.Goal.Objective)
	require.Equal(t, "active", v.Goal.Status)
	require.Equal(t, "2024-03-09T16:00:01.000Z", *v.Goal.CreatedAt, "fakeacp's fixed clock, as ISO")
	require.Greater(t, v.Revision, rev)
	rev = v.Revision

	v = goalCommand(t, h, schemas, "session.goal.set", `{"status":"paused"}`, prp.EventSessionGoalUpdated)
	require.Equal(t, "paused", v.Goal.Status, "a status alone is pause")
	require.Equal(t, "Ship the change", v.Goal.Objective)
	v = goalCommand(t, h, schemas, "session.goal.set", `{"status":"active"}`, prp.EventSessionGoalUpdated)
	require.Equal(t, "active", v.Goal.Status, "then resume")
	require.Greater(t, v.Revision, rev)

	// The agent completes the goal during a turn: an autonomous update.
	before := len(h.core.Snapshot().Events)
	require.Equal(t, "completed", h.waitResult(h.queue("turn.start", `{"text":"goal"}`).CommandID).Status)
	s = h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(t, s.Events[before:]), "run.terminal")) == 1
	})
	updates := prptest.OfType(prptest.DecodeEvents(t, s.Events[before:]), prp.EventSessionGoalUpdated)
	require.Len(t, updates, 1)
	require.NoError(t, prpschema.Validate(schemas.GoalProjection, updates[0].Payload), "%s", updates[0].Payload)
	var auto goalView
	require.NoError(t, json.Unmarshal(updates[0].Payload, &auto))
	require.Equal(t, "complete", auto.Goal.Status)
	require.EqualValues(t, 100, *auto.Goal.TokensUsed)
	require.EqualValues(t, 1, *auto.Goal.Iterations)
	require.NotNil(t, auto.Goal.CompletedAt, "a complete goal has completedAt")
	require.Greater(t, auto.Revision, v.Revision)

	v = goalCommand(t, h, schemas, "session.goal.get", `{"requestId":"req-2"}`, prp.EventSessionGoalSnapshot)
	require.Equal(t, "complete", v.Goal.Status, "get answers the recorded snapshot")
	require.Equal(t, "req-2", v.RequestID)

	v = goalCommand(t, h, schemas, "session.goal.clear", `{}`, prp.EventSessionGoalCleared)
	require.Nil(t, v.Goal)
	require.Equal(t, "available", v.SessionGoals.Availability)

	run.cancel()
	require.NoError(t, run.wait(t))
	var rec struct {
		Session struct {
			Goal json.RawMessage `json:"goal"`
		} `json:"session"`
	}
	ok, err := h.readState().Record(agentRecord, &rec)
	require.NoError(t, err)
	require.True(t, ok)
	require.JSONEq(t, `{"capability":{"version":1,"controlMethod":"_session/goal","actions":["set","pause","resume","clear"]},"revision":8}`,
		string(rec.Session.Goal), "the record keeps the capability and the revision; the cleared goal is gone")
}

// TestGoalRefusals: a set with a non-null tokenBudget, an action the
// agent does not advertise, and every action against an agent without the
// extension are rejected {code: session_goal_action_unavailable} with no
// event; get without the extension answers availability unsupported (as
// the reference's projection does); interaction.receipt and
// session.budget.increase are rejected {code: provider_command_unavailable}.
func TestGoalRefusals(t *testing.T) {
	schemas := prpschema.Load(t)
	for name, flags := range map[string][]string{
		"subset": {"--goal-actions", "clear"}, // claude-agent-acp's: no set, so not available
		"none":   nil,
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.agentRun()
			h.prepareFake(flags...)
			require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
			// An agent that advertised no extension opens normally; one
			// that advertised an unusable one reports it unsupported.
			atOpen := map[string]int{"subset": 1, "none": 0}[name]
			v := goalCommand(t, h, schemas, "session.goal.get", `{}`, prp.EventSessionGoalSnapshot)
			require.Len(t, prptest.OfType(prptest.DecodeEvents(t, h.core.Snapshot().Events), prp.EventSessionGoalSnapshot), atOpen+1)
			require.Equal(t, "unsupported", v.SessionGoals.Availability)
			require.Empty(t, v.SessionGoals.Actions)
			require.Equal(t, "persistent_session_goal_extension_required", v.SessionGoals.ReasonCode)
			before := len(h.core.Snapshot().Events)
			for _, c := range []struct{ typ, payload string }{
				{"session.goal.set", `{"objective":"x"}`},
				{"session.goal.set", `{"status":"paused"}`},
				{"session.goal.clear", `{}`},
			} {
				res := h.waitResult(h.queueV2(c.typ, c.payload).CommandID)
				require.Equal(t, "rejected", res.Status, "%s %s", c.typ, c.payload)
				require.Equal(t, agent.CodeGoalActionUnavailable, resultCodeOf(t, res))
			}
			for _, typ := range []string{"interaction.receipt", "session.budget.increase"} {
				res := h.waitResult(h.queue(typ, `{}`).CommandID)
				require.Equal(t, "rejected", res.Status, typ)
				require.Equal(t, agent.CodeProviderCommandUnavailable, resultCodeOf(t, res), typ)
			}
			require.Len(t, h.core.Snapshot().Events, before, "a refusal emits nothing")
		})
	}
	t.Run("tokenBudget", func(t *testing.T) {
		h := newHarness(t, nil)
		h.agentRun()
		h.prepareFake("--goal-actions", allGoalActions)
		require.Equal(t, "completed", h.waitResult(h.queue("session.open", `{}`).CommandID).Status)
		res := h.waitResult(h.queueV2("session.goal.set", `{"objective":"x","tokenBudget":1000}`).CommandID)
		require.Equal(t, "rejected", res.Status)
		require.Equal(t, agent.CodeGoalActionUnavailable, resultCodeOf(t, res))
		require.Contains(t, string(res.Result), "does not support token budget control")
		v := goalCommand(t, h, schemas, "session.goal.get", `{}`, prp.EventSessionGoalSnapshot)
		require.Nil(t, v.Goal, "the refused set never reached the agent")
	})
}
