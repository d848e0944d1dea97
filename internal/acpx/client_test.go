package acpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// handshaken returns a client with an initialized session sess-1.
func handshaken(t *testing.T) *Client {
	t.Helper()
	c := NewClient(provider.Record{}, ClientOptions{})
	call, err := c.Initialize()
	require.NoError(t, err)
	require.EqualValues(t, 1, call.ID)
	require.JSONEq(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false},"clientInfo":{"name":"paperclip-runnerd","title":"Paperclip Runner","version":"1"}}}`, string(call.Line))
	feed(t, c, `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":true}}}`)
	call, err = c.NewSession("/work", nil)
	require.NoError(t, err)
	require.Contains(t, string(call.Line), `"mcpServers":[]`)
	msgs := feed(t, c, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"sessionId":"sess-1","_meta":{"agentSessionId":"harness-1"}}}`, call.ID))
	require.Len(t, msgs, 1)
	require.NoError(t, msgs[0].Err)
	rec := c.Record()
	require.Equal(t, "sess-1", rec.ACPSessionID)
	require.Equal(t, "harness-1", rec.AgentSessionID)
	require.True(t, c.Capabilities().LoadSession)
	return c
}

func feed(t *testing.T, c *Client, lines ...string) []provider.Inbound {
	t.Helper()
	msgs, err := c.Feed([]byte(strings.Join(lines, "\n") + "\n"))
	require.NoError(t, err)
	return msgs
}

func TestLinesSplitAcrossFeedsAndRestarts(t *testing.T) {
	c := handshaken(t)
	call, err := c.Prompt("turn-1", "echo hi")
	require.NoError(t, err)
	line := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}}` + "\n" +
		fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"stopReason":"end_turn"}}`, call.ID) + "\n"
	var got []provider.Inbound
	for i := 0; i < len(line); i += 7 {
		end := min(i+7, len(line))
		msgs, err := c.Feed([]byte(line[i:end]))
		require.NoError(t, err)
		got = append(got, msgs...)
		// A restart between any two reads resumes from the durable record.
		b, err := json.Marshal(c.Record())
		require.NoError(t, err)
		var rec provider.Record
		require.NoError(t, json.Unmarshal(b, &rec))
		c = NewClient(rec, ClientOptions{})
	}
	require.Len(t, got, 2)
	require.Equal(t, provider.KindUpdate, got[0].Kind)
	require.Equal(t, "turn-1", got[0].TurnID)
	require.Equal(t, provider.KindTurnSettled, got[1].Kind)
	require.Equal(t, provider.StopEndTurn, got[1].Outcome.StopReason)
	require.Empty(t, c.Record().Process.Wire.PartialLine)
	require.True(t, c.Record().Prompted)
}

func TestIDsMonotonicAcrossRestart(t *testing.T) {
	c := handshaken(t)
	first, err := c.Request("x/y", nil, "")
	require.NoError(t, err)
	c2 := NewClient(c.Record(), ClientOptions{})
	second, err := c2.Request("x/y", nil, "")
	require.NoError(t, err)
	require.Equal(t, first.ID+1, second.ID)
	require.Contains(t, c2.Record().Process.Wire.Pending, first.ID)
}

// TestACP05_BadLines: banners are skipped and counted; the tenth
// consecutive bad line fails the stream; a good line resets the count.
func TestACP05_BadLines(t *testing.T) {
	c := handshaken(t)
	var lines []string
	for i := 0; i < provider.MaxConsecutiveBadLines-1; i++ {
		lines = append(lines, "banner "+fmt.Sprint(i))
	}
	lines = append(lines, `{"jsonrpc":"2.0","method":"_ext/ping"}`)
	feed(t, c, lines...)
	w := c.Record().Process.Wire
	require.EqualValues(t, provider.MaxConsecutiveBadLines-1, w.SkippedLines)
	require.Zero(t, w.ConsecutiveBadLines)

	var bad bytes.Buffer
	for i := 0; i < provider.MaxConsecutiveBadLines; i++ {
		bad.WriteString("not json\n")
	}
	_, err := c.Feed(bad.Bytes())
	require.ErrorIs(t, err, provider.ErrTooManyBadLines)
	require.Equal(t, provider.LossRPCFailure, provider.LossReasonOf(err))
	_, err = c.Feed([]byte(`{"jsonrpc":"2.0","method":"x"}` + "\n"))
	require.ErrorIs(t, err, provider.ErrTooManyBadLines, "a failed stream stays failed")
}

// TestACP05_HugeLine: a line over 10 MiB fails with the literal text
// the server maps to provider_frame_too_large, with or without a newline.
func TestACP05_HugeLine(t *testing.T) {
	require.Equal(t, "stdout frame exceeded", provider.ErrFrameExceeded.Error())
	c := handshaken(t)
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	var err error
	for i := 0; i <= provider.MaxLineBytes/len(chunk) && err == nil; i++ {
		_, err = c.Feed(chunk)
	}
	require.ErrorIs(t, err, provider.ErrFrameExceeded)

	c = handshaken(t)
	big := append(bytes.Repeat([]byte("y"), provider.MaxLineBytes+1), '\n')
	_, err = c.Feed(big)
	require.ErrorIs(t, err, provider.ErrFrameExceeded)

	// Exactly at the limit is fine (and skipped as non-JSON).
	c = handshaken(t)
	_, err = c.Feed(append(bytes.Repeat([]byte("z"), provider.MaxLineBytes), '\n'))
	require.NoError(t, err)
}

// TestACP06_InitFailures: a version other than 1 and a session/new
// error are acp_session_init_failed; -32000 is authentication_required.
func TestACP06_InitFailures(t *testing.T) {
	c := NewClient(provider.Record{}, ClientOptions{})
	_, err := c.Initialize()
	require.NoError(t, err)
	msgs := feed(t, c, `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":2}}`)
	require.Equal(t, provider.ClassACPSessionInitFailed, provider.ClassOf(msgs[0].Err))
	require.NotContains(t, msgs[0].Err.Error(), "2", "the error carries fixed text only")

	c = NewClient(provider.Record{}, ClientOptions{})
	_, err = c.NewSession("/w", nil)
	require.NoError(t, err)
	msgs = feed(t, c, `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"please log in with token sk-XYZ"}}`)
	require.Equal(t, provider.ClassAuthenticationRequired, provider.ClassOf(msgs[0].Err))
	require.NotContains(t, msgs[0].Err.Error(), "sk-XYZ")

	c = NewClient(provider.Record{}, ClientOptions{})
	_, err = c.NewSession("/w", nil)
	require.NoError(t, err)
	msgs = feed(t, c, `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom"}}`)
	require.Equal(t, provider.ClassACPSessionInitFailed, provider.ClassOf(msgs[0].Err))

	_, err = NewClient(provider.Record{}, ClientOptions{}).NewSession("relative", nil)
	require.Error(t, err)
}

