package provider

import "encoding/json"

// Implementation names a peer ({name, title?, version}).
type Implementation struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version"`
}

// ClientCapabilities is what runnerd advertises; a method it does not
// advertise gets -32601 (acp.md §1.3: absent capability = unsupported).
type ClientCapabilities struct {
	FS       FSCapabilities `json:"fs"`
	Terminal bool           `json:"terminal"`
}

// FSCapabilities is the fs block of ClientCapabilities.
type FSCapabilities struct {
	ReadTextFile  bool `json:"readTextFile"`
	WriteTextFile bool `json:"writeTextFile"`
}

// AgentCapabilities is the gate subset runnerd consults.
type AgentCapabilities struct {
	LoadSession bool `json:"loadSession"`
	// MCPCapabilities says which MCP transports the agent takes in
	// mcpServers; only an agent with HTTP gets the tool bridge (tools.md §2).
	MCPCapabilities struct {
		HTTP bool `json:"http"`
		SSE  bool `json:"sse"`
	} `json:"mcpCapabilities"`
	SessionCapabilities struct {
		Resume *json.RawMessage `json:"resume,omitempty"`
		Close  *json.RawMessage `json:"close,omitempty"`
	} `json:"sessionCapabilities"`
}

// ContentBlock is an ACP content block (text and resource_link are the only
// kinds runnerd sends or reads).
type ContentBlock struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	URI  string `json:"uri,omitempty"`
	Name string `json:"name,omitempty"`
}

// TokenUsage is the unstable prompt usage block.
type TokenUsage struct {
	TotalTokens       int64 `json:"totalTokens"`
	InputTokens       int64 `json:"inputTokens"`
	OutputTokens      int64 `json:"outputTokens"`
	ThoughtTokens     int64 `json:"thoughtTokens,omitempty"`
	CachedReadTokens  int64 `json:"cachedReadTokens,omitempty"`
	CachedWriteTokens int64 `json:"cachedWriteTokens,omitempty"`
}

// Stop reasons (acp.md §1.4).
const (
	StopEndTurn         = "end_turn"
	StopMaxTokens       = "max_tokens"
	stopMaxTurnRequests = "max_turn_requests"
	StopRefusal         = "refusal"
	StopCancelled       = "cancelled"
)

// Session update discriminators (acp.md §1.4).
const (
	updateUserMessageChunk  = "user_message_chunk"
	UpdateAgentMessageChunk = "agent_message_chunk"
	UpdateAgentThoughtChunk = "agent_thought_chunk"
	UpdateToolCall          = "tool_call"
	UpdateToolCallUpdate    = "tool_call_update"
	UpdatePlan              = "plan"
	UpdateAvailableCommands = "available_commands_update"
	UpdateCurrentMode       = "current_mode_update"
	UpdateConfigOption      = "config_option_update"
	UpdateSessionInfo       = "session_info_update"
	updateUsage             = "usage_update"
	// UpdateTurnDiff is runnerd's own variant, not ACP's: a Codex turn's
	// aggregated git diff (turn/diff/updated) for the workspace change set.
	UpdateTurnDiff = "runnerd_turn_diff"
)

// SessionUpdate is the decoded union of the variants runnerd maps; unknown
// variants keep only Kind and are ignored (acp.md §1.4).
type SessionUpdate struct {
	Kind string `json:"sessionUpdate"`

	// message chunks
	Content   *ContentBlock `json:"-"`
	MessageID string        `json:"messageId,omitempty"`

	// tool_call / tool_call_update
	ToolCallID string            `json:"toolCallId,omitempty"`
	Title      *string           `json:"title,omitempty"`
	ToolKind   string            `json:"kind,omitempty"`
	Status     string            `json:"status,omitempty"`
	Locations  []ToolLocation    `json:"locations,omitempty"`
	ToolOutput []ToolCallContent `json:"-"`

	// plan
	Entries []PlanEntry `json:"entries,omitempty"`

	// usage_update
	Used *int64 `json:"used,omitempty"`
	Size *int64 `json:"size,omitempty"`
	Cost *Cost  `json:"cost,omitempty"`

	// session-level updates
	CurrentModeID     string            `json:"currentModeId,omitempty"`
	AvailableCommands []json.RawMessage `json:"availableCommands,omitempty"`
	ConfigOptions     []json.RawMessage `json:"configOptions,omitempty"`
	SessionTitle      *string           `json:"-"`
	// TurnDiff is UpdateTurnDiff's diff text.
	TurnDiff string `json:"-"`

	// Meta is the update's _meta (session_info_update carries the goal
	// snapshot there).
	Meta json.RawMessage `json:"_meta,omitempty"`
}

