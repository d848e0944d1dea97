// Package state is runnerd's durable state: the store file runner-state.db
// (bbolt) that holds the runner's identity, lifecycle, cursors, event
// outbox, command journal, fences, the records other packages keep and
// their append-only texts (text.go), and runner-state.json, the projection of its header that the server
// reads (prp.md §7, §8, §9; durability.md §7.2).
//
// Contracts:
//
//   - Every mutation goes through [Store.Update], which applies a function to a
//     private copy of the state and commits it as one store transaction
//     holding only what changed (appended and acknowledged events, changed
//     records, the bytes appended to a text, the header), then rewrites runner-state.json when the header
//     changed (temp file, fdatasync, exchange or rename, and a directory
//     fsync when a field the server acts on changed, or when the older
//     files run out); when Update returns nil the store is durable, and so
//     is the file's name for what the server acts on (a power loss may
//     leave it an older cursor or outbox view, never a torn file). A
//     failed function leaves the committed state untouched. Group the
//     events, cursors and markers of one logical step into one Update.
//
//   - Committed states are immutable. Readers ([Store.Summary],
//     [Store.Snapshot], [Store.Unacked]) never take the lock that a write holds
//     across its fsync, so a PRP pong is never delayed by storage.
//
//   - An event is durable in the outbox before the caller can send it; a
//     command is journaled as pending before its effect; a command whose
//     effect may have started before a crash is reported as
//     execution_indeterminate and never admitted for execution again.
//
//   - Loading never repairs or replaces a damaged store: a corrupt store, or
//     a corrupt old-format runner-state.json (one is migrated into a new
//     store on open), is a clear error and the bytes on disk are left as
//     they are. runner-state.json beside a store is only a view of it and
//     is re-projected on open.
//
//   - An ACK advances the cursor and trims the outbox in memory at once; the
//     cursor reaches the file with the next write, or on its own after
//     ackPersistInterval unsaved advances or ackIdleFlush without a write
//     (prp.md §8.4). A crash in between replays, byte for byte, the events
//     the file still holds above its older cursor.
//
// The package does no networking. Its only goroutines are short-lived
// closers of state files already replaced by a rename (freeing the old
// inode is the slow part of a replace, so it is kept off the write path)
// and the idle write of the ACK cursor; [Store.Close] waits for them.
package state
