package opencode

import "time"

// Bounds, each with its source.
const (
	// maxEventBytes bounds one SSE event (its data lines together); it
	// mirrors the 4 MiB JSON line bound of codex.md §2.
	maxEventBytes = 4 << 20
	// maxResponseBytes bounds one HTTP response body (the message list is
	// the large one); 16 MiB mirrors the pending-request byte bound of
	// codex.md §2.
	maxResponseBytes = 16 << 20
	// startTimeout bounds the wait for the listening line: the cold
	// session.open bound (prp.md §10, codex.md §2: 30 s).
	startTimeout = 30 * time.Second
	// requestTimeout bounds every HTTP request but the event stream:
	// codex.md §2, every request waits at most 30 s for its response.
	requestTimeout = 30 * time.Second
	// maxTrackedParts bounds the per-part dedup record of State; 4,096
	// mirrors the settled-id bounds of codex.md §2. The oldest parts of
	// finished messages are forgotten first.
	maxTrackedParts = 4096
	// maxListenLine bounds the stdout prefix searched for the listening
	// line (a few log lines; OpenCode prints it first).
	maxListenLine = 64 << 10
	// maxDeliverBatch bounds the messages one durable write takes from
	// the event stream: what is already buffered when a message arrives
	// joins it, up to this many. It mirrors the agent reader's bound on
	// one batch (128 events, an outbox group's bound).
	maxDeliverBatch = 128
	// passwordBytes is the entropy of a server password (256 bits).
	passwordBytes = 32
	// reconnectDelay is the pause before the event stream is reopened
	// after it dropped (OpenCode's own SDK retries after a few seconds;
	// loopback needs less).
	reconnectDelay = 200 * time.Millisecond
	// maxReconnects bounds consecutive failed reconnects before the stream
	// is reported lost (about 10 s of reconnectDelay).
	maxReconnects = 50
)

// username is the basic-auth user OpenCode expects when only
// OPENCODE_SERVER_PASSWORD is set (OPENCODE_SERVER_USERNAME's default).
const username = "opencode"

// envPassword is the variable OpenCode reads its server password from.
const envPassword = "OPENCODE_SERVER_PASSWORD"
