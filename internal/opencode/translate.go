package opencode

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// State is the translation's durable state: the caller keeps it in the
// agent record, so a runnerd restart resumes with what was already
// emitted and Recover adds only what was missed.
type State struct {
	SessionID string `json:"sessionId"`
	// TurnID is the active turn ("" between turns).
	TurnID string `json:"turnId,omitempty"`
	// LastUser is the newest user message id of a settled turn; OpenCode
	// ids ascend (time-ordered), so the active turn's user message is the
	// first newer one (late updates of older messages are ignored).
	LastUser string `json:"lastUser,omitempty"`
	// TurnUser is the active turn's user message id, once seen.
	TurnUser string `json:"turnUser,omitempty"`
	// Assistant lists the active turn's assistant message ids.
	Assistant []string `json:"assistant,omitempty"`
	// Busy is set once the server reported the turn's session busy (or
	// an assistant message of it), so an idle before that is not its end.
	Busy bool `json:"busy,omitempty"`
	// Idle is set when the server went idle after the turn began: the
	// caller then reconciles with the message list (Recover) and the turn
	// settles, so text a dropped stream missed is never lost.
	Idle bool `json:"idle,omitempty"`
	// Aborting is set by cancel: the turn's end is a cancel.
	Aborting bool `json:"aborting,omitempty"`
	// Finish and ErrorName are the latest assistant message's.
	Finish    string `json:"finish,omitempty"`
	ErrorName string `json:"errorName,omitempty"`
	// Usage sums the turn's step-finish tokens.
	Usage provider.TokenUsage `json:"usage"`
	// Parts records what was emitted per message-part id of the active
	// turn; Order lists them oldest first for the maxTrackedParts bound.
	Parts map[string]*PartState `json:"parts,omitempty"`
	Order []string              `json:"order,omitempty"`
	// Asked lists the active turn's permission request ids already
	// forwarded.
	Asked []string `json:"asked,omitempty"`
}

// PartState is what was emitted of one part.
type PartState struct {
	Kind string `json:"kind"`
	// Emitted counts the text bytes already emitted.
	Emitted int `json:"emitted,omitempty"`
	// Resync drops deltas: after a recovery, the stream's next deltas may
	// repeat text the message list already gave, so the part catches up
	// from its next full-text update instead.
	Resync bool `json:"resync,omitempty"`
	// ToolStatus is the last tool status emitted.
	ToolStatus string `json:"toolStatus,omitempty"`
	Done       bool   `json:"done,omitempty"`
}

// Permission request method name the Manager's request flow knows.
const methodRequestPermission = "session/request_permission"

// startTurn marks turnID active; call it before prompt_async is sent.
func (st *State) startTurn(turnID string) {
	st.TurnID, st.TurnUser, st.Assistant = turnID, "", nil
	st.Busy, st.Idle, st.Aborting, st.Finish, st.ErrorName = false, false, false, "", ""
	st.Usage = provider.TokenUsage{}
}

// markAborting records that the active turn is being cancelled.
func (st *State) markAborting() {
	if st.TurnID != "" {
		st.Aborting = true
	}
}

func (st *State) isAssistant(id string) bool {
	for _, a := range st.Assistant {
		if a == id {
			return true
		}
	}
	return false
}

func (st *State) asked(id string) bool {
	for _, a := range st.Asked {
		if a == id {
			return true
		}
	}
	return false
}

// part returns the record of part id, creating it.
func (st *State) part(id, kind string) *PartState {
	if st.Parts == nil {
		st.Parts = map[string]*PartState{}
	}
	if ps, ok := st.Parts[id]; ok {
		return ps
	}
	ps := &PartState{Kind: kind}
	st.Parts[id] = ps
	st.Order = append(st.Order, id)
	if len(st.Order) > maxTrackedParts {
		st.evict()
	}
	return ps
}

// evict forgets the oldest finished parts down to the bound.
func (st *State) evict() {
	keep := st.Order[:0]
	drop := len(st.Order) - maxTrackedParts
	for _, id := range st.Order {
		if drop > 0 && st.Parts[id].Done {
			delete(st.Parts, id)
			drop--
			continue
		}
		keep = append(keep, id)
	}
	st.Order = keep
}

