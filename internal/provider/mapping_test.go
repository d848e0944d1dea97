package provider

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/testutil/prpschema"
)

const testSecret = "sk-test-SECRET-value-0123456789abcdef"

func testMapper() Mapper {
	return Mapper{Redactor: NewRedactor(testSecret, "short"), Provider: "claude", Cwd: "/work/repo"}
}

func upd(t *testing.T, raw string) SessionUpdate {
	t.Helper()
	u, err := DecodeSessionUpdate(json.RawMessage(raw))
	require.NoError(t, err)
	return u
}

func countTypes(evs []Event) map[string]int {
	n := map[string]int{}
	for _, e := range evs {
		n[e.EventType]++
	}
	return n
}

func types(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.EventType)
	}
	return out
}

// fullTurn maps one turn that touches every update kind runnerd forwards.
func fullTurn(t *testing.T, mp Mapper, st *MapState, turnID string, end Settlement) []Event {
	var evs []Event
	evs = append(evs, mp.TurnStarted(st, turnID)...)
	for _, raw := range []string{
		`{"sessionUpdate":"agent_thought_chunk","messageId":"th-1","content":{"type":"text","text":"thinking"}}`,
		`{"sessionUpdate":"agent_message_chunk","messageId":"m-1","content":{"type":"text","text":"Hello "}}`,
		`{"sessionUpdate":"agent_message_chunk","messageId":"m-1","content":{"type":"text","text":"world"}}`,
		`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"ignored"}}`,
		`{"sessionUpdate":"tool_call","toolCallId":"call_1","title":"Read README","kind":"read","status":"pending","locations":[{"path":"/work/repo/README.md"}]}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"in_progress"}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"completed","content":[{"type":"content","content":{"type":"text","text":"# readme"}}]}`,
		`{"sessionUpdate":"tool_call","toolCallId":"call_2","title":"Edit /etc/hosts","kind":"edit","status":"pending","locations":[{"path":"/etc/hosts"}]}`,
		`{"sessionUpdate":"plan","entries":[{"content":"a","priority":"high","status":"completed"},{"content":"b","priority":"low","status":"in_progress"}]}`,
		`{"sessionUpdate":"usage_update","used":10,"size":100,"cost":{"amount":0.5,"currency":"USD"}}`,
		`{"sessionUpdate":"current_mode_update","currentModeId":"code"}`,
		`{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"review","description":"d"}]}`,
		`{"sessionUpdate":"config_option_update","configOptions":[{"id":"model","name":"Model"}]}`,
		`{"sessionUpdate":"session_info_update","title":"My session"}`,
		`{"sessionUpdate":"compaction_update","whatever":true}`,
	} {
		evs = append(evs, mp.Update(st, turnID, upd(t, raw))...)
	}
	rr, pe := mp.PermissionRequest(st, turnID, json.RawMessage(`7`), PermissionRequest{
		ToolCall: PermissionToolCall{ToolCallID: "call_2", Title: "Edit config", Kind: "edit"},
		Options:  []PermissionOption{{OptionID: "allow", Name: "Allow", Kind: OptionAllowOnce}, {OptionID: "reject", Name: "Reject", Kind: OptionRejectOnce}},
	})
	evs = append(evs, pe...)
	evs = append(evs, mp.RequestResolved(rr, ActionAccept)...)
	evs = append(evs, mp.RequestClosed(rr, RequestExpired, "turn_completed")...)
	evs = append(evs, mp.RequestClosed(rr, RequestCancelled, "interrupted")...)
	end.TurnID = turnID
	return append(evs, mp.Settle(st, end)...)
}

// TestMappingValidatesAgainstSchemas: every mapped turn validates; without a
// completion contract or an accepted semantic result a finished turn ends
// with one run.terminal and no run.result.proposed (tools.md §4); with a
// contract it keeps the one synthesised result just before run.terminal.
func TestMappingValidatesAgainstSchemas(t *testing.T) {
	t.Run("plain", func(t *testing.T) { mappingValidates(t, testMapper(), 0) })
	contract := testMapper()
	contract.ContractRevision, contract.CriterionIDs = "rev-1", []string{"crit-a", "crit-b"}
	t.Run("contract", func(t *testing.T) { mappingValidates(t, contract, 1) })
}