// TestACP12_LateAndStale: updates after the turn settled are dropped
// and counted; a stale stop reason for a settled id is dropped; a response
// to an id never issued is an rpc_failure.
func TestACP12_LateAndStale(t *testing.T) {
	c := handshaken(t)
	call, err := c.Prompt("turn-1", "sleep 1")
	require.NoError(t, err)
	lines, err := c.Cancel()
	require.NoError(t, err)
	require.Len(t, lines, 1)
	require.JSONEq(t, `{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"sess-1"}}`, string(lines[0]))
	out := c.AbandonTurn() // cancel grace expired
	require.True(t, out.Cancelled)

	next, err := c.Prompt("turn-2", "echo b")
	require.NoError(t, err)
	msgs := feed(t, c,
		fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"stopReason":"cancelled"}}`, call.ID),
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"b"}}}}`,
		fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"stopReason":"end_turn"}}`, next.ID),
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"late"}}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"current_mode_update","currentModeId":"m"}}}`,
	)
	require.Len(t, msgs, 3)
	require.Equal(t, "turn-2", msgs[0].TurnID)
	require.Equal(t, provider.StopEndTurn, msgs[1].Outcome.StopReason)
	require.Equal(t, provider.KindUpdate, msgs[2].Kind, "session-level updates pass between turns")
	require.Empty(t, msgs[2].TurnID)
	w := c.Record().Process.Wire
	require.EqualValues(t, 1, w.StaleResponses)
	require.EqualValues(t, 1, w.LateUpdates)

	_, err = c.Feed([]byte(`{"jsonrpc":"2.0","id":999,"result":{}}` + "\n"))
	require.ErrorIs(t, err, provider.ErrUnknownResponse)
	require.Equal(t, provider.LossRPCFailure, provider.LossReasonOf(err))
}