// ToolLocation is a file a tool call touches.
type ToolLocation struct {
	Path string `json:"path"`
	Line *int   `json:"line,omitempty"`
}

// ToolCallContent is one tool_call content entry.
type ToolCallContent struct {
	Type       string        `json:"type"`
	Content    *ContentBlock `json:"content,omitempty"`
	Path       string        `json:"path,omitempty"`
	OldText    *string       `json:"oldText,omitempty"` // a diff's; null for a created file
	NewText    string        `json:"newText,omitempty"`
	TerminalID string        `json:"terminalId,omitempty"`
}

// PlanEntry is one plan entry.
type PlanEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority"`
	Status   string `json:"status"`
}

// Cost is a cumulative session cost.
type Cost struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

// PermissionRequest is session/request_permission.
type PermissionRequest struct {
	SessionID string             `json:"sessionId"`
	ToolCall  PermissionToolCall `json:"toolCall"`
	Options   []PermissionOption `json:"options"`
	// Meta may carry claudeCode.toolName (tools.md §6).
	Meta json.RawMessage `json:"_meta,omitempty"`
}

// PermissionToolCall is the part of the tool call runnerd reads.
type PermissionToolCall struct {
	ToolCallID string          `json:"toolCallId"`
	Title      string          `json:"title,omitempty"`
	Kind       string          `json:"kind,omitempty"`
	Meta       json.RawMessage `json:"_meta,omitempty"`
}

// PermissionOption is one choice offered to the user.
type PermissionOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

// Permission option kinds.
const (
	OptionAllowOnce    = "allow_once"
	OptionAllowAlways  = "allow_always"
	OptionRejectOnce   = "reject_once"
	OptionRejectAlways = "reject_always"
)

// PermissionOutcome is the answer's outcome member.
type PermissionOutcome struct {
	Outcome  string `json:"outcome"`
	OptionID string `json:"optionId,omitempty"`
}

// ACP method names runnerd uses (acp.md §1.2).
const (
	MethodInitialize        = "initialize"
	MethodAuthenticate      = "authenticate"
	MethodSessionNew        = "session/new"
	MethodSessionLoad       = "session/load"
	MethodSessionResume     = "session/resume"
	MethodSessionClose      = "session/close"
	MethodSessionPrompt     = "session/prompt"
	MethodSessionCancel     = "session/cancel"
	MethodSessionUpdate     = "session/update"
	MethodRequestPermission = "session/request_permission"
	MethodCancelRequest     = "$/cancel_request"
)

// sessionUpdateWire decodes a SessionUpdate in one pass: its own content
// and title members shadow the embedded ones, whose meaning depends on
// the kind.
type sessionUpdateWire struct {
	SessionUpdate
	Content json.RawMessage `json:"content"`
	Title   *string         `json:"title"`
}

// DecodeSessionUpdate decodes the update member of session/update. The
// content member means a ContentBlock for chunks and a ToolCallContent list
// for tool calls, so it is decoded by kind.
func DecodeSessionUpdate(raw json.RawMessage) (SessionUpdate, error) {
	var w sessionUpdateWire
	if err := json.Unmarshal(raw, &w); err != nil {
		return SessionUpdate{}, err
	}
	u := w.SessionUpdate
	switch u.Kind {
	case updateUserMessageChunk, UpdateAgentMessageChunk, UpdateAgentThoughtChunk:
		var c ContentBlock
		if len(w.Content) > 0 {
			if err := json.Unmarshal(w.Content, &c); err != nil {
				return SessionUpdate{}, err
			}
		}
		u.Content = &c
	case UpdateToolCall, UpdateToolCallUpdate:
		u.Title = w.Title
		if len(w.Content) > 0 && string(w.Content) != "null" {
			if err := json.Unmarshal(w.Content, &u.ToolOutput); err != nil {
				return SessionUpdate{}, err
			}
		}
	case UpdateSessionInfo:
		u.SessionTitle = w.Title
	}
	return u, nil
}