// translate maps one stream event to Inbound values for the Manager: a
// text or reasoning part as message chunks (one item per part), a tool
// part as tool_call / tool_call_update, todo.updated as a plan, a
// permission as a session/request_permission request, and the turn's
// idle as its settlement. Events of other sessions, outside a turn, or of
// types runnerd does not map yield nothing.
func translate(st *State, ev event) []provider.Inbound {
	if st.TurnID == "" || len(ev.Properties) == 0 {
		return nil
	}
	var p sessionProps
	if err := json.Unmarshal(ev.Properties, &p); err != nil || p.SessionID != st.SessionID {
		return nil
	}
	switch ev.Type {
	case eventMessageUpdated:
		if p.Info != nil {
			st.message(*p.Info)
		}
	case eventPartUpdated:
		if p.Part != nil && st.isAssistant(p.Part.MessageID) {
			return st.fullPart(*p.Part, false)
		}
	case eventPartDelta:
		return st.delta(p)
	case eventSessionStatus:
		if p.Status == nil {
			return nil
		}
		if p.Status.Type != "idle" {
			st.Busy = true
			return nil
		}
		st.Idle = st.Busy
	case eventSessionIdle:
		st.Idle = st.Busy
	case eventSessionError:
		if p.Error != nil {
			st.ErrorName = p.Error.Name
		}
	case eventTodoUpdated:
		return []provider.Inbound{st.update(plan(p.Todos))}
	case eventPermissionAsked:
		var pa PermissionAsked
		if err := json.Unmarshal(ev.Properties, &pa); err != nil {
			return nil
		}
		return st.ask(pa)
	}
	return nil
}

// ask forwards a permission request once.
func (st *State) ask(pa PermissionAsked) []provider.Inbound {
	if pa.ID == "" || pa.SessionID != st.SessionID || st.asked(pa.ID) {
		return nil
	}
	st.Asked = append(st.Asked, pa.ID)
	if len(st.Asked) > maxTrackedParts {
		st.Asked = st.Asked[1:]
	}
	return []provider.Inbound{st.permission(pa)}
}

// message tracks the turn's user and assistant messages.
func (st *State) message(m MessageInfo) {
	switch m.Role {
	case "user":
		if st.TurnUser == "" && m.ID > st.LastUser {
			st.TurnUser = m.ID
		}
	case "assistant":
		if st.TurnUser == "" || m.ParentID != st.TurnUser {
			return
		}
		if !st.isAssistant(m.ID) {
			st.Assistant = append(st.Assistant, m.ID)
		}
		st.Busy = true
		if m.Finish != "" {
			st.Finish = m.Finish
		}
		if m.Error != nil {
			st.ErrorName = m.Error.Name
		}
	}
}

// fullPart maps a part's complete current state; recovered marks a part
// read from the message list (an unfinished text part then resyncs).
func (st *State) fullPart(pt Part, recovered bool) []provider.Inbound {
	switch pt.Type {
	case partText, partReasoning:
		if pt.Synthetic {
			return nil
		}
		_, seen := st.Parts[pt.ID]
		ps := st.part(pt.ID, pt.Type)
		ps.Kind = pt.Type // a part first seen by a delta had no kind
		var out []provider.Inbound
		if !seen && pt.Text == "" {
			out = append(out, st.chunk(pt.Type, pt.ID, "")) // opens the item
		}
		if len(pt.Text) > ps.Emitted {
			out = append(out, st.chunk(pt.Type, pt.ID, pt.Text[ps.Emitted:]))
			ps.Emitted = len(pt.Text)
		}
		if pt.Time != nil && pt.Time.End != 0 {
			ps.Done, ps.Resync = true, false
		} else if recovered {
			ps.Resync = true
		}
		return out
	case partTool:
		return st.tool(pt)
	case partStepFinish:
		ps := st.part(pt.ID, pt.Type)
		if ps.Done || pt.Tokens == nil {
			return nil
		}
		ps.Done = true
		t := pt.Tokens
		st.Usage.InputTokens += t.Input
		st.Usage.OutputTokens += t.Output
		st.Usage.ThoughtTokens += t.Reasoning
		st.Usage.CachedReadTokens += t.Cache.Read
		st.Usage.CachedWriteTokens += t.Cache.Write
		total := t.Total
		if total == 0 {
			total = t.Input + t.Output + t.Reasoning + t.Cache.Read + t.Cache.Write
		}
		st.Usage.TotalTokens += total
	}
	return nil
}

func (st *State) delta(p sessionProps) []provider.Inbound {
	if p.Field != "text" || p.Delta == "" || !st.isAssistant(p.MessageID) {
		return nil
	}
	ps, ok := st.Parts[p.PartID]
	if !ok {
		// A delta of a part never seen whole: its kind is unknown, so it
		// waits for the part's full-text update.
		st.part(p.PartID, "").Resync = true
		return nil
	}
	if ps.Resync || ps.Done || ps.Kind == "" {
		return nil
	}
	ps.Emitted += len(p.Delta)
	return []provider.Inbound{st.chunk(ps.Kind, p.PartID, p.Delta)}
}

