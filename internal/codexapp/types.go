// Package codexapp is runnerd's Codex driver (driver.go) and its client of
// Codex's app-server protocol (codex.md §1–§5): JSON-RPC lines over the
// agent's stdio, written by hand from the protocol's own types.
//
// Pinned protocol: openai/codex, codex-rs/app-server-protocol (v2 types
// in src/protocol/v2.rs; the generated schema in schema/json/
// ServerNotification.json, ClientRequest.json and ServerRequest.json) at
// commit f793618e7b4d32961d4891b75550dcaced1f033b. Tests check every
// message runnerd and test/fakecodex exchange against the schema the
// pinned @openai/codex@0.169.0 generates (testdata/schema,
// scripts/codex-schema; test/codexschema). Only the fields runnerd
// reads or sends are declared; unknown fields are ignored. No Go module
// for this protocol exists that is worth a dependency: the ~20 types
// below are all runnerd needs.
//
// The client keeps its durable state (request table, partial line, active
// turn, thread id) in the provider.Core record the agent Manager persists,
// and turns app-server messages into the provider.Inbound model, so the
// Manager's shared mapping, commit path and tool flow apply unchanged.
package codexapp

import "encoding/json"

// Client→server methods (ClientRequest.json).
const (
	MethodInitialize    = "initialize"
	MethodInitialized   = "initialized" // a notification
	MethodThreadStart   = "thread/start"
	MethodThreadResume  = "thread/resume"
	MethodThreadRead    = "thread/read"
	MethodTurnStart     = "turn/start"
	MethodTurnSteer     = "turn/steer"
	MethodTurnInterrupt = "turn/interrupt"
)

// Server→client requests (ServerRequest.json).
const (
	MethodToolCall         = "item/tool/call"
	MethodRequestUserInput = "item/tool/requestUserInput"
	MethodCommandApproval  = "item/commandExecution/requestApproval"
	MethodFileApproval     = "item/fileChange/requestApproval"
)

// Server notifications runnerd maps (ServerNotification.json).
const (
	NoteTurnStarted      = "turn/started"
	NoteTurnCompleted    = "turn/completed"
	NotePlanUpdated      = "turn/plan/updated"
	NoteTokenUsage       = "thread/tokenUsage/updated"
	NoteAgentDelta       = "item/agentMessage/delta"
	NoteReasoningDelta   = "item/reasoning/textDelta"
	NoteReasoningSummary = "item/reasoning/summaryTextDelta"
	NoteItemStarted      = "item/started"
	NoteItemCompleted    = "item/completed"
	NoteThreadCompacted  = "thread/compacted" // deprecated; contextCompaction items replace it
	NoteError            = "error"
	NoteWarning          = "warning"
	NoteDeprecation      = "deprecationNotice"
	NoteConfigWarning    = "configWarning"
	NoteRequestResolved  = "serverRequest/resolved"
)

// ClientInfo is initialize's clientInfo.
type ClientInfo struct {
	Name    string `json:"name"`
	Title   string `json:"title"`
	Version string `json:"version"`
}

// InitializeCapabilities is initialize's capabilities.
type InitializeCapabilities struct {
	ExperimentalAPI bool `json:"experimentalApi"`
}

// InitializeParams is initialize (codex.md §2).
type InitializeParams struct {
	ClientInfo   ClientInfo             `json:"clientInfo"`
	Capabilities InitializeCapabilities `json:"capabilities"`
}

// DynamicToolFunction is the DynamicToolSpec variant runnerd sends: one
// function tool (0.169.0's generated ThreadStartParams requires the type
// tag; "namespace" groups tools, which the catalog never does).
const DynamicToolFunction = "function"

// DynamicTool is one thread/start dynamicTools entry (codex.md §3).
type DynamicTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// ThreadStartParams is thread/start.
type ThreadStartParams struct {
	Cwd                   string        `json:"cwd"`
	Model                 *string       `json:"model"`
	ApprovalPolicy        string        `json:"approvalPolicy"`
	DynamicTools          []DynamicTool `json:"dynamicTools"`
	DeveloperInstructions *string       `json:"developerInstructions"`
	Sandbox               string        `json:"sandbox"`
	ExperimentalRawEvents bool          `json:"experimentalRawEvents"`
}

// ThreadResumeParams is thread/resume: it has no dynamicTools (the
// catalog is fixed at thread/start).
type ThreadResumeParams struct {
	ThreadID              string  `json:"threadId"`
	Cwd                   string  `json:"cwd"`
	Model                 *string `json:"model"`
	ApprovalPolicy        string  `json:"approvalPolicy"`
	DeveloperInstructions *string `json:"developerInstructions"`
	ExcludeTurns          bool    `json:"excludeTurns"`
}

// ThreadReadParams is thread/read.
type ThreadReadParams struct {
	ThreadID     string `json:"threadId"`
	IncludeTurns bool   `json:"includeTurns"`
}

// Thread is the part of a thread runnerd reads.
type Thread struct {
	ID string `json:"id"`
}

// ThreadResponse is the answer of thread/start and thread/resume.
type ThreadResponse struct {
	Thread Thread `json:"thread"`
}

// UserInput is one turn/start input item (type "text").
type UserInput struct {
	Type         string            `json:"type"`
	Text         string            `json:"text"`
	TextElements []json.RawMessage `json:"text_elements"`
}

