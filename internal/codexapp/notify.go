package codexapp

import (
	"encoding/json"
	"strconv"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// notification maps one app-server notification (codex.md §5) to the
// Inbound model: message and reasoning deltas, plans and tool items as the
// ACP session updates provider.Mapper already maps; turn/completed as a
// settled turn; usage, compaction and notices as KindEvents. Anything else
// is dropped and counted (WireState.LateUpdates for another thread's or
// turn's, SkippedLines for undecodable ones).
func (c *Client) notification(m Message) []provider.Inbound {
	w := c.wire()
	turn := w.Turn
	switch m.Method {
	case noteTurnStarted:
		var n turnNotification
		if c.decode(m, &n) && c.ours(n.ThreadID) && turn != nil && turn.ProviderTurnID == "" {
			turn.ProviderTurnID = n.Turn.ID
		}
		return nil
	case noteTurnCompleted:
		var n turnNotification
		if !c.decode(m, &n) || !c.ours(n.ThreadID) || !c.inTurn(n.Turn.ID) {
			return nil
		}
		return []provider.Inbound{c.settle(n.Turn)}
	case noteAgentDelta, noteReasoningDelta, noteReasoningSummary:
		var n deltaNotification
		if !c.decode(m, &n) || !c.ours(n.ThreadID) || !c.inTurn(n.TurnID) {
			return nil
		}
		kind := provider.UpdateAgentMessageChunk
		if m.Method != noteAgentDelta {
			kind = provider.UpdateAgentThoughtChunk
		}
		u := provider.SessionUpdate{Kind: kind, MessageID: n.ItemID, Content: &provider.ContentBlock{Type: "text", Text: n.Delta}}
		return []provider.Inbound{{Kind: provider.KindUpdate, Method: m.Method, Update: &u, TurnID: turn.ID}}
	case noteTurnDiffUpdated:
		var n turnDiffNotification
		if !c.decode(m, &n) || !c.ours(n.ThreadID) || !c.inTurn(n.TurnID) {
			return nil
		}
		u := provider.SessionUpdate{Kind: provider.UpdateTurnDiff, TurnDiff: n.Diff}
		return []provider.Inbound{{Kind: provider.KindUpdate, Method: m.Method, Update: &u, TurnID: turn.ID}}
	case notePlanUpdated:
		var n planNotification
		if !c.decode(m, &n) || !c.ours(n.ThreadID) || !c.inTurn(n.TurnID) {
			return nil
		}
		u := provider.SessionUpdate{Kind: provider.UpdatePlan, Entries: []provider.PlanEntry{}}
		for _, s := range n.Plan {
			u.Entries = append(u.Entries, provider.PlanEntry{Content: s.Step, Priority: "medium", Status: planStatus(s.Status)})
		}
		return []provider.Inbound{{Kind: provider.KindUpdate, Method: m.Method, Update: &u, TurnID: turn.ID}}
	case noteTokenUsage:
		var n tokenUsageNotification
		if !c.decode(m, &n) || !c.ours(n.ThreadID) {
			return nil
		}
		turnID := ""
		if turn != nil {
			turnID = turn.ID
		}
		ev := c.Mapper.UsageReported(c.cl.Map(), turnID, tokens(n.TokenUsage.Total), tokens(n.TokenUsage.Last))
		return []provider.Inbound{{Kind: provider.KindEvents, Method: m.Method, Events: []provider.Event{ev}}}
	case noteItemStarted, noteItemCompleted:
		var n itemNotification
		if !c.decode(m, &n) || !c.ours(n.ThreadID) || !c.inTurn(n.TurnID) {
			return nil
		}
		return c.item(m.Method, n.Item)
	case noteThreadCompacted:
		if turn == nil {
			return nil
		}
		return []provider.Inbound{{Kind: provider.KindEvents, Method: m.Method, Events: []provider.Event{c.compacted()}}}
	case noteError, noteWarning, noteDeprecation, noteConfigWarning:
		var n noticeNotification
		_ = json.Unmarshal(m.Params, &n) // every field is optional
		return []provider.Inbound{{Kind: provider.KindEvents, Method: m.Method, Events: []provider.Event{c.notice(m.Method, n)}}}
	case noteRequestResolved:
		var n requestResolvedNotification
		if !c.decode(m, &n) || len(n.RequestID) == 0 {
			return nil
		}
		key := provider.IDKey(n.RequestID)
		if _, ok := w.AgentRequests[key]; !ok {
			return nil
		}
		return []provider.Inbound{{Kind: provider.KindRequestResolved, ID: json.RawMessage(key), Method: m.Method}}
	}
	w.LateUpdates++ // not mapped: counted, never forwarded
	return nil
}

func (c *Client) decode(m Message, v any) bool {
	if json.Unmarshal(m.Params, v) != nil {
		c.wire().SkippedLines++
		return false
	}
	return true
}

// ours reports the session's thread (calls from descendant threads are
// not mapped as this thread's output).
func (c *Client) ours(threadID string) bool {
	if threadID == "" || threadID == c.threadID() {
		return true
	}
	c.wire().LateUpdates++
	return false
}

// inTurn reports that providerTurnID is the active turn's (or the turn id
// is not yet known: turn/started may come after the first item).
func (c *Client) inTurn(providerTurnID string) bool {
	t := c.wire().Turn
	if t == nil {
		c.wire().LateUpdates++
		return false
	}
	if t.ProviderTurnID == "" {
		t.ProviderTurnID = providerTurnID
		return true
	}
	if providerTurnID != "" && providerTurnID != t.ProviderTurnID {
		c.wire().LateUpdates++
		return false
	}
	return true
}

// settle ends the active turn by turn.status; after an interrupt every
// status settles as cancelled (the mapper makes it turn.interrupted or,
// for run.cancel, turn.cancelled). inProgress is a protocol error.
func (c *Client) settle(t turn) provider.Inbound {
	w := c.wire()
	ts := w.Turn
	w.Turn = nil
	delete(w.Pending, ts.PromptRequestID)
	out := &provider.TurnOutcome{TurnID: ts.ID}
	switch {
	case ts.CancelRequested || t.Status == turnInterrupted:
		out.StopReason, out.Cancelled = provider.StopCancelled, true
	case t.Status == turnCompleted:
		out.StopReason = provider.StopEndTurn
	case t.Status == turnFailed:
		out.Err = provider.NewFailure(provider.ClassTurnFailed, nil)
	default:
		out.Err = provider.NewFailure(provider.ClassTurnFailed, nil) // inProgress or unknown: a protocol error
	}
	return provider.Inbound{Kind: provider.KindTurnSettled, Method: noteTurnCompleted, Outcome: out, Err: out.Err}
}

func (c *Client) item(method string, it threadItem) []provider.Inbound {
	switch it.Type {
	case itemCommandExecution, itemMCPToolCall:
		title, kind := it.Command, "execute"
		if it.Type == itemMCPToolCall {
			title, kind = it.Server+"."+it.Tool, "other"
		}
		u := provider.SessionUpdate{Kind: provider.UpdateToolCall, ToolCallID: it.ID, Title: &title, ToolKind: kind, Status: "in_progress"}
		if method == noteItemCompleted {
			u.Kind, u.Status = provider.UpdateToolCallUpdate, toolStatus(it.Status)
			if it.AggregatedOutput != nil {
				u.ToolOutput = []provider.ToolCallContent{{Type: "content", Content: &provider.ContentBlock{Type: "text", Text: *it.AggregatedOutput}}}
			}
		}
		return []provider.Inbound{{Kind: provider.KindUpdate, Method: method, Update: &u, TurnID: c.wire().Turn.ID}}
	case itemContextCompaction:
		if method == noteItemCompleted {
			return []provider.Inbound{{Kind: provider.KindEvents, Method: method, Events: []provider.Event{c.compacted()}}}
		}
	}
	// Message and reasoning items are built from their deltas; other
	// items are not mapped.
	return nil
}

func (c *Client) nextID(kind string) string {
	st := c.cl.Map()
	st.NextItem++
	return "codex-" + kind + "-" + strconv.FormatUint(st.NextItem, 10)
}

func (c *Client) turnID() string {
	if t := c.wire().Turn; t != nil {
		return t.ID
	}
	return ""
}

// compacted is context.compacted (P1).
func (c *Client) compacted() provider.Event {
	return provider.Event{EventType: prp.EventContextCompacted, Priority: provider.P1, TurnID: c.turnID(), Payload: map[string]any{
		"schema": "paperclip.context.compacted.v1", "compactionId": c.nextID("compaction"), "reason": "provider",
		"preTokens": nil, "postTokens": nil, "sameSession": true}}
}

// notice is provider.notice.recorded (P0). The provider's text is never
// forwarded: the summary names the notification only.
func (c *Client) notice(method string, n noticeNotification) provider.Event {
	severity, summary := "warning", "the provider reported a warning"
	switch method {
	case noteError:
		severity, summary = "error", "the provider reported an error"
	case noteDeprecation:
		severity, summary = "info", "the provider reported a deprecation"
	case noteConfigWarning:
		summary = "the provider reported a configuration warning"
	}
	scope := "session"
	if c.turnID() != "" {
		scope = "turn"
	}
	return provider.Event{EventType: prp.EventProviderNoticeRecorded, Priority: provider.P0, TurnID: c.turnID(), Payload: map[string]any{
		"schema": "paperclip.provider.notice.v1", "noticeId": c.nextID("notice"), "severity": severity,
		"category": method, "scope": scope, "recoverable": method != noteError || n.WillRetry,
		"userActionable": false, "summary": summary}}
}

func planStatus(s string) string {
	switch s {
	case "inProgress":
		return "in_progress"
	case "completed":
		return "completed"
	}
	return "pending"
}

func toolStatus(s string) string {
	switch s {
	case "completed":
		return "completed"
	case "failed", "declined":
		return "failed"
	}
	return "in_progress"
}

func tokens(b tokenBreakdown) provider.TokenUsage {
	return provider.TokenUsage{TotalTokens: b.TotalTokens, InputTokens: b.InputTokens, OutputTokens: b.OutputTokens,
		ThoughtTokens: b.ReasoningOutputTokens, CachedReadTokens: b.CachedInputTokens}
}
