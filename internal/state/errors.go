package state

import "errors"

// Protocol-named conditions. Callers match them with errors.Is; the wrapped
// messages never carry payload bytes or secrets.
var (
	// ErrCommandReplayConflict: a known commandId arrived with different bytes (§7.2 step 2). Fail closed.
	ErrCommandReplayConflict = errors.New("command id reused with different command data")
	// ErrNonContiguousCommand: controllerSeq is not last+1 (§7.2 step 4). Fatal for the runner.
	ErrNonContiguousCommand = errors.New("controller sequence is not contiguous")
	// errCommandNotPending: a result was recorded for a command that is not journaled as pending.
	errCommandNotPending = errors.New("command is not pending")
	// errCommandResultTooLarge: a sanitised result exceeds maxCommandResultBytes (§9.3).
	errCommandResultTooLarge = errors.New("command result exceeds the durable journal limit")

	// ErrAckBehindCursor: a cumulative ACK moved behind the durable cursor (§8.4). Fatal.
	ErrAckBehindCursor = errors.New("cumulative ack is behind the durable cursor")
	// ErrAckBeyondProduced: a cumulative ACK is beyond the highest produced sourceSeq (§8.4). Fatal.
	ErrAckBeyondProduced = errors.New("cumulative ack is beyond the produced source sequence")

	// ErrBackpressure: a non-P0 event would enter the P0 reserve (§9.3). The
	// event is not stored; the backpressure lifecycle and a diagnostic are.
	ErrBackpressure = errors.New("outbox soft limit reached; reserve is for P0 events")
	// ErrP0StorageExhausted: a P0 event would exceed the hard outbox limit
	// (§9.3, code p0_storage_exhausted). The lifecycle becomes unrecoverable.
	ErrP0StorageExhausted = errors.New("p0 storage exhausted")
	// ErrEventTooLarge: one event envelope, sealed, exceeds the frame limit
	// (SealedFrameBytes). The event is not stored; nothing else changes.
	ErrEventTooLarge = errors.New("event exceeds the frame limit")
	// ErrChunkRewritten: the outbox's sanitiser would change an
	// output.body.chunk, whose digests cover its exact text (workspace.md
	// §7.4). The chunk is not stored; nothing else changes.
	ErrChunkRewritten = errors.New("output body chunk would be rewritten by the sanitiser")
	// ErrGroupDoesNotFit: a group of events (a body's chunks and their
	// carrier) exceeds the outbox's non-P0 room, the frame limit or the
	// group bound (workspace.md §7.6). Nothing is stored and nothing else
	// changes: the caller sends less.
	ErrGroupDoesNotFit = errors.New("event group does not fit the outbox")
	// errInvalidEvent: an event type, payload or identity is malformed.
	errInvalidEvent = errors.New("invalid event")
	// errExecutorEventConflict: an executor event id was reused with different event data.
	errExecutorEventConflict = errors.New("executor event id reused with different event data")
	// errSensitiveIdentity: sanitisation would change an identity or a tool input (§8.1).
	errSensitiveIdentity = errors.New("identity or tool input contains credential-shaped material")

	// ErrRevokeNotAdvancing: a revoke did not raise the revocation epoch (§3.2). Fatal.
	ErrRevokeNotAdvancing = errors.New("revoke epoch does not advance")

	// errCorruptState: runner-state.json cannot be decoded or is inconsistent.
	// The file on disk is left untouched.
	errCorruptState = errors.New("runner state is corrupt")
	// errStateBinding: the state file belongs to another runner identity or bounds.
	errStateBinding = errors.New("runner state binding does not match this runner")
	// errUnsafePath: the state directory or file is a symlink, not private, or
	// not owned by this user (code runner_state_directory_unsafe on the server).
	errUnsafePath = errors.New("runner state path is unsafe")
	// errStateTooLarge: the serialised state exceeds its storage bound.
	errStateTooLarge = errors.New("runner state exceeds its storage bound")

	// ErrExitNow: the loaded state is revoked, or stopped with no pending
	// fence (§9.4). The caller MUST exit 0 at once without connecting.
	ErrExitNow = errors.New("runner state is final; exit now")
	// ErrWriteAborted: Abort ended a write's wait for disk space; the
	// state committed before that write is what the disk holds.
	ErrWriteAborted = errors.New("state write abandoned while waiting for disk space")
	// errClosed: the store was closed.
	errClosed = errors.New("state store is closed")
)