// TestACP14_PromptsSerialised: a second prompt while one is
// outstanding is refused before anything is written.
func TestACP14_PromptsSerialised(t *testing.T) {
	c := handshaken(t)
	_, err := c.Prompt("turn-1", "sleep 100")
	require.NoError(t, err)
	before := c.Record().Process.Wire.NextRequestID
	_, err = c.Prompt("turn-2", "echo x")
	require.ErrorIs(t, err, provider.ErrTurnActive)
	require.Equal(t, before, c.Record().Process.Wire.NextRequestID, "no id consumed, nothing to write")
}

// TestACP10_AnyAnswerAfterCancelIsCancelled covers acp.md §4.4 step 3:
// cancelled, -32800, any error and end_turn all settle as cancelled.
func TestACP10_AnyAnswerAfterCancelIsCancelled(t *testing.T) {
	for _, answer := range []string{
		`"result":{"stopReason":"cancelled"}`,
		`"result":{"stopReason":"end_turn"}`,
		`"error":{"code":-32800,"message":"x"}`,
		`"error":{"code":-32603,"message":"x"}`,
	} {
		c := handshaken(t)
		call, err := c.Prompt("turn-1", "sleep 1")
		require.NoError(t, err)
		_, err = c.Cancel()
		require.NoError(t, err)
		msgs := feed(t, c, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,%s}`, call.ID, answer))
		require.Len(t, msgs, 1, answer)
		require.True(t, msgs[0].Outcome.Cancelled, answer)
		require.Equal(t, provider.StopCancelled, msgs[0].Outcome.StopReason)
		require.Equal(t, provider.EndInterrupted, provider.SettlementOf(*msgs[0].Outcome, false).Ending)
		require.Equal(t, provider.EndCancelled, provider.SettlementOf(*msgs[0].Outcome, true).Ending)
	}
}

// TestACP11_PermissionPolicyAndCancel: the policy choice rule, and a
// permission pending at cancel is answered {outcome:"cancelled"}.
func TestACP11_PermissionPolicyAndCancel(t *testing.T) {
	opts := []provider.PermissionOption{
		{OptionID: "ra", Kind: provider.OptionRejectAlways}, {OptionID: "aa", Kind: provider.OptionAllowAlways},
		{OptionID: "ro", Kind: provider.OptionRejectOnce}, {OptionID: "ao", Kind: provider.OptionAllowOnce},
	}
	edit := provider.PermissionRequest{ToolCall: provider.PermissionToolCall{Kind: "edit"}, Options: opts}
	read := provider.PermissionRequest{ToolCall: provider.PermissionToolCall{Kind: "read"}, Options: opts}
	require.Equal(t, provider.PermissionOutcome{Outcome: "selected", OptionID: "ao"}, provider.ChoosePermission(provider.ApproveAll, edit))
	require.Equal(t, provider.PermissionOutcome{Outcome: "selected", OptionID: "ro"}, provider.ChoosePermission(provider.DenyAll, edit))
	require.Equal(t, provider.PermissionOutcome{Outcome: "selected", OptionID: "ao"}, provider.ChoosePermission(provider.ApproveReads, read))
	require.Equal(t, provider.PermissionOutcome{Outcome: "selected", OptionID: "ro"}, provider.ChoosePermission(provider.ApproveReads, edit))
	require.Equal(t, provider.PermissionOutcome{Outcome: "selected", OptionID: "aa"}, provider.ChoosePermission(provider.ApproveAll, provider.PermissionRequest{Options: opts[:2]}))
	require.Equal(t, provider.PermissionOutcome{Outcome: "cancelled"}, provider.ChoosePermission(provider.DenyAll, provider.PermissionRequest{Options: opts[1:2]}))
	m, err := provider.ParsePermissionMode("")
	require.NoError(t, err)
	require.Equal(t, provider.ApproveAll, m)
	_, err = provider.ParsePermissionMode("yolo")
	require.Error(t, err)

	c := handshaken(t)
	_, err = c.Prompt("turn-1", "permission allow")
	require.NoError(t, err)
	msgs := feed(t, c, `{"jsonrpc":"2.0","id":"p-1","method":"session/request_permission","params":{"sessionId":"sess-1","toolCall":{"toolCallId":"c1","kind":"edit"},"options":[{"optionId":"allow","name":"Allow","kind":"allow_once"}]}}`)
	require.Len(t, msgs, 1)
	require.NotNil(t, msgs[0].Permission)
	require.Equal(t, "turn-1", msgs[0].TurnID)
	c.SetRuntimeRequestID(msgs[0].ID, "turn-1-permission-p-1")
	require.Equal(t, "turn-1-permission-p-1", c.Record().Process.Wire.AgentRequests[`"p-1"`].RuntimeRequestID)
	lines, err := c.Cancel()
	require.NoError(t, err)
	require.Len(t, lines, 2)
	require.JSONEq(t, `{"jsonrpc":"2.0","id":"p-1","result":{"outcome":{"outcome":"cancelled"}}}`, string(lines[1]))
	require.Empty(t, c.Record().Process.Wire.AgentRequests)
	_, err = c.Respond(json.RawMessage(`"p-1"`), nil)
	require.ErrorIs(t, err, provider.ErrUnknownAgentCall, "an answered request cannot be answered twice")
}

// TestACP18_CancelRequestSurfaces: $/cancel_request for a pending
// agent request surfaces so runnerd answers it -32800; for an answered one
// it is ignored.
func TestACP18_CancelRequestSurfaces(t *testing.T) {
	c := handshaken(t)
	_, err := c.Prompt("turn-1", "terminal ls")
	require.NoError(t, err)
	msgs := feed(t, c,
		`{"jsonrpc":"2.0","id":5,"method":"terminal/create","params":{"sessionId":"sess-1","command":"ls"}}`,
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":5}}`)
	require.Len(t, msgs, 2)
	require.Equal(t, provider.KindCancelRequest, msgs[1].Kind)
	line, err := c.RespondError(msgs[1].ID, provider.CodeRequestCancelled, "request cancelled")
	require.NoError(t, err)
	require.JSONEq(t, `{"jsonrpc":"2.0","id":5,"error":{"code":-32800,"message":"request cancelled"}}`, string(line))
	require.Empty(t, feed(t, c, `{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":5}}`))
}

