package codexapp

import (
	"encoding/json"
	"strconv"

	"github.com/pcrunner/pcrunner/internal/acpx"
)

// notification maps one app-server notification (codex.md §5) to the
// Inbound model: message and reasoning deltas, plans and tool items as the
// ACP session updates acpx.Mapper already maps; turn/completed as a
// settled turn; usage, compaction and notices as KindEvents. Anything else
// is dropped and counted (WireState.LateUpdates for another thread's or
// turn's, SkippedLines for undecodable ones).
func (c *Client) notification(m Message) []acpx.Inbound {
	w := c.wire()
	turn := w.Turn
	switch m.Method {
	case NoteTurnStarted:
		var n TurnNotification
		if c.decode(m, &n) && c.ours(n.ThreadID) && turn != nil && turn.ProviderTurnID == "" {
			turn.ProviderTurnID = n.Turn.ID
		}
		return nil
	case NoteTurnCompleted:
		var n TurnNotification
		if !c.decode(m, &n) || !c.ours(n.ThreadID) || !c.inTurn(n.Turn.ID) {
			return nil
		}
		return []acpx.Inbound{c.settle(n.Turn)}
	case NoteAgentDelta, NoteReasoningDelta, NoteReasoningSummary:
		var n DeltaNotification
		if !c.decode(m, &n) || !c.ours(n.ThreadID) || !c.inTurn(n.TurnID) {
			return nil
		}
		kind := acpx.UpdateAgentMessageChunk
		if m.Method != NoteAgentDelta {
			kind = acpx.UpdateAgentThoughtChunk
		}
		u := acpx.SessionUpdate{Kind: kind, MessageID: n.ItemID, Content: &acpx.ContentBlock{Type: "text", Text: n.Delta}}
		return []acpx.Inbound{{Kind: acpx.KindUpdate, Method: m.Method, Update: &u, TurnID: turn.ID}}
	case NotePlanUpdated:
		var n PlanNotification
		if !c.decode(m, &n) || !c.ours(n.ThreadID) || !c.inTurn(n.TurnID) {
			return nil
		}
		u := acpx.SessionUpdate{Kind: acpx.UpdatePlan, Entries: []acpx.PlanEntry{}}
		for _, s := range n.Plan {
			u.Entries = append(u.Entries, acpx.PlanEntry{Content: s.Step, Priority: "medium", Status: planStatus(s.Status)})
		}
		return []acpx.Inbound{{Kind: acpx.KindUpdate, Method: m.Method, Update: &u, TurnID: turn.ID}}
	case NoteTokenUsage:
		var n TokenUsageNotification
		if !c.decode(m, &n) || !c.ours(n.ThreadID) {
			return nil
		}
		turnID := ""
		if turn != nil {
			turnID = turn.ID
		}
		ev := c.Mapper.UsageReported(c.cl.Map(), turnID, tokens(n.TokenUsage.Total), tokens(n.TokenUsage.Last))
		return []acpx.Inbound{{Kind: acpx.KindEvents, Method: m.Method, Events: []acpx.Event{ev}}}
	case NoteItemStarted, NoteItemCompleted:
		var n ItemNotification
		if !c.decode(m, &n) || !c.ours(n.ThreadID) || !c.inTurn(n.TurnID) {
			return nil
		}
		return c.item(m.Method, n.Item)
	case NoteThreadCompacted:
		if turn == nil {
			return nil
		}
		return []acpx.Inbound{{Kind: acpx.KindEvents, Method: m.Method, Events: []acpx.Event{c.compacted()}}}
	case NoteError, NoteWarning, NoteDeprecation, NoteConfigWarning:
		var n NoticeNotification
		_ = json.Unmarshal(m.Params, &n) // every field is optional
		return []acpx.Inbound{{Kind: acpx.KindEvents, Method: m.Method, Events: []acpx.Event{c.notice(m.Method, n)}}}
	case NoteRequestResolved:
		var n RequestResolvedNotification
		if !c.decode(m, &n) || len(n.RequestID) == 0 {
			return nil
		}
		key := compactID(n.RequestID)
		if _, ok := w.AgentRequests[key]; !ok {
			return nil
		}
		return []acpx.Inbound{{Kind: acpx.KindCancelRequest, ID: json.RawMessage(key), Method: m.Method}}
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
	if threadID == "" || threadID == c.ThreadID() {
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
func (c *Client) settle(t Turn) acpx.Inbound {
	w := c.wire()
	ts := w.Turn
	w.Turn = nil
	delete(w.Pending, ts.PromptRequestID)
	out := &acpx.TurnOutcome{TurnID: ts.ID}
	switch {
	case ts.CancelRequested || t.Status == TurnInterrupted:
		out.StopReason, out.Cancelled = acpx.StopCancelled, true
	case t.Status == TurnCompleted:
		out.StopReason = acpx.StopEndTurn
	case t.Status == TurnFailed:
		out.Err = acpx.NewFailure(acpx.ClassTurnFailed, nil)
	default:
		out.Err = acpx.NewFailure(acpx.ClassTurnFailed, nil) // inProgress or unknown: a protocol error
	}
	return acpx.Inbound{Kind: acpx.KindTurnSettled, Method: NoteTurnCompleted, Outcome: out, Err: out.Err}
}

func (c *Client) item(method string, it ThreadItem) []acpx.Inbound {
	switch it.Type {
	case ItemCommandExecution, ItemMCPToolCall:
		title, kind := it.Command, "execute"
		if it.Type == ItemMCPToolCall {
			title, kind = it.Server+"."+it.Tool, "other"
		}
		u := acpx.SessionUpdate{Kind: acpx.UpdateToolCall, ToolCallID: it.ID, Title: &title, ToolKind: kind, Status: "in_progress"}
		if method == NoteItemCompleted {
			u.Kind, u.Status = acpx.UpdateToolCallUpdate, toolStatus(it.Status)
			if it.AggregatedOutput != nil {
				u.ToolOutput = []acpx.ToolCallContent{{Type: "content", Content: &acpx.ContentBlock{Type: "text", Text: *it.AggregatedOutput}}}
			}
		}
		return []acpx.Inbound{{Kind: acpx.KindUpdate, Method: method, Update: &u, TurnID: c.wire().Turn.ID}}
	case ItemContextCompaction:
		if method == NoteItemCompleted {
			return []acpx.Inbound{{Kind: acpx.KindEvents, Method: method, Events: []acpx.Event{c.compacted()}}}
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
func (c *Client) compacted() acpx.Event {
	return acpx.Event{EventType: "context.compacted", Priority: acpx.P1, TurnID: c.turnID(), Payload: map[string]any{
		"schema": "paperclip.context.compacted.v1", "compactionId": c.nextID("compaction"), "reason": "provider",
		"preTokens": nil, "postTokens": nil, "sameSession": true}}
}

// notice is provider.notice.recorded (P0). The provider's text is never
// forwarded: the summary names the notification only.
func (c *Client) notice(method string, n NoticeNotification) acpx.Event {
	severity, summary := "warning", "the provider reported a warning"
	switch method {
	case NoteError:
		severity, summary = "error", "the provider reported an error"
	case NoteDeprecation:
		severity, summary = "info", "the provider reported a deprecation"
	case NoteConfigWarning:
		summary = "the provider reported a configuration warning"
	}
	scope := "session"
	if c.turnID() != "" {
		scope = "turn"
	}
	return acpx.Event{EventType: "provider.notice.recorded", Priority: acpx.P0, TurnID: c.turnID(), Payload: map[string]any{
		"schema": "paperclip.provider.notice.v1", "noticeId": c.nextID("notice"), "severity": severity,
		"category": method, "scope": scope, "recoverable": method != NoteError || n.WillRetry,
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

func tokens(b TokenBreakdown) acpx.TokenUsage {
	return acpx.TokenUsage{TotalTokens: b.TotalTokens, InputTokens: b.InputTokens, OutputTokens: b.OutputTokens,
		ThoughtTokens: b.ReasoningOutputTokens, CachedReadTokens: b.CachedInputTokens}
}
