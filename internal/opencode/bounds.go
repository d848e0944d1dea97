package opencode

import "time"

// Bounds, each with its source.
const (
	// MaxEventBytes bounds one SSE event (its data lines together); it
	// mirrors the 4 MiB JSON line bound of codex.md §2.
	MaxEventBytes = 4 << 20
	// MaxResponseBytes bounds one HTTP response body (the message list is
	// the large one); 16 MiB mirrors the pending-request byte bound of
	// codex.md §2.
	MaxResponseBytes = 16 << 20
	// StartTimeout bounds the wait for the listening line: the cold
	// session.open bound (prp.md §10, codex.md §2: 30 s).
	StartTimeout = 30 * time.Second
	// RequestTimeout bounds every HTTP request but the event stream:
	// codex.md §2, every request waits at most 30 s for its response.
	RequestTimeout = 30 * time.Second
	// MaxTrackedParts bounds the per-part dedup record of State; 4,096
	// mirrors the settled-id bounds of codex.md §2. The oldest parts of
	// finished messages are forgotten first.
	MaxTrackedParts = 4096
	// MaxListenLine bounds the stdout prefix searched for the listening
	// line (a few log lines; OpenCode prints it first).
	MaxListenLine = 64 << 10
	// PasswordBytes is the entropy of a server password (256 bits).
	PasswordBytes = 32
	// ReconnectDelay is the pause before the event stream is reopened
	// after it dropped (OpenCode's own SDK retries after a few seconds;
	// loopback needs less).
	ReconnectDelay = 200 * time.Millisecond
	// MaxReconnects bounds consecutive failed reconnects before the stream
	// is reported lost (about 10 s of ReconnectDelay).
	MaxReconnects = 50
)

// Username is the basic-auth user OpenCode expects when only
// OPENCODE_SERVER_PASSWORD is set (OPENCODE_SERVER_USERNAME's default).
const Username = "opencode"

// EnvPassword is the variable OpenCode reads its server password from.
const EnvPassword = "OPENCODE_SERVER_PASSWORD"
