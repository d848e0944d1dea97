package main

import (
	"encoding/json"
	"slices"
	"strings"
)

// The ACP goal extension (codex-acp docs/goal-extension.md), behind
// --goal-actions: initialize advertises _meta.goal with those actions,
// _session/goal honours them, and every change is published as
// session_info_update._meta.goal (null once cleared) before the answer.

// goalMethod is the extension's control method.
const goalMethod = "_session/goal"

// goalEpochMs is the fixed clock of goal timestamps: output carries no
// wall-clock content, so each change advances it by one second.
const goalEpochMs = 1_710_000_000_000

// goalState is a session's goal; nil when none.
type goalState struct {
	Objective  string `json:"objective"`
	Status     string `json:"status"`
	CreatedAt  int64  `json:"createdAt"`
	UpdatedAt  int64  `json:"updatedAt"`
	TokensUsed int64  `json:"tokensUsed"`
	Iterations int64  `json:"iterations"`
}

// goalActions parses --goal-actions ("" = the extension is not advertised).
func (a *agent) goalActions() []string {
	var out []string
	for _, s := range strings.Split(a.cfg.goalActions, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// goalMeta is the initialize result's _meta, or nil without the switch.
func (a *agent) goalMeta() map[string]any {
	acts := a.goalActions()
	if len(acts) == 0 {
		return nil
	}
	return map[string]any{"goal": map[string]any{"version": 1, "controlMethod": goalMethod, "actions": acts}}
}

// goalTick is the next goal timestamp; a.mu is held.
func (a *agent) goalTick() int64 {
	a.counters["goal-clock"]++
	return goalEpochMs + int64(a.counters["goal-clock"])*1000
}

// goalControl serves _session/goal {sessionId, action, objective?}.
func (a *agent) goalControl(m message) {
	acts := a.goalActions()
	var p struct {
		SessionID string `json:"sessionId"`
		Action    string `json:"action"`
		Objective string `json:"objective"`
	}
	if len(acts) == 0 {
		a.fail(m.ID, -32601, "method not found")
		return
	}
	if json.Unmarshal(m.Params, &p) != nil || p.SessionID == "" || !slices.Contains(acts, p.Action) ||
		(p.Action == "set" && strings.TrimSpace(p.Objective) == "") {
		a.fail(m.ID, -32602, "invalid params")
		return
	}
	a.mu.Lock()
	s := a.sessions[p.SessionID]
	if s == nil {
		a.mu.Unlock()
		a.fail(m.ID, -32002, "resource not found")
		return
	}
	switch p.Action {
	case "set":
		now := a.goalTick()
		s.goal = &goalState{Objective: strings.TrimSpace(p.Objective), Status: "active", CreatedAt: now, UpdatedAt: now}
	case "pause", "resume":
		if s.goal == nil {
			a.mu.Unlock()
			a.fail(m.ID, -32602, "no goal is set")
			return
		}
		s.goal.Status = map[string]string{"pause": "paused", "resume": "active"}[p.Action]
		s.goal.UpdatedAt = a.goalTick()
	case "clear":
		s.goal = nil
	}
	a.mu.Unlock()
	a.publishGoal(s)
	a.reply(m.ID, map[string]any{})
}

// publishGoal sends the session's goal as session_info_update._meta.goal.
func (a *agent) publishGoal(s *session) {
	a.mu.Lock()
	var g any // null once cleared
	if s.goal != nil {
		c := *s.goal
		g = map[string]any{"objective": c.Objective, "status": c.Status, "createdAt": c.CreatedAt,
			"updatedAt": c.UpdatedAt, "tokenBudget": nil, "tokensUsed": c.TokensUsed,
			"timeUsedSeconds": (c.UpdatedAt - c.CreatedAt) / 1000, "iterations": c.Iterations,
			"controlMethod": goalMethod}
	}
	a.mu.Unlock()
	a.notify("session/update", map[string]any{"sessionId": s.id, "update": map[string]any{
		"sessionUpdate": "session_info_update", "_meta": map[string]any{"goal": g}}})
}

// goalPrompt is the prompt scenario `goal`: an active goal advances one
// iteration (100 tokens) and completes, published during the turn as an
// autonomous update; without a goal it says so.
func (t *turn) goalPrompt() {
	a := t.a
	a.mu.Lock()
	g := t.s.goal
	status := ""
	if g != nil {
		if g.Status == "active" {
			g.Iterations++
			g.TokensUsed += 100
			g.Status = "complete"
			g.UpdatedAt = a.goalTick()
		}
		status = g.Status
	}
	a.mu.Unlock()
	if g == nil {
		t.say("no goal")
		return
	}
	a.publishGoal(t.s)
	t.say("goal " + status)
}
