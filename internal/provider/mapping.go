package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pcrunner/pcrunner/internal/outputbody"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// PRP event priorities (prp.md §8.1).
const (
	P0 = 0 // lifecycle, terminal, diagnostics on failure
	P1 = 1 // normal
	P2 = 2 // coalescable deltas
)

// Payload bounds, from the reference schemas.
const (
	// maxItemText bounds item.completed's inline text; it mirrors the
	// tool execution output bound (provider-event.schema.json).
	maxItemText = 65536
	// maxItemBody bounds the text an open item accumulates: the whole of
	// it may travel as an output body (workspace.md §7.2).
	maxItemBody = outputbody.MaxBodyBytes
	// maxHeldText bounds the text a streamed item holds back while it may
	// be the start of a credential (Mapper.OpenSecret): a private key
	// block of a 4096-bit RSA key is about 3.3 KB. Past it the text goes
	// out as it is, sanitised one delta at a time.
	maxHeldText = 16 << 10
	// maxToolOutput is toolExecution.output maxLength.
	maxToolOutput = 65536
	// maxShortText is the schema's shortText maxLength.
	maxShortText = 4000
	// maxSummary is result.schema.json summary maxLength.
	maxSummary = 12000
	// maxPlanSteps is plan.steps maxItems.
	maxPlanSteps = 256
	// maxSafeID is the schema id maxLength.
	maxSafeID = 160
	// maxSessionList bounds names listed in a session.updated payload.
	maxSessionList = 64
)

// Event is one PRP event description; runnerd wraps it in the envelope
// (sourceEventId, sourceSeq, identity, emittedAt) when it commits it to the
// outbox.
type Event struct {
	EventType string         `json:"eventType"`
	Priority  int            `json:"priority"`
	TurnID    string         `json:"turnId,omitempty"`
	ItemID    string         `json:"itemId,omitempty"`
	Payload   map[string]any `json:"payload"`
	// ExecutorID, when set, makes this an executor event under that id
	// (prp.md §9.4): the receipt journal deduplicates it (tools.md §3
	// item 3: the semantic tool events).
	ExecutorID string `json:"executorId,omitempty"`
	// Body, when set, is the event's full text (a message's, a thought's
	// or a tool's output), of which the payload holds a preview: the
	// runner sends it as an output body where the lease allows
	// (workspace.md §7). BodyField and BodyTruncatedField name the
	// payload's preview and its truncation flag.
	Body                          string `json:"-"`
	BodyField, BodyTruncatedField string `json:"-"`
}

// MapState is the mapping's durable state (part of the record): item ids
// and texts of the active turn, the plan revision, usage baselines.
type MapState struct {
	// NextItem numbers items record-wide, so item ids are never reused.
	NextItem uint64 `json:"nextItem"`
	// Items are the active turn's open items by key.
	Items map[string]*ItemState `json:"items,omitempty"`
	// Order lists Items keys in creation order.
	Order []string `json:"order,omitempty"`
	// LastMessage is the key of the latest assistant message item.
	LastMessage  string `json:"lastMessage,omitempty"`
	PlanRevision int    `json:"planRevision,omitempty"`

	// Cost is the latest cumulative cost; CostAtTurnStart its value when
	// the active turn began.
	Cost            float64 `json:"cost,omitempty"`
	CostAtTurnStart float64 `json:"costAtTurnStart,omitempty"`
	// Unpriced is set while the agent reports cost in a currency other
	// than USD.
	Unpriced bool `json:"unpriced,omitempty"`
	// Tokens are cumulative prompt usage over the session.
	Tokens TokenUsage `json:"tokens"`
	// SemanticResult is the active turn's accepted semantic result (the
	// normalised paperclip_finish/paperclip_block input the server
	// accepted, tools.md §4); Settle emits it and clears it.
	SemanticResult json.RawMessage `json:"semanticResult,omitempty"`
}