func mappingValidates(t *testing.T, mp Mapper, results int) {
	exit := 1
	cases := map[string]func(st *MapState) []Event{
		"completed": func(st *MapState) []Event {
			return fullTurn(t, mp, st, "turn-1", Settlement{Ending: EndCompleted, StopReason: StopEndTurn, Usage: &TokenUsage{InputTokens: 5, OutputTokens: 7, TotalTokens: 12}})
		},
		"max_tokens": func(st *MapState) []Event {
			return fullTurn(t, mp, st, "turn-2", Settlement{Ending: EndCompleted, StopReason: StopMaxTokens})
		},
		"failed": func(st *MapState) []Event {
			return fullTurn(t, mp, st, "turn-3", Settlement{Ending: EndFailed, Class: ClassTurnFailed})
		},
		"interrupted": func(st *MapState) []Event {
			return fullTurn(t, mp, st, "turn-4", Settlement{Ending: EndInterrupted, StopReason: StopCancelled})
		},
		"cancelled": func(st *MapState) []Event {
			return fullTurn(t, mp, st, "turn-5", Settlement{Ending: EndCancelled, StopReason: StopCancelled})
		},
		"loss": func(st *MapState) []Event {
			evs := mp.TurnStarted(st, "turn_6")
			evs = append(evs, mp.Update(st, "turn_6", upd(t, `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}`))...)
			return append(evs, mp.ChannelLost(st, "turn_6", LossTransportClosed)...)
		},
		"exit": func(st *MapState) []Event {
			evs := mp.TurnStarted(st, "turn-7")
			return append(evs, mp.AgentExited(st, "turn-7", &exit, "")...)
		},
		"session": func(st *MapState) []Event {
			rec := Record{ACPSessionID: "sess-0001", AgentSessionID: "agent-1", ProtocolVersion: 1, AgentInfo: &Implementation{Name: "fakeacp", Version: "1"}}
			evs := mp.SessionOpened(rec, false, Descriptor{Agent: "claude", ProviderVersion: "1"})
			evs = append(evs, mp.SessionOpened(rec, true, Descriptor{Agent: "claude"})...)
			return append(evs, mp.streamDiagnostic(WireState{SkippedLines: 3}))
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			st := &MapState{}
			evs := f(st)
			prpschema.RequireValidEvents(t, evs)
			n := countTypes(evs)
			if name != "session" {
				// At most one result, then one terminal per finished turn.
				require.Equal(t, results, n["run.result.proposed"], types(evs))
				require.Equal(t, 1, n["run.terminal"], types(evs))
				end := len(evs)
				if name == "exit" {
					end--
				}
				last := evs[end-1-results : end]
				want := []string{"run.terminal"}
				if results == 1 {
					want = []string{"run.result.proposed", "run.terminal"}
					claim := last[0].Payload["completionClaim"].(map[string]any)
					require.Len(t, claim["criteria"], len(mp.CriterionIDs))
				}
				require.Equal(t, want, types(last))
				require.Equal(t, "acpx", last[len(last)-1].Payload["provider"])
			}
		})
	}
}

// TestACP02_EchoMapping: the echo turn maps to turn.started, item
// delta "hi", turn.completed, one run.terminal (done); no run.result.proposed
// without an accepted result or a completion contract (tools.md §4).
func TestACP02_EchoMapping(t *testing.T) {
	mp := testMapper()
	st := &MapState{}
	evs := mp.TurnStarted(st, "turn-1")
	evs = append(evs, mp.Update(st, "turn-1", upd(t, `{"sessionUpdate":"agent_message_chunk","messageId":"msg-0001","content":{"type":"text","text":"hi"}}`))...)
	evs = append(evs, mp.Settle(st, SettlementOf(TurnOutcome{TurnID: "turn-1", StopReason: StopEndTurn}, false))...)
	prpschema.RequireValidEvents(t, evs)
	require.Equal(t, []string{"turn.started", "item.started", "item.delta", "item.completed", "turn.completed", "run.terminal"}, types(evs))
	require.Equal(t, "hi", evs[2].Payload["text"])
	require.Equal(t, "hi", evs[3].Payload["text"])
	require.Equal(t, "done", evs[5].Payload["reportedWorkDisposition"])
	require.Equal(t, evs[1].ItemID, evs[2].ItemID)
}

