// Package state is runnerd's durable state: the runner-state.json file that
// holds the runner's identity, lifecycle, cursors, event outbox, command
// journal and fences (prp.md §7, §8, §9).
//
// Contracts:
//
//   - Every mutation goes through [Store.Update], which applies a function to a
//     private copy of the state and commits it with exactly one durable write
//     (a sibling temp file that is not the state file, fdatasync, an
//     exchange or rename into place, directory fsync: one data sync and one
//     directory sync); when Update returns nil the new state is durable. A
//     failed function leaves the committed state untouched. Group the events,
//     cursors and markers of one logical step into one Update.
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
//   - Loading never repairs or replaces a damaged file: a corrupt state file is
//     a clear error and the bytes on disk are left as they are.
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