// ItemState is one open item.
type ItemState struct {
	ItemID    string `json:"itemId"`
	Kind      string `json:"kind"`
	Text      string `json:"text,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Done      bool   `json:"done,omitempty"`
	// Tool fields carry over updates that send only changed fields.
	Name      string `json:"name,omitempty"`
	Operation string `json:"operation,omitempty"`
	Target    string `json:"target,omitempty"`
	ReadOnly  *bool  `json:"readOnly,omitempty"`
	Status    string `json:"status,omitempty"`
	// Held is streamed text not yet sent: it may be the start of a
	// credential the next chunk completes (Mapper.chunk).
	Held string `json:"held,omitempty"`
	// text holds Text's bytes with room to grow (at most about twice
	// maxItemBody), so a chunk costs a copy of the chunk and not of the
	// text so far (appendText). A shallow copy of the item shares it, a
	// cloned record starts without one; appends never touch the bytes a
	// Text already covers. It is not part of the record.
	text *strings.Builder
}

// appendText appends s to it.Text in time proportional to len(s): Text
// is a view of the builder's bytes, and a builder only ever appends, so
// every Text taken earlier, in this item or a copy of it, stays as it
// was. A builder that does not end exactly at Text (a copy appended
// first, or Text was set directly) is replaced by one holding Text;
// comparing the two is cheap when they share their bytes, the usual case.
func (it *ItemState) appendText(s string) {
	if it.text == nil || it.text.Len() != len(it.Text) || it.text.String() != it.Text {
		it.text = &strings.Builder{}
		it.text.Grow(len(it.Text) + len(s))
		it.text.WriteString(it.Text)
	}
	it.text.WriteString(s)
	it.Text = it.text.String()
}

// Ending is how a turn finished, as PRP sees it.
type Ending int

// Turn endings.
const (
	EndCompleted   Ending = iota + 1 // the agent answered a stop reason
	EndFailed                        // error, loss, agent exit
	EndInterrupted                   // turn.interrupt / turn.stop
	EndCancelled                     // run.cancel
)

// Settlement describes a finished turn.
type Settlement struct {
	TurnID     string
	Ending     Ending
	StopReason string
	Usage      *TokenUsage
	// Class is the failure class of EndFailed.
	Class Class
	// Reason is turn.interrupted's reason (e.g. "operator").
	Reason string
}

// Descriptor is the part of the acpx provider descriptor copied into
// session events.
type Descriptor struct {
	Agent           string
	ProviderVersion string
}

// Mapper maps ACP to PRP events (acp.md §5). Its methods are pure: the
// output depends only on the arguments and the MapState they update.
type Mapper struct {
	// Redactor scrubs every text that reaches a payload.
	Redactor *Redactor
	// OpenSecret is the outbox sanitiser's rule for streamed text: the
	// least index from which a text may start a credential that more text
	// completes (state.OpenSecretStart); nil holds nothing back for it.
	OpenSecret func(string) int
	// Provider names the agent in usage receipts (the descriptor's agent).
	Provider string
	// Cwd relativises tool targets; absolute paths outside it are dropped.
	Cwd string
	// ContractRevision is run.prepare's completionContract.revision; with
	// CriterionIDs (its criterionIds) it makes Settle synthesise a run
	// result when the agent reported none (tools.md §4).
	ContractRevision string
	CriterionIDs     []string
	// Adapter and Driver name the wire protocol in turn.started,
	// run.terminal, request payloads and the provider descriptor: "" means
	// "acpx" and "acpx_runtime" (codex.md §5: "codex", "codex_app_server").
	Adapter, Driver string
}

// AdapterName is Adapter or "acpx".
func (mp Mapper) AdapterName() string {
	if mp.Adapter == "" {
		return "acpx"
	}
	return mp.Adapter
}

// DriverName is Driver or "acpx_runtime".
func (mp Mapper) DriverName() string {
	if mp.Driver == "" {
		return "acpx_runtime"
	}
	return mp.Driver
}

// SessionOpened yields harness.ready then session.started (cold) or
// session.resumed.
func (mp Mapper) SessionOpened(rec Record, resumed bool, d Descriptor) []Event {
	ready := map[string]any{"agent": d.Agent, "protocolVersion": rec.ProtocolVersion}
	if rec.AgentInfo != nil {
		ready["agentName"] = mp.text(rec.AgentInfo.Name, maxShortText)
		ready["agentVersion"] = mp.text(rec.AgentInfo.Version, maxShortText)
	}
	sess := map[string]any{
		"providerSessionId": rec.ACPSessionID,
		"providerDescriptor": map[string]any{
			"driver": mp.DriverName(), "providerVersion": d.ProviderVersion, "agent": d.Agent,
		},
	}
	if rec.AgentSessionID != "" {
		sess["agentSessionId"] = rec.AgentSessionID
	}
	typ := prp.EventSessionStarted
	if resumed {
		typ = prp.EventSessionResumed
	}
	return []Event{
		{EventType: prp.EventHarnessReady, Priority: P0, Payload: ready},
		{EventType: typ, Priority: P0, Payload: sess},
	}
}

// SessionAdopted yields session.resumed alone: a live agent was adopted,
// no harness started (workspace.md §8).
func (mp Mapper) SessionAdopted(rec Record, d Descriptor) []Event {
	return mp.SessionOpened(rec, true, d)[1:]
}

// TurnStarted yields turn.started once the prompt is written (payload as
// tools.md §7) and resets the per-turn state.
func (mp Mapper) TurnStarted(st *MapState, turnID string) []Event {
	st.Items, st.Order, st.LastMessage, st.PlanRevision = nil, nil, "", 0
	st.CostAtTurnStart = st.Cost
	return []Event{{EventType: prp.EventTurnStarted, Priority: P1, TurnID: turnID,
		Payload: map[string]any{"provider": mp.AdapterName(), "providerTurnId": turnID, "status": "inProgress",
			"turn": map[string]any{"id": turnID, "status": "inProgress"}}}}
}

// Update maps one session/update of turn turnID ("" outside a turn).
func (mp Mapper) Update(st *MapState, turnID string, u SessionUpdate) []Event {
	switch u.Kind {
	case UpdateAgentMessageChunk, UpdateAgentThoughtChunk:
		if turnID == "" {
			return nil
		}
		return mp.chunk(st, turnID, u)
	case UpdateToolCall, UpdateToolCallUpdate:
		if turnID == "" {
			return nil
		}
		return mp.tool(st, turnID, u)
	case UpdatePlan:
		if turnID == "" {
			return nil
		}
		return mp.plan(st, turnID, u)
	case updateUsage:
		return mp.usageUpdate(st, turnID, u)
	case UpdateCurrentMode, UpdateConfigOption, UpdateAvailableCommands, UpdateSessionInfo:
		return mp.sessionUpdated(turnID, u)
	}
	// user_message_chunk and unknown variants are not forwarded.
	return nil
}

func (mp Mapper) chunk(st *MapState, turnID string, u SessionUpdate) []Event {
	kind := "assistant_message"
	if u.Kind == UpdateAgentThoughtChunk {
		kind = "reasoning"
	}
	raw := ""
	if u.Content != nil && u.Content.Type == "text" {
		raw = u.Content.Text
	}
	key := kind + ":" + u.MessageID
	it, evs := mp.item(st, turnID, key, kind)
	if kind == "assistant_message" {
		st.LastMessage = key
	}
	if raw == "" {
		return evs
	}
	// Each delta is sanitised on its own, so text that may begin a
	// credential waits for the chunk that completes or ends it.
	s := it.Held + raw
	cut := mp.openSecret(s)
	it.Held = s[cut:]
	return append(evs, mp.delta(it, turnID, s[:cut])...)
}

// openSecret is the least index of s that may start a secret more text
// completes (a known value or a credential shape), or len(s); a held
// tail past maxHeldText is let go.
func (mp Mapper) openSecret(s string) int {
	cut := mp.Redactor.OpenStart(s)
	if mp.OpenSecret != nil {
		cut = min(cut, mp.OpenSecret(s))
	}
	if len(s)-cut > maxHeldText {
		return len(s)
	}
	return cut
}

// delta scrubs text, adds it to the item's text and yields its item.delta
// (nothing for empty text).
func (mp Mapper) delta(it *ItemState, turnID, text string) []Event {
	text = mp.Redactor.String(text)
	if text == "" {
		return nil
	}
	if !it.Truncated {
		if len(it.Text)+len(text) > maxItemBody {
			it.appendText(truncateUTF8(text, maxItemBody-len(it.Text)))
			it.Truncated = true
		} else {
			it.appendText(text)
		}
	}
	return []Event{{EventType: prp.EventItemDelta, Priority: P2, TurnID: turnID, ItemID: it.ItemID,
		Payload: map[string]any{"kind": it.Kind, "text": text}}}
}

// item returns the open item for key, starting it if needed.
func (mp Mapper) item(st *MapState, turnID, key, kind string) (*ItemState, []Event) {
	if it, ok := st.Items[key]; ok && !it.Done {
		return it, nil
	}
	if st.Items == nil {
		st.Items = map[string]*ItemState{}
	}
	st.NextItem++
	it := &ItemState{ItemID: safeID(turnID) + "-item-" + strconv.FormatUint(st.NextItem, 10), Kind: kind}
	if _, ok := st.Items[key]; !ok {
		st.Order = append(st.Order, key)
	}
	st.Items[key] = it
	if kind == "tool_call" {
		return it, nil
	}
	return it, []Event{{EventType: prp.EventItemStarted, Priority: P1, TurnID: turnID, ItemID: it.ItemID,
		Payload: map[string]any{"kind": kind, "text": ""}}}
}

func (mp Mapper) tool(st *MapState, turnID string, u SessionUpdate) []Event {
	key := "tool:" + u.ToolCallID
	it, existed := st.Items[key]
	var evs []Event
	fresh := !existed || it.Done
	if fresh {
		if u.Kind == UpdateToolCallUpdate && existed {
			return nil // an update after completion: nothing new to say
		}
		it, _ = mp.item(st, turnID, key, "tool_call")
		it.Name, it.Operation = "ACP tool call", "unknown"
	}
	if u.Title != nil {
		it.Name = mp.text(*u.Title, maxShortText)
	}
	if u.ToolKind != "" {
		it.Operation, it.ReadOnly = toolOperation(u.ToolKind)
	}
	if len(u.Locations) > 0 {
		it.Target = mp.safeTarget(u.Locations[0].Path)
	}
	output, haveOutput := mp.toolOutput(u.ToolOutput)
	status := "running"
	switch u.Status {
	case "completed":
		status = "completed"
	case "failed":
		status = "failed"
	}
	it.Status = status
	payload := mp.toolPayload(it, status, output, haveOutput)
	switch {
	case fresh:
		evs = append(evs,
			Event{EventType: prp.EventItemStarted, Priority: P1, TurnID: turnID, ItemID: it.ItemID,
				Payload: map[string]any{"kind": "tool_call", "title": it.Name}},
			Event{EventType: prp.EventToolExecutionStarted, Priority: P1, TurnID: turnID, ItemID: it.ItemID, Payload: payload})
		if status == "running" {
			return evs
		}
		payload = mp.toolPayload(it, status, output, haveOutput)
		fallthrough
	case status != "running":
		it.Done = true
		evs = append(evs,
			withBody(Event{EventType: prp.EventToolExecutionCompleted, Priority: P1, TurnID: turnID, ItemID: it.ItemID, Payload: payload},
				output, "output", "outputTruncated"),
			Event{EventType: prp.EventItemCompleted, Priority: P1, TurnID: turnID, ItemID: it.ItemID,
				Payload: map[string]any{"kind": "tool_call", "title": it.Name, "status": status}})
		if status == "failed" {
			msg := strings.TrimSpace(output)
			if msg == "" {
				msg = "tool failed"
			}
			evs = append(evs, mp.itemFailed(turnID, it.ItemID, "tool_call", msg))
		}
	default:
		evs = append(evs, Event{EventType: prp.EventToolExecutionProgressed, Priority: P2, TurnID: turnID, ItemID: it.ItemID, Payload: payload})
	}
	return evs
}

func (mp Mapper) toolPayload(it *ItemState, status, output string, haveOutput bool) map[string]any {
	p := map[string]any{
		"schema":          "paperclip.tool.execution.v1",
		"executionId":     safeID(it.ItemID),
		"transport":       "builtin",
		"operation":       it.Operation,
		"name":            it.Name,
		"status":          status,
		"output":          nil,
		"outputBytes":     0,
		"outputTruncated": false,
		"outputDigest":    nil,
	}
	if it.Target != "" {
		p["target"] = it.Target
	}
	if it.ReadOnly != nil {
		p["readOnly"] = *it.ReadOnly
	}
	if haveOutput {
		sum := sha256.Sum256([]byte(output))
		p["outputBytes"] = len(output)
		p["outputDigest"] = "sha256:" + hex.EncodeToString(sum[:])
		if len(output) > maxToolOutput {
			p["output"] = truncateUTF8(output, maxToolOutput)
			p["outputTruncated"] = true
		} else {
			p["output"] = output
		}
	}
	return p
}

// toolOutput joins the text of the tool call's content (redacted); diffs
// and terminals are summarised by reference, never by their bytes.
func (mp Mapper) toolOutput(cs []ToolCallContent) (string, bool) {
	if len(cs) == 0 {
		return "", false
	}
	var b strings.Builder
	for _, c := range cs {
		switch c.Type {
		case "content":
			if c.Content != nil && c.Content.Type == "text" {
				b.WriteString(c.Content.Text)
			}
		case "diff":
			fmt.Fprintf(&b, "[diff %s]", mp.safeTarget(c.Path))
		case "terminal":
			b.WriteString("[terminal]")
		}
	}
	return mp.Redactor.String(b.String()), true
}

// toolOperation maps an ACP ToolKind to the PRP operation and read-only flag.
func toolOperation(kind string) (string, *bool) {
	t, f := true, false
	switch kind {
	case "read":
		return "read", &t
	case "search":
		return "search", &t
	case "execute":
		return "execute", &f
	case "edit", "delete", "move":
		return "edit", &f
	case "fetch", "think":
		return "unknown", &t
	}
	return "unknown", nil
}

// safeTarget turns an ACP absolute path into the schema's safePath: relative
// to cwd, never absolute, never climbing out. Paths outside cwd are dropped.
func (mp Mapper) safeTarget(p string) string {
	if p == "" || mp.Cwd == "" || !filepath.IsAbs(p) {
		return ""
	}
	rel, err := filepath.Rel(mp.Cwd, filepath.Clean(p))
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || len(rel) > 4096 {
		return ""
	}
	return mp.Redactor.String(rel)
}

func (mp Mapper) plan(st *MapState, turnID string, u SessionUpdate) []Event {
	st.PlanRevision++
	entries := u.Entries
	if len(entries) > maxPlanSteps {
		entries = entries[:maxPlanSteps]
	}
	steps := make([]any, 0, len(entries))
	complete := len(entries) > 0
	for i, e := range entries {
		status := e.Status
		switch status {
		case "pending", "in_progress", "completed":
		default:
			status = "pending"
		}
		if status != "completed" {
			complete = false
		}
		steps = append(steps, map[string]any{
			"stepId": "step-" + strconv.Itoa(i+1),
			"body":   mp.text(e.Content, maxShortText),
			"status": status,
		})
	}
	return []Event{{EventType: prp.EventPlanUpdated, Priority: P1, TurnID: turnID, Payload: map[string]any{
		"schema":           "paperclip.plan.updated.v1",
		"planId":           safeID(turnID) + "-plan",
		"revision":         st.PlanRevision,
		"steps":            steps,
		"complete":         complete,
		"syncStatus":       "not_applicable",
		"documentRevision": nil,
	}}}
}

// usageUpdate reports a cumulative cost change; the run delta is taken
// against the pre-turn value, and a drop means the agent restarted.
func (mp Mapper) usageUpdate(st *MapState, turnID string, u SessionUpdate) []Event {
	if u.Cost == nil {
		return nil
	}
	if c := strings.ToUpper(u.Cost.Currency); c != "USD" {
		// The receipt counts US dollars only: report the usage unpriced.
		st.Unpriced = true
		return []Event{mp.usageEvent(st, turnID, nil)}
	}
	st.Unpriced = false
	if u.Cost.Amount < st.Cost {
		st.CostAtTurnStart = 0
	}
	st.Cost = u.Cost.Amount
	return []Event{mp.usageEvent(st, turnID, nil)}
}

func (mp Mapper) usageEvent(st *MapState, turnID string, turn *TokenUsage) Event {
	priced := !st.Unpriced
	delta := st.Cost - st.CostAtTurnStart
	if delta < 0 {
		delta = 0
	}
	cum := measurement(st.Tokens, st.Cost, priced)
	var d TokenUsage
	if turn != nil {
		d = *turn
	}
	p := map[string]any{
		"provider":   mp.provider(),
		"model":      nil,
		"cumulative": cum,
		"runDelta":   measurement(d, delta, priced),
	}
	if turnID != "" {
		p["providerTurnId"] = turnID
	}
	return Event{EventType: prp.EventUsageReported, Priority: P2, TurnID: turnID, Payload: p}
}

func measurement(t TokenUsage, cost float64, priced bool) map[string]any {
	m := map[string]any{
		"inputTokens":      nonNeg(t.InputTokens),
		"outputTokens":     nonNeg(t.OutputTokens),
		"cacheReadTokens":  nonNeg(t.CachedReadTokens),
		"cacheWriteTokens": nonNeg(t.CachedWriteTokens),
		"activeSeconds":    0,
		"requests":         0,
		"providerCostUsd":  cost,
	}
	if t.TotalTokens > 0 || t.InputTokens > 0 || t.OutputTokens > 0 {
		m["requests"] = 1
		m["requestCountSource"] = "token_bearing_turn_minimum"
		m["requestCountExact"] = false
	} else {
		m["requestCountSource"] = "unavailable"
	}
	if priced {
		m["providerCostStatus"] = "reported"
	} else {
		m["providerCostUsd"] = 0
		m["providerCostStatus"] = "unpriced"
		m["providerCostUnavailableReason"] = "non_usd_currency"
	}
	return m
}

func (mp Mapper) sessionUpdated(turnID string, u SessionUpdate) []Event {
	p := map[string]any{"providerMethod": MethodSessionUpdate, "update": u.Kind}
	switch u.Kind {
	case UpdateCurrentMode:
		p["currentModeId"] = mp.text(u.CurrentModeID, maxShortText)
	case UpdateAvailableCommands:
		p["commands"] = mp.names(u.AvailableCommands, "name")
	case UpdateConfigOption:
		p["configOptions"] = mp.names(u.ConfigOptions, "id")
	case UpdateSessionInfo:
		if u.SessionTitle != nil {
			p["title"] = mp.text(*u.SessionTitle, maxShortText)
		}
	}
	return []Event{{EventType: prp.EventSessionUpdated, Priority: P1, TurnID: turnID, Payload: p}}
}

// names lists one string field of raw objects, bounded and redacted.
func (mp Mapper) names(raws []json.RawMessage, field string) []any {
	out := []any{}
	for _, r := range raws {
		if len(out) == maxSessionList {
			break
		}
		var m map[string]any
		if json.Unmarshal(r, &m) != nil {
			continue
		}
		if s, ok := m[field].(string); ok {
			out = append(out, mp.text(s, maxShortText))
		}
	}
	return out
}

// RuntimeRequest is a permission request surfaced as a PRP runtime
// request: its id, the item of its tool call, and the ACP option id of
// each offered action (requestChoices).
type RuntimeRequest struct {
	ID      string
	TurnID  string
	ItemID  string
	Choices map[string]string
}

// Runtime request closing reasons (tools.md §7): expired when the turn
// completed or the agent was lost, cancelled on an interrupt, close or
// stop.
const (
	RequestExpired   = "expired"
	RequestCancelled = "cancelled"
)

// PermissionRequest maps a session/request_permission that the mode
// leaves to a person to runtime_request.created, v1 shape (tools.md §7,
// request.schema.json): choices accept / accept_for_session / decline /
// cancel as offered (1–4), the prompt the tool call's title. st (may be
// nil) finds the item of the tool call the request is about.
func (mp Mapper) PermissionRequest(st *MapState, turnID string, agentRequestID json.RawMessage, req PermissionRequest) (RuntimeRequest, []Event) {
	rr := RuntimeRequest{
		ID:      safeID(safeID(turnID) + "-permission-" + safeID(IDKey(agentRequestID))),
		TurnID:  turnID,
		Choices: requestChoices(req),
	}
	if st != nil {
		if it := st.Items["tool:"+req.ToolCall.ToolCallID]; it != nil {
			rr.ItemID = it.ItemID
		}
	}
	if rr.ItemID == "" {
		// No tool_call came first (Gemini): name the item by its tool call.
		rr.ItemID = safeID(safeID(turnID) + "-toolcall-" + safeID(req.ToolCall.ToolCallID))
	}
	prompt := mp.text(req.ToolCall.Title, maxShortText)
	if prompt == "" {
		prompt = "Allow the agent's tool call?"
	}
	choices := make([]any, 0, len(rr.Choices))
	for _, a := range actionOrder {
		if _, ok := rr.Choices[a]; ok {
			choices = append(choices, map[string]any{"key": a, "label": actionLabels[a]})
		}
	}
	details := map[string]any{"toolCallId": mp.text(req.ToolCall.ToolCallID, maxShortText)}
	if n := req.toolName(); n != "" {
		details["toolName"] = mp.text(n, maxShortText)
	}
	if req.ToolCall.Kind != "" {
		details["toolKind"] = mp.text(req.ToolCall.Kind, maxShortText)
	}
	request := map[string]any{
		"schema":      "paperclip.runtime_request.v1",
		"requestKind": "runtime",
		"requestId":   rr.ID,
		"type":        "permission",
		"status":      "pending",
		"prompt":      prompt,
		"choices":     choices,
		"itemId":      rr.ItemID,
		"details":     details,
		"origin":      map[string]any{"adapter": "acpx", "provider": mp.provider(), "method": MethodRequestPermission},
	}
	if turnID != "" {
		request["turnId"] = turnID
	}
	return rr, []Event{{EventType: prp.EventRuntimeRequestCreated, Priority: P0, TurnID: turnID, ItemID: rr.ItemID,
		Payload: map[string]any{"request": request}}}
}

// RequestResolved maps request.resolve's delivered answer (tools.md §7).
func (mp Mapper) RequestResolved(rr RuntimeRequest, action string) []Event {
	p := mp.requestPayload(rr, "delivered")
	p["action"] = action
	return []Event{{EventType: prp.EventRuntimeRequestResolved, Priority: P1, TurnID: rr.TurnID, ItemID: rr.ItemID, Payload: p}}
}

// RequestClosed maps a runtime request left open: status RequestExpired
// (turn completed, agent lost) or RequestCancelled (interrupt, close,
// stop), never replayable; reason says which.
func (mp Mapper) RequestClosed(rr RuntimeRequest, status, reason string) []Event {
	p := mp.requestPayload(rr, status)
	p["replayAllowed"] = false
	p["reason"] = reason
	typ := prp.EventRuntimeRequestExpired
	if status == RequestCancelled {
		typ = prp.EventRuntimeRequestCancelled
	}
	return []Event{{EventType: typ, Priority: P1, TurnID: rr.TurnID, ItemID: rr.ItemID, Payload: p}}
}

func (mp Mapper) requestPayload(rr RuntimeRequest, status string) map[string]any {
	p := map[string]any{"provider": mp.AdapterName(), "requestId": rr.ID, "status": status, "requestKind": "runtime", "itemId": rr.ItemID}
	if rr.TurnID != "" {
		p["turnId"] = rr.TurnID
	}
	return p
}

// RuntimeRequestOf is the runtime request a pending agent request was
// surfaced as (RuntimeRequestID set by Client.SetRuntimeRequest).
func RuntimeRequestOf(r AgentRequest) RuntimeRequest {
	return RuntimeRequest{ID: r.RuntimeRequestID, TurnID: r.TurnID, ItemID: r.ItemID, Choices: r.Choices}
}

// withBody gives e its full text when the text is long enough for an
// output body (workspace.md §7.2).
func withBody(e Event, text, field, truncatedField string) Event {
	if len(text) > outputbody.Threshold {
		e.Body, e.BodyField, e.BodyTruncatedField = text, field, truncatedField
	}
	return e
}

// Settle ends a turn: open items complete, then exactly one terminal turn
// event, at most one run.result.proposed (the accepted semantic result, or
// the synthesised one under a completion contract) and one run.terminal
// (tools.md §4).
func (mp Mapper) Settle(st *MapState, s Settlement) []Event {
	var evs []Event
	summaryText := ""
	// An item a failed turn leaves open also gets item.failed after its
	// closing event, its message from the failure class alone.
	failure := ""
	if s.Ending == EndFailed {
		class := s.Class
		if class == "" {
			class = ClassUnclassified
		}
		failure = NewFailure(class, nil).Message
	}
	for _, key := range st.Order {
		it := st.Items[key]
		if it == nil || it.Done {
			continue
		}
		it.Done = true
		if it.Kind == "tool_call" {
			status := "interrupted"
			if s.Ending == EndCancelled {
				status = "cancelled"
			} else if s.Ending == EndFailed {
				status = "failed"
			}
			evs = append(evs,
				Event{EventType: prp.EventToolExecutionCompleted, Priority: P1, TurnID: s.TurnID, ItemID: it.ItemID,
					Payload: mp.toolPayload(it, status, "", false)},
				Event{EventType: prp.EventItemCompleted, Priority: P1, TurnID: s.TurnID, ItemID: it.ItemID,
					Payload: map[string]any{"kind": "tool_call", "title": it.Name, "status": status}})
		} else {
			// What the item held back leaves now, whole.
			evs = append(evs, mp.delta(it, s.TurnID, it.Held)...)
			it.Held = ""
			inline := truncateUTF8(it.Text, maxItemText)
			p := map[string]any{"kind": it.Kind, "text": inline}
			if it.Truncated || len(inline) < len(it.Text) {
				p["textTruncated"] = true
			}
			evs = append(evs, withBody(Event{EventType: prp.EventItemCompleted, Priority: P1, TurnID: s.TurnID, ItemID: it.ItemID, Payload: p},
				it.Text, "text", "textTruncated"))
		}
		if failure != "" {
			evs = append(evs, mp.itemFailed(s.TurnID, it.ItemID, it.Kind, failure))
		}
	}
	if it := st.Items[st.LastMessage]; it != nil {
		summaryText = it.Text
	}
	if s.Usage != nil {
		st.Tokens.InputTokens += s.Usage.InputTokens
		st.Tokens.OutputTokens += s.Usage.OutputTokens
		st.Tokens.CachedReadTokens += s.Usage.CachedReadTokens
		st.Tokens.CachedWriteTokens += s.Usage.CachedWriteTokens
		st.Tokens.TotalTokens += s.Usage.TotalTokens
		evs = append(evs, mp.usageEvent(st, s.TurnID, s.Usage))
	}

	var turnEv Event
	var disposition, turnState, runState string
	switch s.Ending {
	case EndCompleted:
		turnEv = Event{EventType: prp.EventTurnCompleted, Priority: P0, Payload: map[string]any{"stopReason": s.StopReason}}
		turnState, runState, disposition = "completed", "succeeded", "done"
		if s.StopReason != StopEndTurn {
			// max_tokens, max_turn_requests, refusal: the agent stopped
			// short (acp.md §10 question 2); a person should look.
			disposition = "needs_review"
		}
	case EndFailed:
		class := s.Class
		if class == "" {
			class = ClassUnclassified
		}
		turnEv = Event{EventType: prp.EventTurnFailed, Priority: P0, Payload: map[string]any{
			"code": string(class), "message": NewFailure(class, nil).Message}}
		turnState, runState, disposition = "failed", "failed", "needs_review"
		summaryText = "The turn failed: " + NewFailure(class, nil).Message + "."
	case EndInterrupted:
		reason := s.Reason
		if reason == "" {
			reason = "operator"
		}
		turnEv = Event{EventType: prp.EventTurnInterrupted, Priority: P0, Payload: map[string]any{"reason": reason}}
		turnState, runState, disposition = "interrupted", "cancelled", "yielded"
		summaryText = "The turn was interrupted."
	default:
		turnEv = Event{EventType: prp.EventTurnCancelled, Priority: P0, Payload: map[string]any{"reason": "run_cancelled"}}
		turnState, runState, disposition = "cancelled", "cancelled", "yielded"
		summaryText = "The run was cancelled."
	}
	if s.StopReason != "" && s.Ending != EndCompleted {
		turnEv.Payload["stopReason"] = s.StopReason
	}
	turnEv.TurnID = s.TurnID
	accepted := st.SemanticResult
	st.Items, st.Order, st.LastMessage, st.SemanticResult = nil, nil, "", nil
	var result map[string]any
	switch {
	case accepted != nil:
		// The agent reported through paperclip_finish/paperclip_block and
		// the server accepted it: that is the run's one result, and its
		// disposition is the terminal's (tools.md §4).
		result, disposition = acceptedResult(accepted)
	case mp.ContractRevision != "":
		// A completion contract keeps the synthesised result, one
		// criterion per id (tools.md §4, as the reference's Codex driver).
		result = mp.synthesisedResult(s, disposition, summaryText)
	default:
		// No synthetic result: a "done" nobody reported would put words in
		// the agent's mouth (tools.md §4, replacing acp.md §5's one result
		// per completed turn).
		disposition = "needs_review"
		if s.Ending == EndCompleted && s.StopReason == StopEndTurn {
			disposition = "done"
		}
	}
	evs = append(evs, turnEv)
	if result != nil {
		evs = append(evs, Event{EventType: prp.EventRunResultProposed, Priority: P0, TurnID: s.TurnID, Payload: result})
	}
	return append(evs, Event{EventType: prp.EventRunTerminal, Priority: P0, TurnID: s.TurnID, Payload: map[string]any{
		"schema":                  "paperclip.prp.terminal.v1",
		"turnTerminalState":       turnState,
		"runTerminalState":        runState,
		"reportedWorkDisposition": disposition,
		"provider":                mp.AdapterName(),
	}})
}

// dispositions is the schema enum of reportedWorkDisposition
// (result.schema.json, terminal.schema.json).
var dispositions = map[string]bool{"done": true, "blocked": true, "needs_review": true, "yielded": true}

// acceptedResult decodes an accepted semantic result (the normalised
// paperclip_finish/paperclip_block input) for the run.result.proposed
// payload, numbers kept as written. A disposition outside the enum (never
// produced by the normaliser) reads needs_review.
func acceptedResult(raw json.RawMessage) (map[string]any, string) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil || m == nil {
		return nil, "needs_review"
	}
	d, _ := m["reportedWorkDisposition"].(string)
	if !dispositions[d] {
		d = "needs_review"
	}
	return m, d
}

// synthesisedResult is the run result runnerd writes for a turn that ends
// without an accepted one under a completion contract.
func (mp Mapper) synthesisedResult(s Settlement, disposition, summaryText string) map[string]any {
	summaryText = truncateUTF8(strings.TrimSpace(summaryText), maxSummary)
	if summaryText == "" {
		summaryText = "The agent ended the turn (" + s.StopReason + ")."
	}
	remaining := []any{}
	if disposition != "done" {
		remaining = append(remaining, map[string]any{"description": "Review or continue the turn", "blocksCompletion": true})
	}
	criteria := make([]any, 0, len(mp.CriterionIDs))
	for _, id := range mp.CriterionIDs {
		status := "unknown"
		if disposition == "done" {
			status = "satisfied"
		}
		criteria = append(criteria, map[string]any{"criterionId": id, "status": status, "evidenceRefs": []any{}})
	}
	result := map[string]any{
		"schema":                  "paperclip.run_result.v1",
		"reportedWorkDisposition": disposition,
		"summary":                 summaryText,
		"completionClaim": map[string]any{
			"contractRevision":   mp.ContractRevision,
			"objectiveSatisfied": disposition == "done",
			"criteria":           criteria,
			"remainingWork":      remaining,
		},
		"evidence":          []any{},
		"verification":      []any{},
		"attentionRequests": []any{},
		"artifacts":         []any{},
	}
	if disposition == "yielded" {
		result["continuation"] = map[string]any{
			"kind": "same_agent", "summary": "Continue in the same session",
			"idempotencyKey": "continue-" + safeID(s.TurnID),
		}
	}
	return result
}

// SettlementOf turns a prompt outcome into a settlement. byRunCancel
// distinguishes run.cancel (turn.cancelled) from turn.interrupt/turn.stop.
func SettlementOf(out TurnOutcome, byRunCancel bool) Settlement {
	s := Settlement{TurnID: out.TurnID, StopReason: out.StopReason, Usage: out.Usage}
	switch {
	case out.Cancelled && byRunCancel:
		s.Ending = EndCancelled
	case out.Cancelled:
		s.Ending = EndInterrupted
	case out.Err != nil:
		s.Ending, s.Class = EndFailed, ClassOf(out.Err)
	default:
		s.Ending = EndCompleted
	}
	return s
}

// AgentExited maps pcwrap's exit frame: harness.exited, then for an active
// turn the provider_exit loss and its failed turn, then session.failed.
func (mp Mapper) AgentExited(st *MapState, activeTurn string, exitCode *int, signal string) []Event {
	p := map[string]any{"exitCode": nil}
	if exitCode != nil {
		p["exitCode"] = *exitCode
	}
	if signal != "" {
		p["signal"] = signal
	}
	evs := []Event{{EventType: prp.EventHarnessExited, Priority: P0, Payload: p}}
	if activeTurn != "" {
		evs = append(evs, mp.ChannelLost(st, activeTurn, LossProviderExit)...)
	}
	return append(evs, Event{EventType: prp.EventSessionFailed, Priority: P0, Payload: map[string]any{
		"code": string(ClassAgentDisconnected), "message": NewFailure(ClassAgentDisconnected, nil).Message}})
}

// ChannelLost maps a latched loss (acp.md §5.1): harness.diagnostic with
// the reason, then the failed turn (turn.failed, one run.result.proposed,
// one run.terminal). The public text derives from the reason alone.
func (mp Mapper) ChannelLost(st *MapState, turnID string, reason LossReason) []Event {
	evs := []Event{{EventType: prp.EventHarnessDiagnostic, Priority: P0, TurnID: turnID, Payload: map[string]any{
		"lossReason": string(reason), "message": reason.message(),
	}}}
	class := ClassAgentDisconnected
	if reason == LossRPCFailure {
		class = ClassUnclassified
	}
	return append(evs, mp.Settle(st, Settlement{TurnID: turnID, Ending: EndFailed, Class: class})...)
}

// streamDiagnostic reports skipped stdout lines (harness.diagnostic, P1
// while the session still works).
func (mp Mapper) streamDiagnostic(w WireState) Event {
	return Event{EventType: prp.EventHarnessDiagnostic, Priority: P1, Payload: map[string]any{
		"reasonCode":      "acp_stdout_lines_skipped",
		"skippedLines":    w.SkippedLines,
		"lateUpdates":     w.LateUpdates,
		"replayedUpdates": w.ReplayedUpdates,
		"staleResponses":  w.StaleResponses,
	}}
}

func (mp Mapper) provider() string {
	if mp.Provider == "" {
		return "acpx"
	}
	return truncateUTF8(mp.Provider, 80)
}

// text redacts then bounds a peer string.
func (mp Mapper) text(s string, max int) string {
	return truncateUTF8(mp.Redactor.String(s), max)
}

// safeID maps s onto the schema id pattern ^[A-Za-z0-9][A-Za-z0-9._:-]*$,
// bounded to maxSafeID; an empty or unsafe lead gets an "x" prefix.
func safeID(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
		if !ok || c == '_' {
			b[i] = '-'
		}
	}
	out := string(b)
	if out == "" || !(out[0] >= 'a' && out[0] <= 'z' || out[0] >= 'A' && out[0] <= 'Z' || out[0] >= '0' && out[0] <= '9') {
		out = "x" + out
	}
	if len(out) > maxSafeID {
		sum := sha256.Sum256([]byte(s))
		out = out[:maxSafeID-17] + "-" + hex.EncodeToString(sum[:8])
	}
	return out
}

// truncateUTF8 cuts s to at most n bytes on a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func nonNeg(v int64) int64 {
	if v < 0 {
		return 0
	}
	return v
}

// UsageReported is usage.reported for a protocol that reports cumulative
// token usage itself (Codex's thread/tokenUsage/updated: codex.md §5):
// cumulative replaces the session total, last is the run delta.
func (mp Mapper) UsageReported(st *MapState, turnID string, cumulative, last TokenUsage) Event {
	st.Tokens = cumulative
	ev := mp.usageEvent(st, turnID, &last)
	ev.Priority = P0
	return ev
}
