package runner

import (
	"context"
	"sync"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
)

// sender ships the committed outbox and command results on the current
// connection, each event once and in sourceSeq order (prp.md §8.2, §8.5).
// The dispatch goroutine, executor commits and the lifecycle routine all
// send through it.
//
// Two locks, so nobody waits behind a blocked write only to read a field:
// writeMu orders the writers and is held across Conn.Send (it guards no
// field; helpers that need it end in WriteLocked); mu guards the fields
// below and is never held across a send, so onLost, an ACK and the
// lifecycle routine only wait for a field update.
type sender struct {
	store *state.Store
	id    prp.Identity

	// writeMu orders the writers across Conn.Send; guards no field.
	writeMu sync.Mutex

	// mu guards the fields below; never held across a send.
	mu          sync.Mutex
	conn        *prp.Conn // current connection; nil while disconnected
	version     int       // its PRP version
	sentThrough uint64    // highest sourceSeq queued on conn
	connections int       // authenticated connections in this process
	// resultAfter is sentThrough when the last command_result was queued on
	// conn (resultQueued): an ACK beyond it proves the result arrived, since
	// the core handles one connection's frames in order.
	resultAfter  uint64
	resultQueued bool
	// boundReported is the outbox bound last reported as a diagnostic;
	// cleared once the store leaves storage pressure.
	boundReported string
}

// countConnection records an authenticated connection and returns how many
// this process has had.
func (s *sender) countConnection() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.connections++
	return s.connections
}

// connectionCount is how many connections this process has authenticated.
func (s *sender) connectionCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connections
}

// attach makes c (PRP version v) the current connection and replays the
// unacknowledged outbox on it byte for byte (prp.md §9.4).
func (s *sender) attach(ctx context.Context, c *prp.Conn, v int) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	s.conn, s.version = c, v
	s.sentThrough = s.store.Summary().AckedSourceSeq
	s.resultQueued = false
	s.mu.Unlock()
	return s.flushWriteLocked(ctx)
}

// protocolVersion is the current connection's PRP version (0 while disconnected).
func (s *sender) protocolVersion() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return 0
	}
	return s.version
}

// setIdentity makes later command results carry id (a warm rotation's new
// identity); events carry the state's own.
func (s *sender) setIdentity(id prp.Identity) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	s.id = id
	s.mu.Unlock()
}

// detach forgets the lost connection; a write in flight on it fails on its own.
func (s *sender) detach() {
	s.mu.Lock()
	s.conn = nil
	s.mu.Unlock()
}

// flush sends every committed, unsent outbox event on the current connection.
func (s *sender) flush(ctx context.Context) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return s.flushWriteLocked(ctx)
}

// flushWriteLocked sends the outbox suffix after sentThrough in order, each
// event as stored (byte-identical on a replay), downgraded on a v1 link
// (prp.md §8.2, §8.5). s.writeMu held; s.mu is taken only between sends. The
// connection cannot change under it: attach waits for writeMu, and detach
// only clears it.
func (s *sender) flushWriteLocked(ctx context.Context) error {
	s.mu.Lock()
	c, v, after := s.conn, s.version, s.sentThrough
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	for _, e := range s.store.Unsent(after) {
		b, err := e.Wire(v)
		if err != nil {
			return err
		}
		if err := c.Send(ctx, b); err != nil {
			return err
		}
		s.mu.Lock()
		s.sentThrough = e.SourceSeq
		s.mu.Unlock()
	}
	return nil
}

// sendResult queues the command_result after every event committed before
// it, so evidence reaches the core ahead of the result (prp.md §7.2 step 6).
// While disconnected it does nothing: the core re-delivers the command and
// the journal replays this result.
func (s *sender) sendResult(ctx context.Context, res state.CommandResult) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := s.flushWriteLocked(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	c, v, id := s.conn, s.version, s.id
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	payload, err := jsonenc.Marshal(prp.CommandResultPayload{
		CommandID: res.CommandID, ControllerSeq: res.ControllerSeq, CommandType: res.CommandType,
		Status: wireStatus(res), Result: res.Result,
	})
	if err != nil {
		return err
	}
	b, err := prp.MarshalEnvelope(prp.NewEventEnvelope(prp.KindCommandResult, v, id, payload))
	if err != nil {
		return err
	}
	if err := c.Send(ctx, b); err != nil {
		return err
	}
	s.mu.Lock()
	s.resultAfter, s.resultQueued = s.sentThrough, true
	s.mu.Unlock()
	return nil
}

// resultUnproven reports whether the last command_result queued on this
// connection may not have arrived: no ACK of a later event proves it yet.
// With no later event (a command re-delivered after a reconnect) the core
// re-delivers it to the next process, which replays the journaled result.
func (s *sender) resultUnproven(sum state.Summary) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resultQueued && sum.AckedSourceSeq <= s.resultAfter && sum.HighestSourceSeq > s.resultAfter
}

// reportBound reports whether code is a new outbox-bound episode, and
// records it.
func (s *sender) reportBound(code string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.boundReported == code {
		return false
	}
	s.boundReported = code
	return true
}

// clearBound ends the outbox-bound episode (the store left storage pressure).
func (s *sender) clearBound() {
	s.mu.Lock()
	s.boundReported = ""
	s.mu.Unlock()
}
