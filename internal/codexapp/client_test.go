package codexapp

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
)

func TestThreadStartRecordsThreadID(t *testing.T) {
	cl := provider.NewCore(provider.Record{}, nil, provider.Dialect{})
	c := New(cl)
	call, err := c.threadStart(threadStartParams{Cwd: "/w", ApprovalPolicy: "never", Sandbox: "danger-full-access"})
	require.NoError(t, err)
	var sent map[string]any
	require.NoError(t, json.Unmarshal(call.Line, &sent))
	require.NotContains(t, sent, "jsonrpc")
	require.Equal(t, []any{}, sent["params"].(map[string]any)["dynamicTools"])
	ins, err := c.feed([]byte(`{"id":1,"result":{"thread":{"id":"thr-9"}}}` + "\n"))
	require.NoError(t, err)
	require.Len(t, ins, 1)
	require.NoError(t, ins[0].Err)
	require.Equal(t, "thr-9", c.threadID())
}

func TestThreadStartBounds(t *testing.T) {
	c := New(provider.NewCore(provider.Record{}, nil, provider.Dialect{}))
	tools := make([]dynamicTool, maxDynamicTools+1)
	_, err := c.threadStart(threadStartParams{DynamicTools: tools})
	require.Error(t, err)
}

func TestTurnLifecycle(t *testing.T) {
	cl := provider.NewCore(provider.Record{ACPSessionID: "thr"}, nil, provider.Dialect{})
	c := New(cl)
	call, err := c.turnStart("turn-1", "hi")
	require.NoError(t, err)
	_, err = c.turnStart("turn-2", "again")
	require.ErrorIs(t, err, provider.ErrTurnActive)
	feed := func(s string) []provider.Inbound {
		ins, err := c.feed([]byte(s + "\n"))
		require.NoError(t, err)
		return ins
	}
	feed(`{"id":` + jsonInt(call.ID) + `,"result":{"turn":{"id":"u-7","status":"inProgress"}}}`)
	require.Equal(t, "u-7", cl.Wire().Turn.ProviderTurnID)
	ins := feed(`{"method":"item/agentMessage/delta","params":{"threadId":"thr","turnId":"u-7","itemId":"m","delta":"yo"}}`)
	require.Len(t, ins, 1)
	require.Equal(t, provider.UpdateAgentMessageChunk, ins[0].Update.Kind)
	require.Empty(t, feed(`{"method":"item/agentMessage/delta","params":{"threadId":"other","turnId":"u-7","itemId":"m","delta":"no"}}`))
	require.Empty(t, feed(`{"method":"item/agentMessage/delta","params":{"threadId":"thr","turnId":"u-8","itemId":"m","delta":"no"}}`))
	lines, err := c.interrupt()
	require.NoError(t, err)
	require.Len(t, lines, 1)
	require.Contains(t, string(lines[0]), `"turnId":"u-7"`)
	ins = feed(`{"method":"turn/completed","params":{"threadId":"thr","turn":{"id":"u-7","status":"interrupted"}}}`)
	require.Len(t, ins, 1)
	require.Equal(t, provider.KindTurnSettled, ins[0].Kind)
	require.True(t, ins[0].Outcome.Cancelled)
	require.Nil(t, cl.Wire().Turn)
}

func TestJunkLinesFailAfterTheBound(t *testing.T) {
	c := New(provider.NewCore(provider.Record{}, nil, provider.Dialect{}))
	for i := 0; i < provider.MaxConsecutiveBadLines-1; i++ {
		_, err := c.feed([]byte("junk\n"))
		require.NoError(t, err)
	}
	_, err := c.feed([]byte("junk\n"))
	require.ErrorIs(t, err, provider.ErrTooManyBadLines)
}

func TestLineBound(t *testing.T) {
	c := New(provider.NewCore(provider.Record{}, nil, provider.Dialect{}))
	big := make([]byte, maxLineBytes+1)
	_, err := c.feed(big)
	require.ErrorIs(t, err, provider.ErrFrameExceeded)
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestEarlyBound: more than maxEarlyMessages messages before the thread id
// fail the stream; after thread/start nothing is counted.
func TestEarlyBound(t *testing.T) {
	c := New(provider.NewCore(provider.Record{}, nil, provider.Dialect{}))
	note := []byte(`{"method":"configWarning","params":{}}` + "\n")
	for i := 0; i < maxEarlyMessages; i++ {
		_, err := c.feed(note)
		require.NoError(t, err)
	}
	_, err := c.feed(note)
	require.ErrorIs(t, err, errEarlyBound)

	c = New(provider.NewCore(provider.Record{ACPSessionID: "thr"}, nil, provider.Dialect{}))
	for i := 0; i <= maxEarlyMessages; i++ {
		_, err := c.feed(note)
		require.NoError(t, err)
	}
}

// TestWorkspace28_TurnDiffUpdated: Codex's turn/diff/updated of the
// active turn becomes the workspace's turn-diff update with the diff text
// as sent (the agent parses it, workspace.ParseGitDiff); another thread's
// or another turn's is dropped, and the mapper makes no event of it.
func TestWorkspace28_TurnDiffUpdated(t *testing.T) {
	cl := provider.NewCore(provider.Record{ACPSessionID: "thr"}, nil, provider.Dialect{})
	c := New(cl)
	call, err := c.turnStart("turn-1", "hi")
	require.NoError(t, err)
	feed := func(s string) []provider.Inbound {
		ins, err := c.feed([]byte(s + "\n"))
		require.NoError(t, err)
		return ins
	}
	feed(`{"id":` + jsonInt(call.ID) + `,"result":{"turn":{"id":"u-7","status":"inProgress"}}}`)
	diff := `diff --git a/x b/x\nold mode 100644\nnew mode 100755\n`
	ins := feed(`{"method":"turn/diff/updated","params":{"threadId":"thr","turnId":"u-7","diff":"` + diff + `"}}`)
	require.Len(t, ins, 1)
	require.Equal(t, provider.KindUpdate, ins[0].Kind)
	require.Equal(t, provider.UpdateTurnDiff, ins[0].Update.Kind)
	require.Equal(t, "diff --git a/x b/x\nold mode 100644\nnew mode 100755\n", ins[0].Update.TurnDiff)
	require.Equal(t, "turn-1", ins[0].TurnID)
	require.Empty(t, c.Mapper.Update(cl.Map(), ins[0].TurnID, *ins[0].Update))
	require.Empty(t, feed(`{"method":"turn/diff/updated","params":{"threadId":"other","turnId":"u-7","diff":""}}`))
	require.Empty(t, feed(`{"method":"turn/diff/updated","params":{"threadId":"thr","turnId":"u-8","diff":""}}`))
}