func (st *State) chunk(kind, partID, text string) provider.Inbound {
	k := provider.UpdateAgentMessageChunk
	if kind == partReasoning {
		k = provider.UpdateAgentThoughtChunk
	}
	return st.update(provider.SessionUpdate{Kind: k, MessageID: partID,
		Content: &provider.ContentBlock{Type: "text", Text: text}})
}

func (st *State) update(u provider.SessionUpdate) provider.Inbound {
	return provider.Inbound{Kind: provider.KindUpdate, Update: &u, TurnID: st.TurnID}
}

func (st *State) tool(pt Part) []provider.Inbound {
	if pt.State == nil {
		return nil
	}
	status := toolStatus(pt.State.Status)
	ps, seen := st.Parts[pt.ID]
	if seen && (ps.Done || ps.ToolStatus == status) {
		return nil
	}
	ps = st.part(pt.ID, partTool)
	title := pt.State.Title
	if title == "" {
		title = pt.Tool
	}
	u := provider.SessionUpdate{Kind: provider.UpdateToolCallUpdate, ToolCallID: pt.ID, Status: status}
	if !seen {
		u.Kind, u.ToolKind = provider.UpdateToolCall, toolKind(pt.Tool)
		u.Locations = locations(pt.State.Input)
	}
	if title != "" {
		u.Title = &title
	}
	switch status {
	case "completed":
		u.ToolOutput = textContent(pt.State.Output)
	case "failed":
		u.ToolOutput = textContent(pt.State.Error)
	}
	ps.ToolStatus = status
	ps.Done = status == "completed" || status == "failed"
	return []provider.Inbound{st.update(u)}
}

func textContent(s string) []provider.ToolCallContent {
	if s == "" {
		return nil
	}
	return []provider.ToolCallContent{{Type: "content", Content: &provider.ContentBlock{Type: "text", Text: s}}}
}

// toolStatus maps OpenCode's tool states to ACP's.
func toolStatus(s string) string {
	switch s {
	case toolPending:
		return "pending"
	case toolCompleted:
		return "completed"
	case toolError:
		return "failed"
	}
	return "in_progress"
}

// toolKind maps OpenCode's built-in tool names to ACP tool kinds (what
// acpx turns into a tool operation); anything else is "other".
func toolKind(tool string) string {
	switch tool {
	case "bash":
		return "execute"
	case "read":
		return "read"
	case "edit", "write", "patch", "multiedit", "apply_patch":
		return "edit"
	case "grep", "glob", "list", "codesearch":
		return "search"
	case "webfetch", "websearch":
		return "fetch"
	case "todowrite", "todoread", "task":
		return "think"
	}
	return "other"
}

// locations reads the file a tool names (filePath or path).
func locations(input json.RawMessage) []provider.ToolLocation {
	var in struct {
		FilePath string `json:"filePath"`
		Path     string `json:"path"`
	}
	if json.Unmarshal(input, &in) != nil {
		return nil
	}
	p := in.FilePath
	if p == "" {
		p = in.Path
	}
	if p == "" {
		return nil
	}
	return []provider.ToolLocation{{Path: p}}
}

// plan maps todos to an ACP plan.
func plan(todos []todo) provider.SessionUpdate {
	u := provider.SessionUpdate{Kind: provider.UpdatePlan, Entries: []provider.PlanEntry{}}
	for _, t := range todos {
		status := "pending"
		switch t.Status {
		case "in_progress", "completed":
			status = t.Status
		case "cancelled":
			status = "completed"
		}
		prio := "medium"
		switch t.Priority {
		case "high", "low":
			prio = t.Priority
		}
		u.Entries = append(u.Entries, provider.PlanEntry{Content: t.Content, Priority: prio, Status: status})
	}
	return u
}