// TurnStartParams is turn/start.
type TurnStartParams struct {
	ThreadID string      `json:"threadId"`
	Cwd      string      `json:"cwd,omitempty"`
	Input    []UserInput `json:"input"`
}

// TurnSteerParams is turn/steer.
type TurnSteerParams struct {
	ThreadID       string      `json:"threadId"`
	ExpectedTurnID string      `json:"expectedTurnId"`
	Input          []UserInput `json:"input"`
}

// TurnInterruptParams is turn/interrupt.
type TurnInterruptParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

// Turn statuses (TurnStatus: no "cancelled").
const (
	TurnCompleted   = "completed"
	TurnInterrupted = "interrupted"
	TurnFailed      = "failed"
	TurnInProgress  = "inProgress"
)

// Turn is the part of a turn runnerd reads.
type Turn struct {
	ID     string     `json:"id"`
	Status string     `json:"status"`
	Error  *TurnError `json:"error,omitempty"`
}

// TurnError is a failed turn's error.
type TurnError struct {
	Message string `json:"message"`
}

// TurnResponse is the answer of turn/start.
type TurnResponse struct {
	Turn Turn `json:"turn"`
}

// TurnNotification is turn/started and turn/completed.
type TurnNotification struct {
	ThreadID string `json:"threadId"`
	Turn     Turn   `json:"turn"`
}

// DeltaNotification is item/agentMessage/delta and the reasoning deltas.
type DeltaNotification struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	ItemID   string `json:"itemId"`
	Delta    string `json:"delta"`
}

// PlanStep is one turn/plan/updated step.
type PlanStep struct {
	Step   string `json:"step"`
	Status string `json:"status"` // pending | inProgress | completed
}

// PlanNotification is turn/plan/updated.
type PlanNotification struct {
	ThreadID    string     `json:"threadId"`
	TurnID      string     `json:"turnId"`
	Explanation *string    `json:"explanation"`
	Plan        []PlanStep `json:"plan"`
}

// TokenBreakdown is one tokenUsage measurement.
type TokenBreakdown struct {
	TotalTokens           int64 `json:"totalTokens"`
	InputTokens           int64 `json:"inputTokens"`
	CachedInputTokens     int64 `json:"cachedInputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	ReasoningOutputTokens int64 `json:"reasoningOutputTokens"`
}

// TokenUsageNotification is thread/tokenUsage/updated.
type TokenUsageNotification struct {
	ThreadID   string `json:"threadId"`
	TurnID     string `json:"turnId"`
	TokenUsage struct {
		Total TokenBreakdown `json:"total"`
		Last  TokenBreakdown `json:"last"`
	} `json:"tokenUsage"`
}

// Item types runnerd maps (ThreadItem).
const (
	ItemCommandExecution  = "commandExecution"
	ItemMCPToolCall       = "mcpToolCall"
	ItemContextCompaction = "contextCompaction"
	ItemAgentMessage      = "agentMessage"
	ItemReasoning         = "reasoning"
)

// ThreadItem is the part of an item runnerd reads.
type ThreadItem struct {
	Type             string  `json:"type"`
	ID               string  `json:"id"`
	Command          string  `json:"command,omitempty"`
	Status           string  `json:"status,omitempty"`
	AggregatedOutput *string `json:"aggregatedOutput,omitempty"`
	Server           string  `json:"server,omitempty"`
	Tool             string  `json:"tool,omitempty"`
}

// ItemNotification is item/started and item/completed.
type ItemNotification struct {
	ThreadID string     `json:"threadId"`
	TurnID   string     `json:"turnId"`
	Item     ThreadItem `json:"item"`
}

// NoticeNotification is error, warning, deprecationNotice and
// configWarning: the text is never forwarded (it may hold anything).
type NoticeNotification struct {
	ThreadID  string `json:"threadId,omitempty"`
	TurnID    string `json:"turnId,omitempty"`
	WillRetry bool   `json:"willRetry,omitempty"`
}

// ToolCallParams is item/tool/call.
type ToolCallParams struct {
	ThreadID  string          `json:"threadId"`
	TurnID    string          `json:"turnId"`
	CallID    string          `json:"callId"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// ContentItem is one DynamicToolCallOutputContentItem (type "inputText").
type ContentItem struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ToolCallResponse is the answer to item/tool/call. codex.md §4 and
// @openai/codex@0.169.0's generated DynamicToolCallResponse read {success,
// contentItems}; the schema at openai/codex 96558c7 requires {success,
// result: {type: "contentItems", contentItems}}. runnerd sends both
// members: each version ignores the one it does not know.
type ToolCallResponse struct {
	ContentItems []ContentItem `json:"contentItems"`
	Success      bool          `json:"success"`
	Result       ToolResult    `json:"result"`
}

// ToolResult is 96558c7's DynamicToolCallResult (contentItems).
type ToolResult struct {
	Type         string        `json:"type"`
	ContentItems []ContentItem `json:"contentItems"`
}

// RequestResolvedNotification is serverRequest/resolved.
type RequestResolvedNotification struct {
	ThreadID  string          `json:"threadId"`
	RequestID json.RawMessage `json:"requestId"`
}
