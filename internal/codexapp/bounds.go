package codexapp

import "time"

// Bounds (codex.md §2; values from the reference driver, paperclip's
// runner-core codex_provider.rs).
const (
	// maxLineBytes bounds one app-server line (codex.md §2: 4 MiB).
	maxLineBytes = 4 << 20
	// maxThreadStartBytes bounds the whole thread/start request.
	maxThreadStartBytes = 4 << 20
	// maxDynamicTools and maxDynamicToolsBytes bound dynamicTools.
	maxDynamicTools      = 256
	maxDynamicToolsBytes = 4 << 20
	// maxPendingToolRequests / Bytes bound open item/tool/call requests.
	maxPendingToolRequests     = 4096
	maxPendingToolRequestBytes = 16 << 20
	// maxCompletedToolCallIDs are the settled Codex call ids kept to refuse
	// a reused callId.
	maxCompletedToolCallIDs = 4096
	// maxPendingRuntimeRequests / Bytes bound open runtime requests.
	maxPendingRuntimeRequests     = 128
	maxPendingRuntimeRequestBytes = 4 << 20
	// maxSettledTurnIDs are the settled provider turn ids kept to drop a
	// late turn/completed.
	maxSettledTurnIDs = 4096
	// requestTimeout bounds the wait for one response.
	requestTimeout = 30 * time.Second
	// maxEarlyMessages / Bytes bound what arrives before the thread id.
	maxEarlyMessages = 1024
	maxEarlyBytes    = 16 << 20
	// maxToolResultBytes caps the text of a tool answer (codex.md §4).
	maxToolResultBytes = 1 << 20
)

// textStopped answers every open item/tool/call on interrupt or shutdown.
const textStopped = "Paperclip stopped the active provider turn"

// codeMethodUnavailable and textMethodUnavailable answer any other request.
const (
	codeMethodUnavailable = -32601
	textMethodUnavailable = "provider request is unavailable in this runner layer"
)