// permission maps permission.asked to the ACP request the Manager's
// runtime-request flow handles; the request id is OpenCode's (a JSON
// string), answered through replyFor.
func (st *State) permission(pa PermissionAsked) provider.Inbound {
	id, _ := json.Marshal(pa.ID)
	title := pa.Permission
	if len(pa.Patterns) > 0 {
		title += ": " + strings.Join(pa.Patterns, " ")
	}
	req := &provider.PermissionRequest{SessionID: st.SessionID,
		ToolCall: provider.PermissionToolCall{Title: title, Kind: toolKind(pa.Permission)},
		Options: []provider.PermissionOption{
			{OptionID: replyOnce, Name: "Allow once", Kind: provider.OptionAllowOnce},
			{OptionID: replyAlways, Name: "Allow always", Kind: provider.OptionAllowAlways},
			{OptionID: replyReject, Name: "Reject", Kind: provider.OptionRejectOnce},
		}}
	if pa.Tool != nil {
		req.ToolCall.ToolCallID = pa.Tool.CallID
	}
	params, _ := json.Marshal(req)
	return provider.Inbound{Kind: provider.KindRequest, ID: id, Method: methodRequestPermission,
		Params: params, Permission: req, TurnID: st.TurnID}
}

// replyFor maps the option id a permission answer chose to OpenCode's
// reply; an unknown option (or a cancelled request) rejects.
func replyFor(optionID string) string {
	switch optionID {
	case replyOnce, replyAlways:
		return optionID
	}
	return replyReject
}

// settle ends the active turn (use it when the message list cannot be
// read; Recover settles an idle turn itself).
func settle(st *State) []provider.Inbound {
	if st.TurnID == "" {
		return nil
	}
	return st.settle()
}

func (st *State) settle() []provider.Inbound {
	out := provider.TurnOutcome{TurnID: st.TurnID, StopReason: stopReason(st.Finish)}
	if st.Usage != (provider.TokenUsage{}) {
		u := st.Usage
		out.Usage = &u
	}
	switch {
	case st.Aborting || st.ErrorName == errorAborted:
		out.StopReason, out.Cancelled = provider.StopCancelled, true
	case st.ErrorName == "ProviderAuthError":
		out.Err = provider.NewFailure(provider.ClassAuthenticationRequired, errors.New("opencode turn failed: "+st.ErrorName))
	case st.ErrorName != "":
		out.Err = provider.NewFailure(provider.ClassTurnFailed, errors.New("opencode turn failed: "+safeName(st.ErrorName)))
	}
	if st.TurnUser != "" {
		st.LastUser = st.TurnUser
	}
	st.TurnID, st.TurnUser, st.Assistant, st.Busy, st.Idle, st.Aborting = "", "", nil, false, false, false
	// Only the active turn's parts and requests are ever consulted (every
	// event is matched to its assistant messages first), so a settled
	// turn's record goes: the state stays one turn large.
	st.Parts, st.Order, st.Asked = nil, nil, nil
	return []provider.Inbound{{Kind: provider.KindTurnSettled, TurnID: out.TurnID, Outcome: &out, Err: out.Err}}
}

// safeName keeps an error name to identifier characters (it is server
// text, so it is cut and filtered before it reaches an error).
func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 64 {
			break
		}
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// stopReason maps an assistant message's finish to an ACP stop reason.
func stopReason(finish string) string {
	switch finish {
	case "length":
		return provider.StopMaxTokens
	case "content-filter":
		return provider.StopRefusal
	}
	return provider.StopEndTurn
}

// Recover rebuilds what the stream missed from the message list and the
// session status (after a reconnect, a runnerd restart, and at every
// idle): text beyond what each part already emitted, tool states not yet
// emitted, pending permission requests not yet forwarded, and the turn's end when the stream reported it idle, or the
// status says idle and its last message is complete. Parts already
// emitted in full yield nothing.
func Recover(st *State, msgs []Message, status map[string]string, pending []PermissionAsked) []provider.Inbound {
	if st.TurnID == "" {
		return nil
	}
	if st.TurnUser == "" {
		for _, m := range msgs {
			if m.Info.Role == "user" && m.Info.ID > st.LastUser {
				st.TurnUser = m.Info.ID
				break
			}
		}
	}
	var out []provider.Inbound
	var last *MessageInfo
	sorted := append([]Message(nil), msgs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Info.ID < sorted[j].Info.ID })
	for i := range sorted {
		m := &sorted[i]
		if m.Info.Role != "assistant" || st.TurnUser == "" || m.Info.ParentID != st.TurnUser {
			continue
		}
		st.message(m.Info)
		last = &m.Info
		for _, pt := range m.Parts {
			out = append(out, st.fullPart(pt, true)...)
		}
	}
	for _, pa := range pending {
		out = append(out, st.ask(pa)...)
	}
	s, listed := status[st.SessionID]
	idle := st.Idle || !listed || s == "idle"
	complete := last != nil && (last.Time.Completed != 0 || last.Error != nil)
	if st.Idle || idle && complete {
		out = append(out, st.settle()...)
	}
	return out
}