func TestItemIDsNeverReused(t *testing.T) {
	mp := testMapper()
	st := &MapState{}
	seen := map[string]bool{}
	for _, turn := range []string{"turn-1", "turn-1", "turn-2"} {
		evs := mp.TurnStarted(st, turn)
		evs = append(evs, mp.Update(st, turn, upd(t, `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"}}`))...)
		evs = append(evs, mp.Update(st, turn, upd(t, `{"sessionUpdate":"tool_call","toolCallId":"call_1","title":"t"}`))...)
		evs = append(evs, mp.Settle(st, Settlement{TurnID: turn, Ending: EndCompleted, StopReason: StopEndTurn})...)
		for _, e := range evs {
			if e.EventType == "item.started" {
				require.False(t, seen[e.ItemID], "item id %s reused", e.ItemID)
				seen[e.ItemID] = true
			}
		}
	}
	require.Len(t, seen, 6)
}

// TestSecretsNeverInPayloads: a known env value and credential-shaped
// strings the agent echoes are redacted from every payload.
func TestSecretsNeverInPayloads(t *testing.T) {
	mp := testMapper()
	st := &MapState{}
	leak := "key " + testSecret + " and Bearer abcdefghijklmnopqrstuvwxyz0123 and sk-ant-api03-ABCDEFGHIJKLMNOPQRST"
	evs := mp.TurnStarted(st, "turn-1")
	evs = append(evs, mp.Update(st, "turn-1", upd(t, `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":`+jsonString(leak)+`}}`))...)
	evs = append(evs, mp.Update(st, "turn-1", upd(t, `{"sessionUpdate":"tool_call","toolCallId":"c","title":`+jsonString(leak)+`,"status":"completed","content":[{"type":"content","content":{"type":"text","text":`+jsonString(leak)+`}}]}`))...)
	evs = append(evs, mp.Update(st, "turn-1", upd(t, `{"sessionUpdate":"plan","entries":[{"content":`+jsonString(leak)+`,"priority":"high","status":"pending"}]}`))...)
	_, pe := mp.PermissionRequest(nil, "turn-1", json.RawMessage(`1`), PermissionRequest{ToolCall: PermissionToolCall{Title: leak}, Options: []PermissionOption{{OptionID: "a", Name: leak, Kind: OptionAllowOnce}}})
	evs = append(evs, pe...)
	evs = append(evs, mp.Settle(st, Settlement{TurnID: "turn-1", Ending: EndCompleted, StopReason: StopEndTurn})...)
	prpschema.RequireValidEvents(t, evs)
	b, err := json.Marshal(evs)
	require.NoError(t, err)
	for _, s := range []string{testSecret, "abcdefghijklmnopqrstuvwxyz0123", "sk-ant-api03-ABCDEFGHIJKLMNOPQRST"} {
		require.NotContains(t, string(b), s)
	}
	require.Contains(t, string(b), redacted)
	// Short values are not treated as secrets (they would scrub words).
	require.Equal(t, "a short word", NewRedactor("short").String("a short word"))
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestToolTargetStaysInsideCwd(t *testing.T) {
	mp := testMapper()
	require.Equal(t, "src/a.go", mp.safeTarget("/work/repo/src/a.go"))
	require.Equal(t, "", mp.safeTarget("/work/repo/../etc/passwd"))
	require.Equal(t, "", mp.safeTarget("/etc/passwd"))
	require.Equal(t, "", mp.safeTarget("relative/path"))
}

func TestUsageDeltaAgainstTurnStart(t *testing.T) {
	mp := testMapper()
	st := &MapState{}
	mp.TurnStarted(st, "t1")
	mp.Update(st, "t1", upd(t, `{"sessionUpdate":"usage_update","used":1,"size":2,"cost":{"amount":1.5,"currency":"USD"}}`))
	mp.TurnStarted(st, "t2")
	evs := mp.Update(st, "t2", upd(t, `{"sessionUpdate":"usage_update","used":1,"size":2,"cost":{"amount":2.0,"currency":"USD"}}`))
	require.InDelta(t, 0.5, evs[0].Payload["runDelta"].(map[string]any)["providerCostUsd"], 1e-9)
	// A drop means the agent restarted: the new value is all delta.
	evs = mp.Update(st, "t2", upd(t, `{"sessionUpdate":"usage_update","used":1,"size":2,"cost":{"amount":0.25,"currency":"USD"}}`))
	require.InDelta(t, 0.25, evs[0].Payload["runDelta"].(map[string]any)["providerCostUsd"], 1e-9)
	evs = mp.Update(st, "t2", upd(t, `{"sessionUpdate":"usage_update","used":1,"size":2,"cost":{"amount":9,"currency":"EUR"}}`))
	require.Equal(t, "unpriced", evs[0].Payload["cumulative"].(map[string]any)["providerCostStatus"])
	prpschema.RequireValidEvents(t, evs)
}

func TestSafeID(t *testing.T) {
	for _, in := range []string{"", "call_1", "_x", strings.Repeat("a", 500), "turn 1/2"} {
		out := safeID(in)
		require.Regexp(t, `^[A-Za-z0-9][A-Za-z0-9.:-]*$`, out)
		require.LessOrEqual(t, len(out), maxSafeID)
	}
}

// TestSettleEmitsAcceptedResult: an accepted semantic result is the one
// run.result.proposed, just before run.terminal, whose disposition is the
// result's, whatever the turn's ending (tools.md §4).
func TestSettleEmitsAcceptedResult(t *testing.T) {
	accepted := json.RawMessage(`{"schema":"paperclip.run_result.v1","reportedWorkDisposition":"blocked","summary":"stuck","completionClaim":{"contractRevision":"r","objectiveSatisfied":false,"criteria":[],"remainingWork":[]},"evidence":[],"verification":[],"attentionRequests":[],"artifacts":[],"blocker":{"reasonCode":"needs_key","owner":{"kind":"user","name":"ops"},"unblockAction":"add the key","scope":"task_wide"},"n":12345678901234567890}`)
	for _, end := range []Settlement{{Ending: EndCompleted, StopReason: StopEndTurn}, {Ending: EndFailed, Class: ClassTurnFailed}, {Ending: EndInterrupted}} {
		for _, mp := range []Mapper{testMapper(), {ContractRevision: "rev", CriterionIDs: []string{"c"}}} {
			st := &MapState{}
			evs := mp.TurnStarted(st, "turn-1")
			st.SemanticResult = accepted
			end.TurnID = "turn-1"
			evs = append(evs, mp.Settle(st, end)...)
			prpschema.RequireValidEvents(t, evs)
			got := types(evs)
			require.Equal(t, []string{"run.result.proposed", "run.terminal"}, got[len(got)-2:])
			b, err := json.Marshal(evs[len(evs)-2].Payload)
			require.NoError(t, err)
			require.JSONEq(t, string(accepted), string(b))
			require.Contains(t, string(b), "12345678901234567890", "numbers are kept as written")
			require.Equal(t, "blocked", evs[len(evs)-1].Payload["reportedWorkDisposition"])
			require.Nil(t, st.SemanticResult, "the result belongs to its turn")
		}
	}
}

// TestChunkHoldsSplitSecret: a credential split across two message chunks
// (a shape the outbox sanitiser masks, or a known value) leaves in one
// item.delta, so sanitising each delta on its own still masks it; the
// deltas together are the message, and what an item still holds leaves
// with its settlement.
func TestChunkHoldsSplitSecret(t *testing.T) {
	token := "ghp_" + strings.Repeat("T", 36)
	for _, text := range []string{
		"my token is " + token + " and more",
		"key " + testSecret + " done",
		"ends with " + token,
	} {
		for cut := 0; cut <= len(text); cut++ {
			mp := testMapper()
			mp.OpenSecret = state.OpenSecretStart
			st := &MapState{}
			evs := mp.TurnStarted(st, "turn-1")
			for _, part := range []string{text[:cut], text[cut:]} {
				b, _ := json.Marshal(map[string]any{"sessionUpdate": "agent_message_chunk", "messageId": "m-1",
					"content": map[string]any{"type": "text", "text": part}})
				evs = append(evs, mp.Update(st, "turn-1", upd(t, string(b)))...)
			}
			evs = append(evs, mp.Settle(st, Settlement{TurnID: "turn-1", Ending: EndCompleted, StopReason: StopEndTurn})...)
			var said, sent strings.Builder
			for _, e := range evs {
				if e.EventType != "item.delta" {
					continue
				}
				d := e.Payload["text"].(string)
				said.WriteString(d)
				sent.WriteString(state.RedactSecrets(d)) // the outbox sanitises each delta alone
			}
			want := mp.Redactor.String(text)
			require.Equal(t, want, said.String(), "the deltas are the message (cut %d)", cut)
			require.NotContains(t, sent.String(), "TTTT", "cut %d", cut)
			require.NotContains(t, sent.String(), "SECRET", "cut %d", cut)
			for _, it := range st.Items {
				require.Empty(t, it.Held, "nothing is held past the settlement")
			}
		}
	}
}
