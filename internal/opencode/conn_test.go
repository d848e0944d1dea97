package opencode

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

// TestOpenCodeAuth: the server takes only its per-session password
// (codex.md §6); a wrong one is errUnauthorized, and the password is in
// no error.
func TestOpenCodeAuth(t *testing.T) {
	srv := startFake(t, "right-password")
	cl, err := newClient(srv.url, "wrong-password")
	require.NoError(t, err)
	defer cl.Close()
	_, err = cl.createSession(context.Background(), "")
	require.ErrorIs(t, err, errUnauthorized)
	require.NotContains(t, err.Error(), "password")
	_, err = cl.events(context.Background())
	require.ErrorIs(t, err, errUnauthorized)
	resp, err := http.Get(srv.url + "/session/status")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// TestOpenCodeTextTurn: a prompt's deltas become one assistant message
// item, the idle its settlement; the PRP events are schema-valid and the
// prompt body is what OpenCode 1.18 takes.
func TestOpenCodeTextTurn(t *testing.T) {
	srv := startFake(t, "pw-text")
	c, col, _ := newConn(t, srv)
	require.NoError(t, c.prompt(context.Background(), "turn-1", Prompt{ProviderID: "fake", ModelID: "fake-model",
		System: "be brief", Text: "FAKEOC: text alpha beta gamma"}))
	in := col.waitFor(t, "settlement", settled)
	require.Equal(t, "alpha beta gamma", textOf(in, provider.UpdateAgentMessageChunk))
	last := in[len(in)-1]
	require.Equal(t, provider.KindTurnSettled, last.Kind)
	require.Equal(t, provider.StopEndTurn, last.Outcome.StopReason)
	require.NotNil(t, last.Outcome.Usage)
	require.Equal(t, int64(10), last.Outcome.Usage.InputTokens)
	require.Equal(t, int64(3), last.Outcome.Usage.OutputTokens)
	_, st := col.snapshot()
	require.Empty(t, st.TurnID)
	require.Empty(t, st.Parts, "a settled turn's parts are forgotten: the state stays one turn large")

	evs := mapEvents(t, "turn-1", in, false)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, 1, count(evs, "turn.completed"), "%v", eventTypes(evs))
	require.Equal(t, 1, count(evs, "run.terminal"))
	require.Equal(t, 1, count(evs, "item.started"))

	b, err := os.ReadFile(srv.record)
	require.NoError(t, err)
	var prompt map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r struct {
			Path string         `json:"path"`
			Body map[string]any `json:"body"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &r))
		if strings.HasSuffix(r.Path, "/prompt_async") {
			prompt = r.Body
		}
	}
	require.Equal(t, map[string]any{"model": map[string]any{"providerID": "fake", "modelID": "fake-model"},
		"system": "be brief", "parts": []any{map[string]any{"type": "text", "text": "FAKEOC: text alpha beta gamma"}}}, prompt)
	require.NotContains(t, string(b), "pw-text", "the record holds no credential")

	// The session is still usable: a second turn.
	require.NoError(t, c.prompt(context.Background(), "turn-2", Prompt{Text: "FAKEOC: text again"}))
	in = col.waitFor(t, "second settlement", func(in []provider.Inbound) bool {
		n := 0
		for _, m := range in {
			if m.Kind == provider.KindTurnSettled {
				n++
			}
		}
		return n == 2
	})
	require.Equal(t, "alpha beta gammaagain", textOf(in, provider.UpdateAgentMessageChunk))
}

// TestOpenCodeToolTurn: a bash tool part becomes tool_call then its
// completion, mapped to tool.execution.started/completed (an execute).
func TestOpenCodeToolTurn(t *testing.T) {
	srv := startFake(t, "pw-tool")
	c, col, _ := newConn(t, srv)
	require.NoError(t, c.prompt(context.Background(), "turn-1", Prompt{Text: "FAKEOC: tool ls -la"}))
	in := col.waitFor(t, "settlement", settled)
	evs := mapEvents(t, "turn-1", in, false)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, 1, count(evs, "tool.execution.started"), "%v", eventTypes(evs))
	require.Equal(t, 1, count(evs, "tool.execution.completed"))
	for _, e := range evs {
		if e.EventType == "tool.execution.completed" {
			require.Equal(t, "completed", e.Payload["status"])
			require.Equal(t, "ran: ls -la", e.Payload["output"])
			require.Equal(t, "execute", e.Payload["operation"])
		}
	}
	require.Equal(t, "done", textOf(in, provider.UpdateAgentMessageChunk))
}

// TestOpenCodePermission: permission.asked becomes a
// session/request_permission request with OpenCode's id; the chosen
// option goes back through /permission/{id}/reply.
func TestOpenCodePermission(t *testing.T) {
	for _, tc := range []struct {
		option, status string
	}{{replyOnce, "completed"}, {replyReject, "failed"}} {
		t.Run(tc.option, func(t *testing.T) {
			srv := startFake(t, "pw-perm")
			c, col, _ := newConn(t, srv)
			require.NoError(t, c.prompt(context.Background(), "turn-1", Prompt{Text: "FAKEOC: permission rm -rf build"}))
			in := col.waitFor(t, "permission request", hasPermission)
			var req provider.Inbound
			for _, m := range in {
				if m.Kind == provider.KindRequest {
					req = m
				}
			}
			require.Equal(t, "session/request_permission", req.Method)
			require.Equal(t, "bash: rm -rf build", req.Permission.ToolCall.Title)
			var id string
			require.NoError(t, json.Unmarshal(req.ID, &id))
			require.True(t, strings.HasPrefix(id, "per_"), id)
			require.NoError(t, c.reply(context.Background(), id, tc.option))
			in = col.waitFor(t, "settlement", settled)
			evs := mapEvents(t, "turn-1", in, false)
			prpschema.RequireValidEvents(t, evs)
			require.Equal(t, 1, count(evs, "runtime_request.created"), "%v", eventTypes(evs))
			for _, e := range evs {
				if e.EventType == "tool.execution.completed" {
					require.Equal(t, tc.status, e.Payload["status"])
				}
			}
		})
	}
}

// TestOpenCodeAbort: cancel aborts the running turn; it settles
// cancelled once (turn.interrupted, or turn.cancelled for run.cancel) and
// the server keeps the session.
func TestOpenCodeAbort(t *testing.T) {
	srv := startFake(t, "pw-abort")
	c, col, _ := newConn(t, srv)
	require.NoError(t, c.prompt(context.Background(), "turn-1", Prompt{Text: "FAKEOC: slow 1000 20"}))
	col.waitFor(t, "the first delta", func(in []provider.Inbound) bool { return textOf(in, provider.UpdateAgentMessageChunk) != "" })
	require.NoError(t, c.cancel(context.Background()))
	in := col.waitFor(t, "settlement", settled)
	last := in[len(in)-1]
	require.True(t, last.Outcome.Cancelled)
	require.Equal(t, provider.StopCancelled, last.Outcome.StopReason)
	evs := mapEvents(t, "turn-1", in, false)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, 1, count(evs, "turn.interrupted"), "%v", eventTypes(evs))
	require.Equal(t, 1, count(mapEvents(t, "turn-1", in, true), "turn.cancelled"))
	require.ErrorIs(t, c.cancel(context.Background()), provider.ErrNoTurn)

	require.NoError(t, c.prompt(context.Background(), "turn-2", Prompt{Text: "FAKEOC: text still here"}))
	col.waitFor(t, "second turn", func(in []provider.Inbound) bool {
		return strings.HasSuffix(textOf(in, provider.UpdateAgentMessageChunk), "still here")
	})
}

// TestOpenCodeFailedTurn: a session.error fails the turn with a class,
// naming only the error's name.
func TestOpenCodeFailedTurn(t *testing.T) {
	srv := startFake(t, "pw-err")
	c, col, _ := newConn(t, srv)
	require.NoError(t, c.prompt(context.Background(), "turn-1", Prompt{Text: "FAKEOC: error APIError"}))
	in := col.waitFor(t, "settlement", settled)
	last := in[len(in)-1].Outcome
	require.Error(t, last.Err)
	require.Equal(t, provider.ClassTurnFailed, provider.ClassOf(last.Err))
	require.NotContains(t, last.Err.Error(), "fakeopencode:", "the server's message stays out")
	evs := mapEvents(t, "turn-1", in, false)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, 1, count(evs, "turn.failed"), "%v", eventTypes(evs))
}

// TestOpenCodePlanAndReasoning: todo.updated is a plan, a reasoning part
// a reasoning item.
func TestOpenCodePlanAndReasoning(t *testing.T) {
	srv := startFake(t, "pw-plan")
	c, col, _ := newConn(t, srv)
	require.NoError(t, c.prompt(context.Background(), "turn-1", Prompt{Text: "FAKEOC: todo"}))
	in := col.waitFor(t, "settlement", settled)
	evs := mapEvents(t, "turn-1", in, false)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, 1, count(evs, "plan.updated"), "%v", eventTypes(evs))

	require.NoError(t, c.prompt(context.Background(), "turn-2", Prompt{Text: "FAKEOC: reasoning think hard"}))
	in = col.waitFor(t, "second settlement", func(in []provider.Inbound) bool {
		return textOf(in, provider.UpdateAgentThoughtChunk) == "think hard" && settled(in[len(in)-1:])
	})
	require.Equal(t, "planneddone", textOf(in, provider.UpdateAgentMessageChunk))
}

// TestOpenCodeDroppedStreamRecovers: the event stream drops mid-turn and
// the rest of the turn happens unseen; after the reconnect the message
// list fills the gap, so the text is whole and exactly once, and the
// turn settles once.
func TestOpenCodeDroppedStreamRecovers(t *testing.T) {
	srv := startFake(t, "pw-drop")
	c, col, _ := newConn(t, srv)
	require.NoError(t, c.prompt(context.Background(), "turn-1", Prompt{Text: "FAKEOC: drop one two three four"}))
	in := col.waitFor(t, "settlement", settled)
	require.Equal(t, "one two three four", textOf(in, provider.UpdateAgentMessageChunk))
	evs := mapEvents(t, "turn-1", in, false)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, 1, count(evs, "turn.completed"))
	require.Equal(t, 1, count(evs, "item.started"), "%v", eventTypes(evs))
	for _, e := range evs {
		if e.EventType == "item.completed" {
			require.Equal(t, "one two three four", e.Payload["text"])
		}
	}
}

// TestOpenCodeRestartRecovers: runnerd stops mid-turn (its stream goes
// with it) and a new Conn resumes from the committed state: the turn's
// text is whole and exactly once across both, and it settles once.
func TestOpenCodeRestartRecovers(t *testing.T) {
	srv := startFake(t, "pw-restart")
	c, col, stop := newConn(t, srv)
	require.NoError(t, c.prompt(context.Background(), "turn-1", Prompt{Text: "FAKEOC: slow 40 10"}))
	col.waitFor(t, "some deltas", func(in []provider.Inbound) bool { return len(textOf(in, provider.UpdateAgentMessageChunk)) >= 15 })
	require.ErrorIs(t, stop(), context.Canceled)
	before, st := col.snapshot() // what the Manager committed
	require.NotEmpty(t, st.TurnID)

	cl, err := newClient(srv.url, srv.password)
	require.NoError(t, err)
	defer cl.Close()
	col2 := newCollector()
	c2 := NewConn(cl, st, col2.sink)
	runConn(t, c2)
	after := col2.waitFor(t, "settlement after the restart", settled)
	all := append(before, after...)
	require.Equal(t, strings.Repeat("slow ", 40), textOf(all, provider.UpdateAgentMessageChunk))
	evs := mapEvents(t, "turn-1", all, false)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, 1, count(evs, "turn.completed"), "%v", eventTypes(evs))
	require.Equal(t, 1, count(evs, "item.started"))
}

// TestOpenCodePromptRefused: a refused prompt leaves no active turn.
func TestOpenCodePromptRefused(t *testing.T) {
	srv := startFake(t, "pw-refuse")
	cl, err := newClient(srv.url, srv.password)
	require.NoError(t, err)
	defer cl.Close()
	c := NewConn(cl, State{SessionID: "ses_missing"}, func(State, []provider.Inbound) {})
	runConn(t, c)
	err = c.prompt(context.Background(), "turn-1", Prompt{Text: "x"})
	var se *statusError
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, http.StatusNotFound, se.Status)
	require.Empty(t, c.state().TurnID)
}
