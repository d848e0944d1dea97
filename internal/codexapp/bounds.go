package codexapp

import "time"

// Bounds (codex.md §2; values from the reference driver, paperclip's
// runner-core codex_provider.rs).
const (
	// MaxLineBytes bounds one app-server line (codex.md §2: 4 MiB).
	MaxLineBytes = 4 << 20
	// MaxThreadStartBytes bounds the whole thread/start request.
	MaxThreadStartBytes = 4 << 20
	// MaxDynamicTools and MaxDynamicToolsBytes bound dynamicTools.
	MaxDynamicTools      = 256
	MaxDynamicToolsBytes = 4 << 20
	// MaxPendingToolRequests / Bytes bound open item/tool/call requests.
	MaxPendingToolRequests     = 4096
	MaxPendingToolRequestBytes = 16 << 20
	// MaxCompletedToolCallIDs are the settled Codex call ids kept to refuse
	// a reused callId.
	MaxCompletedToolCallIDs = 4096
	// MaxPendingRuntimeRequests / Bytes bound open runtime requests.
	MaxPendingRuntimeRequests     = 128
	MaxPendingRuntimeRequestBytes = 4 << 20
	// MaxSettledTurnIDs are the settled provider turn ids kept to drop a
	// late turn/completed.
	MaxSettledTurnIDs = 4096
	// RequestTimeout bounds the wait for one response.
	RequestTimeout = 30 * time.Second
	// MaxEarlyMessages / Bytes bound what arrives before the thread id.
	MaxEarlyMessages = 1024
	MaxEarlyBytes    = 16 << 20
	// MaxToolResultBytes caps the text of a tool answer (codex.md §4).
	MaxToolResultBytes = 1 << 20
)

// TextStopped answers every open item/tool/call on interrupt or shutdown.
const TextStopped = "Paperclip stopped the active provider turn"

// CodeMethodUnavailable and TextMethodUnavailable answer any other request.
const (
	CodeMethodUnavailable = -32601
	TextMethodUnavailable = "provider request is unavailable in this runner layer"
)
