package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/acpx/acpxtest"
	"github.com/pcrunner/pcrunner/internal/provider"
)

// TestGoalExtension: --goal-actions advertises _meta.goal in initialize
// and serves _session/goal for the advertised actions only; set needs an
// objective; unknown sessions get -32002; without the switch the method
// is unknown.
func TestGoalExtension(t *testing.T) {
	cfg := defaults(t)
	cfg.goalActions = "set,clear"
	p := startInProcess(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	require.NoError(t, p.conn.Open(ctx, acpxtest.OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/work/repo"}))
	g := p.conn.Record().Goal
	require.NotNil(t, g)
	require.Equal(t, &provider.GoalCapability{Version: 1, ControlMethod: provider.MethodSessionGoal, Actions: []string{"set", "clear"}}, g.Capability)
	sid := p.conn.Record().ACPSessionID
	_, err := p.conn.Call(ctx, goalMethod, map[string]any{"sessionId": sid, "action": "set", "objective": "Ship"})
	require.NoError(t, err)
	for _, tc := range []struct {
		params map[string]any
		code   int
	}{
		{map[string]any{"sessionId": sid, "action": "pause"}, provider.CodeInvalidParams},
		{map[string]any{"sessionId": sid, "action": "set", "objective": " "}, provider.CodeInvalidParams},
		{map[string]any{"sessionId": "sess-9999", "action": "clear"}, provider.CodeResourceNotFound},
	} {
		_, err := p.conn.Call(ctx, goalMethod, tc.params)
		var re *provider.RPCError
		require.ErrorAs(t, err, &re, "%v", tc.params)
		require.Equal(t, tc.code, re.Code, "%v", tc.params)
	}
	_, err = p.conn.Call(ctx, goalMethod, map[string]any{"sessionId": sid, "action": "clear"})
	require.NoError(t, err)

	plain := startInProcess(t, defaults(t))
	require.NoError(t, plain.conn.Open(ctx, acpxtest.OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/work/repo"}))
	require.Nil(t, plain.conn.Record().Goal, "no extension without the switch")
	_, err = plain.conn.Call(ctx, goalMethod, map[string]any{"sessionId": plain.conn.Record().ACPSessionID, "action": "clear"})
	var re *provider.RPCError
	require.ErrorAs(t, err, &re)
	require.Equal(t, provider.CodeMethodNotFound, re.Code)
}