// TestACP15_LoadReplaySuppressed: updates before the session/load
// answer are history and are not forwarded; a failed load is
// session_resume_required.
func TestACP15_LoadReplaySuppressed(t *testing.T) {
	c := handshaken(t)
	rec := c.Record()
	rec.Prompted = true
	rec.Process = nil // the agent was lost; a new process resumes
	c = NewClient(rec, ClientOptions{})
	call, err := c.LoadSession(nil)
	require.NoError(t, err)
	require.Contains(t, string(call.Line), `"sessionId":"sess-1"`)
	var lines []string
	for i := 0; i < 5; i++ {
		lines = append(lines, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"old"}}}}`)
	}
	lines = append(lines, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":null}`, call.ID))
	msgs := feed(t, c, lines...)
	require.Len(t, msgs, 1)
	require.NoError(t, msgs[0].Err)
	require.EqualValues(t, 5, c.Record().Process.Wire.ReplayedUpdates)

	call, err = c.LoadSession(nil)
	require.NoError(t, err)
	msgs = feed(t, c, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"error":{"code":-32002,"message":"nope"}}`, call.ID))
	require.Equal(t, provider.ClassSessionResumeRequired, provider.ClassOf(msgs[0].Err))
}

// TestACP16_NeverPromptedRecordIsDiscarded: reuse needs a prompt
// history, no reset flag and the same launch.
func TestACP16_NeverPromptedRecordIsDiscarded(t *testing.T) {
	rec := provider.Record{ACPSessionID: "s", Cwd: "/w", Command: "fakeacp", Args: []string{"--x"}}
	require.False(t, rec.Reusable("/w", "fakeacp", []string{"--x"}))
	rec.Prompted = true
	require.True(t, rec.Reusable("/w", "fakeacp", []string{"--x"}))
	require.False(t, rec.Reusable("/other", "fakeacp", []string{"--x"}))
	require.False(t, rec.Reusable("/w", "fakeacp", []string{"--y"}))
	rec.ResetOnNextEnsure = true
	require.False(t, rec.Reusable("/w", "fakeacp", []string{"--x"}))
}

func TestUnsupportedRequestsAndNotifications(t *testing.T) {
	c := handshaken(t)
	msgs := feed(t, c,
		`{"jsonrpc":"2.0","method":"_vendor/thing","params":{}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"other","update":{"sessionUpdate":"plan","entries":[]}}}`,
		`{"jsonrpc":"2.0","id":"fs-1","method":"fs/read_text_file","params":{"path":"/etc/passwd"}}`,
		`{"jsonrpc":"2.0","error":{"code":-32700,"message":"parse"},"id":null}`)
	require.Len(t, msgs, 1)
	require.Equal(t, "fs/read_text_file", msgs[0].Method)
	line, err := c.RespondError(msgs[0].ID, provider.CodeMethodNotFound, "method not found")
	require.NoError(t, err)
	require.JSONEq(t, `{"jsonrpc":"2.0","id":"fs-1","error":{"code":-32601,"message":"method not found"}}`, string(line))
}

func TestEndOfStream(t *testing.T) {
	c := handshaken(t)
	_, err := c.Prompt("turn-1", "x")
	require.NoError(t, err)
	err = c.EndOfStream()
	require.Equal(t, provider.ClassAgentDisconnected, provider.ClassOf(err))
	require.Equal(t, provider.LossProviderExit, provider.LossReasonOf(err))
	out := c.AbandonTurn()
	require.Equal(t, provider.ClassAgentDisconnected, provider.ClassOf(out.Err))
}

func TestClassification(t *testing.T) {
	require.Equal(t, provider.ClassAgentSpawnFailed, provider.ClassifyStartupExit(127, false, true, true).Class)
	require.Equal(t, provider.ClassAgentStartupExitNonzero, provider.ClassifyStartupExit(1, false, true, true).Class)
	require.Equal(t, provider.ClassAgentStartupSignal, provider.ClassifyStartupExit(0, true, false, true).Class)
	require.Equal(t, provider.ClassAgentStartupNoStderr, provider.ClassifyStartupExit(1, false, false, false).Class)
	require.Equal(t, provider.Class("agent_startup_module_not_found"), provider.ClassifySidecarCode("AGENT_STARTUP_FAILED.MODULE_NOT_FOUND"))
	require.Equal(t, provider.Class("session_handshake_timeout"), provider.ClassifySidecarCode("ACPX_SESSION_HANDSHAKE_TIMEOUT"))
	require.Equal(t, provider.ClassUnclassified, provider.ClassifySidecarCode("WHATEVER"))
	f := provider.HandshakeTimeout("/usr/local/bin/codex-acp --secret-arg", 30000)
	require.Equal(t, "ACP agent codex-acp did not complete ACP initialization within 30000ms", f.Message)
	require.True(t, errors.Is(provider.NewFailure(provider.ClassTurnFailed, provider.ErrWrite), provider.ErrWrite))
	require.Equal(t, coldOpenBoundSlow, OpenBound("claude", false))
	require.Equal(t, ColdOpenBoundDefault, OpenBound("codex", false))
	require.Equal(t, ColdOpenBoundDefault, OpenBound("custom", false))
	require.Equal(t, ResumeOpenBound, OpenBound("claude", true))
	argv, ok := AgentCommand("opencode")
	require.True(t, ok)
	require.Equal(t, []string{"opencode", "acp"}, argv)
}
