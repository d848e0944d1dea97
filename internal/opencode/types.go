package opencode

import "encoding/json"

// event is one SSE event: {id, type, properties}.
type event struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Properties json.RawMessage `json:"properties"`
}

// Event types runnerd reads; every other type is dropped.
const (
	eventServerConnected   = "server.connected"
	eventMessageUpdated    = "message.updated"
	eventPartUpdated       = "message.part.updated"
	eventPartDelta         = "message.part.delta"
	eventSessionStatus     = "session.status"
	eventSessionIdle       = "session.idle"
	eventSessionError      = "session.error"
	eventSessionCompacted  = "session.compacted"
	eventPermissionAsked   = "permission.asked"
	eventPermissionReplied = "permission.replied"
	eventTodoUpdated       = "todo.updated"
)

// session is the part of a session runnerd reads.
type session struct {
	ID        string `json:"id"`
	Directory string `json:"directory,omitempty"`
	Version   string `json:"version,omitempty"`
}

// MessageInfo is the part of a user or assistant message runnerd reads.
type MessageInfo struct {
	ID        string       `json:"id"`
	SessionID string       `json:"sessionID"`
	Role      string       `json:"role"`
	ParentID  string       `json:"parentID,omitempty"`
	Finish    string       `json:"finish,omitempty"`
	Error     *ErrorInfo   `json:"error,omitempty"`
	Time      MessageTimes `json:"time"`
}

// MessageTimes are a message's timestamps (ms); Completed is set when an
// assistant message is done.
type MessageTimes struct {
	Created   int64 `json:"created"`
	Completed int64 `json:"completed,omitempty"`
}

// ErrorInfo is a named OpenCode error ({name, data}). Only Name leaves
// the package: data.message is provider text.
type ErrorInfo struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data,omitempty"`
}

// errorAborted is the error an aborted assistant message carries.
const errorAborted = "MessageAbortedError"

// Part is one message part; the fields present depend on Type.
type Part struct {
	ID        string     `json:"id"`
	SessionID string     `json:"sessionID"`
	MessageID string     `json:"messageID"`
	Type      string     `json:"type"`
	Text      string     `json:"text,omitempty"`
	Synthetic bool       `json:"synthetic,omitempty"`
	Time      *PartTimes `json:"time,omitempty"`
	// tool parts
	CallID string     `json:"callID,omitempty"`
	Tool   string     `json:"tool,omitempty"`
	State  *ToolState `json:"state,omitempty"`
	// step-finish parts
	Reason string      `json:"reason,omitempty"`
	Tokens *PartTokens `json:"tokens,omitempty"`
}

// Part types runnerd maps.
const (
	partText       = "text"
	partReasoning  = "reasoning"
	partTool       = "tool"
	partStepFinish = "step-finish"
)

// PartTimes are a text part's timestamps; End is set when it is done.
type PartTimes struct {
	Start int64 `json:"start"`
	End   int64 `json:"end,omitempty"`
}

// ToolState is a tool part's state: pending, running, completed or error.
type ToolState struct {
	Status string          `json:"status"`
	Input  json.RawMessage `json:"input,omitempty"`
	Title  string          `json:"title,omitempty"`
	Output string          `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Tool states.
const (
	toolPending   = "pending"
	toolRunning   = "running"
	toolCompleted = "completed"
	toolError     = "error"
)

// PartTokens is a step's token count.
type PartTokens struct {
	Total     int64 `json:"total,omitempty"`
	Input     int64 `json:"input"`
	Output    int64 `json:"output"`
	Reasoning int64 `json:"reasoning"`
	Cache     struct {
		Read  int64 `json:"read"`
		Write int64 `json:"write"`
	} `json:"cache"`
}

// Message is one entry of GET /session/{id}/message.
type Message struct {
	Info  MessageInfo `json:"info"`
	Parts []Part      `json:"parts"`
}

// PermissionAsked is permission.asked's properties.
type PermissionAsked struct {
	ID         string   `json:"id"`
	SessionID  string   `json:"sessionID"`
	Permission string   `json:"permission"`
	Patterns   []string `json:"patterns,omitempty"`
	Tool       *struct {
		MessageID string `json:"messageID"`
		CallID    string `json:"callID"`
	} `json:"tool,omitempty"`
}

// Permission replies (POST /permission/{id}/reply).
const (
	replyOnce   = "once"
	replyAlways = "always"
	replyReject = "reject"
)

// todo is one todo.updated entry.
type todo struct {
	Content  string `json:"content"`
	Status   string `json:"status"`
	Priority string `json:"priority"`
}

// sessionProps covers the properties of the session-scoped events runnerd
// reads: message.updated (info), message.part.updated (part),
// message.part.delta (messageID, partID, field, delta), session.status
// (status), session.error (error), todo.updated (todos).
type sessionProps struct {
	SessionID string       `json:"sessionID"`
	Info      *MessageInfo `json:"info,omitempty"`
	Part      *Part        `json:"part,omitempty"`
	MessageID string       `json:"messageID,omitempty"`
	PartID    string       `json:"partID,omitempty"`
	Field     string       `json:"field,omitempty"`
	Delta     string       `json:"delta,omitempty"`
	Status    *struct {
		Type string `json:"type"`
	} `json:"status,omitempty"`
	Error *ErrorInfo `json:"error,omitempty"`
	Todos []todo     `json:"todos,omitempty"`
}
