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
	methodInitialize    = "initialize"
	methodInitialized   = "initialized" // a notification
	methodThreadStart   = "thread/start"
	methodThreadResume  = "thread/resume"
	methodThreadRead    = "thread/read"
	methodTurnStart     = "turn/start"
	methodTurnSteer     = "turn/steer"
	methodTurnInterrupt = "turn/interrupt"
)

// Server→client requests (ServerRequest.json).
const (
	methodToolCall         = "item/tool/call"
	methodRequestUserInput = "item/tool/requestUserInput"
	methodCommandApproval  = "item/commandExecution/requestApproval"
	methodFileApproval     = "item/fileChange/requestApproval"
)

// Server notifications runnerd maps (ServerNotification.json).
const (
	noteTurnStarted      = "turn/started"
	noteTurnCompleted    = "turn/completed"
	notePlanUpdated      = "turn/plan/updated"
	noteTokenUsage       = "thread/tokenUsage/updated"
	noteAgentDelta       = "item/agentMessage/delta"
	noteReasoningDelta   = "item/reasoning/textDelta"
	noteReasoningSummary = "item/reasoning/summaryTextDelta"
	noteItemStarted      = "item/started"
	noteItemCompleted    = "item/completed"
	noteTurnDiffUpdated  = "turn/diff/updated"
	noteThreadCompacted  = "thread/compacted" // deprecated; contextCompaction items replace it
	noteError            = "error"
	noteWarning          = "warning"
	noteDeprecation      = "deprecationNotice"
	noteConfigWarning    = "configWarning"
	noteRequestResolved  = "serverRequest/resolved"
)

// clientInfo is initialize's clientInfo.
type clientInfo struct {
	Name    string `json:"name"`
	Title   string `json:"title"`
	Version string `json:"version"`
}

// initializeCapabilities is initialize's capabilities.
type initializeCapabilities struct {
	ExperimentalAPI bool `json:"experimentalApi"`
}

// initializeParams is initialize (codex.md §2).
type initializeParams struct {
	ClientInfo   clientInfo             `json:"clientInfo"`
	Capabilities initializeCapabilities `json:"capabilities"`
}

// dynamicToolFunction is the DynamicToolSpec variant runnerd sends: one
// function tool (0.169.0's generated ThreadStartParams requires the type
// tag; "namespace" groups tools, which the catalog never does).
const dynamicToolFunction = "function"

// dynamicTool is one thread/start dynamicTools entry (codex.md §3).
type dynamicTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// threadStartParams is thread/start.
type threadStartParams struct {
	Cwd                   string        `json:"cwd"`
	Model                 *string       `json:"model"`
	ApprovalPolicy        string        `json:"approvalPolicy"`
	DynamicTools          []dynamicTool `json:"dynamicTools"`
	DeveloperInstructions *string       `json:"developerInstructions"`
	Sandbox               string        `json:"sandbox"`
	ExperimentalRawEvents bool          `json:"experimentalRawEvents"`
}

// threadResumeParams is thread/resume: it has no dynamicTools (the
// catalog is fixed at thread/start).
type threadResumeParams struct {
	ThreadID              string  `json:"threadId"`
	Cwd                   string  `json:"cwd"`
	Model                 *string `json:"model"`
	ApprovalPolicy        string  `json:"approvalPolicy"`
	DeveloperInstructions *string `json:"developerInstructions"`
	ExcludeTurns          bool    `json:"excludeTurns"`
}

// threadReadParams is thread/read.
type threadReadParams struct {
	ThreadID     string `json:"threadId"`
	IncludeTurns bool   `json:"includeTurns"`
}

// thread is the part of a thread runnerd reads.
type thread struct {
	ID string `json:"id"`
}

// threadResponse is the answer of thread/start and thread/resume.
type threadResponse struct {
	Thread thread `json:"thread"`
}

// userInput is one turn/start input item (type "text").
type userInput struct {
	Type         string            `json:"type"`
	Text         string            `json:"text"`
	TextElements []json.RawMessage `json:"text_elements"`
}

// turnStartParams is turn/start.
type turnStartParams struct {
	ThreadID string      `json:"threadId"`
	Cwd      string      `json:"cwd,omitempty"`
	Input    []userInput `json:"input"`
}

// turnSteerParams is turn/steer.
type turnSteerParams struct {
	ThreadID       string      `json:"threadId"`
	ExpectedTurnID string      `json:"expectedTurnId"`
	Input          []userInput `json:"input"`
}

// turnInterruptParams is turn/interrupt.
type turnInterruptParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

// Turn statuses (TurnStatus: no "cancelled").
const (
	turnCompleted   = "completed"
	turnInterrupted = "interrupted"
	turnFailed      = "failed"
	turnInProgress  = "inProgress"
)

// turn is the part of a turn runnerd reads.
type turn struct {
	ID     string     `json:"id"`
	Status string     `json:"status"`
	Error  *turnError `json:"error,omitempty"`
}

// turnError is a failed turn's error.
type turnError struct {
	Message string `json:"message"`
}

// turnResponse is the answer of turn/start.
type turnResponse struct {
	Turn turn `json:"turn"`
}

// turnNotification is turn/started and turn/completed.
type turnNotification struct {
	ThreadID string `json:"threadId"`
	Turn     turn   `json:"turn"`
}

// deltaNotification is item/agentMessage/delta and the reasoning deltas.
type deltaNotification struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	ItemID   string `json:"itemId"`
	Delta    string `json:"delta"`
}

// planStep is one turn/plan/updated step.
type planStep struct {
	Step   string `json:"step"`
	Status string `json:"status"` // pending | inProgress | completed
}

// planNotification is turn/plan/updated.
// turnDiffNotification is turn/diff/updated: the turn's whole git diff
// so far (TurnDiffUpdatedNotification).
type turnDiffNotification struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	Diff     string `json:"diff"`
}

type planNotification struct {
	ThreadID    string     `json:"threadId"`
	TurnID      string     `json:"turnId"`
	Explanation *string    `json:"explanation"`
	Plan        []planStep `json:"plan"`
}

// tokenBreakdown is one tokenUsage measurement.
type tokenBreakdown struct {
	TotalTokens           int64 `json:"totalTokens"`
	InputTokens           int64 `json:"inputTokens"`
	CachedInputTokens     int64 `json:"cachedInputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	ReasoningOutputTokens int64 `json:"reasoningOutputTokens"`
}

// tokenUsageNotification is thread/tokenUsage/updated.
type tokenUsageNotification struct {
	ThreadID   string `json:"threadId"`
	TurnID     string `json:"turnId"`
	TokenUsage struct {
		Total tokenBreakdown `json:"total"`
		Last  tokenBreakdown `json:"last"`
	} `json:"tokenUsage"`
}

// Item types runnerd maps (ThreadItem).
const (
	itemCommandExecution  = "commandExecution"
	itemMCPToolCall       = "mcpToolCall"
	itemContextCompaction = "contextCompaction"
	itemAgentMessage      = "agentMessage"
	itemReasoning         = "reasoning"
)

// threadItem is the part of an item runnerd reads.
type threadItem struct {
	Type             string  `json:"type"`
	ID               string  `json:"id"`
	Command          string  `json:"command,omitempty"`
	Status           string  `json:"status,omitempty"`
	AggregatedOutput *string `json:"aggregatedOutput,omitempty"`
	Server           string  `json:"server,omitempty"`
	Tool             string  `json:"tool,omitempty"`
}

// itemNotification is item/started and item/completed.
type itemNotification struct {
	ThreadID string     `json:"threadId"`
	TurnID   string     `json:"turnId"`
	Item     threadItem `json:"item"`
}

// noticeNotification is error, warning, deprecationNotice and
// configWarning: the text is never forwarded (it may hold anything).
type noticeNotification struct {
	ThreadID  string `json:"threadId,omitempty"`
	TurnID    string `json:"turnId,omitempty"`
	WillRetry bool   `json:"willRetry,omitempty"`
}

// toolCallParams is item/tool/call.
type toolCallParams struct {
	ThreadID  string          `json:"threadId"`
	TurnID    string          `json:"turnId"`
	CallID    string          `json:"callId"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// contentItem is one DynamicToolCallOutputContentItem (type "inputText").
type contentItem struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// toolCallResponse is the answer to item/tool/call. codex.md §4 and
// @openai/codex@0.169.0's generated DynamicToolCallResponse read {success,
// contentItems}; the schema at openai/codex 96558c7 requires {success,
// result: {type: "contentItems", contentItems}}. runnerd sends both
// members: each version ignores the one it does not know.
type toolCallResponse struct {
	ContentItems []contentItem `json:"contentItems"`
	Success      bool          `json:"success"`
	Result       toolResult    `json:"result"`
}

// toolResult is 96558c7's DynamicToolCallResult (contentItems).
type toolResult struct {
	Type         string        `json:"type"`
	ContentItems []contentItem `json:"contentItems"`
}

// requestResolvedNotification is serverRequest/resolved.
type requestResolvedNotification struct {
	ThreadID  string          `json:"threadId"`
	RequestID json.RawMessage `json:"requestId"`
}
