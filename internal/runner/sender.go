package runner

import (
	"context"
	"errors"
	"math"
	"sync"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
)

// sender ships the committed outbox and command results on the current
// connection, each event once and in sourceSeq order (prp.md §8.2, §8.5).
//
// One routine (run) does every send, so nothing else ever waits for the
// socket: a commit, a command handler, the ACK path and a warm step only
// change a field under mu and poke the routine, and return. While the
// connection is slow or half-open, the link's send queue fills and only
// the routine blocks; commands, interrupts and pings go on (a ping is
// answered by the link's reader, ahead of queued events). mu is never
// held across a send.
type sender struct {
	store *state.Store

	// wake is the routine's one-slot wake-up; poke never blocks.
	wake chan struct{}
	// turn is the one-slot token of whoever ships (the routine, or a
	// committer shipping inline), so events go out in order.
	turn chan struct{}

	// mu guards the fields below; never held across a send.
	mu      sync.Mutex
	id      prp.Identity // the identity command results carry
	conn    *prp.Conn    // current connection; nil while disconnected
	version int          // its PRP version
	// gen counts attach and detach: a send the routine started on an
	// older generation does not move the cursor of the new one.
	gen         uint64
	sentThrough uint64 // highest sourceSeq queued on conn
	// results are the command results waiting for the routine, in the
	// order their commands finished; each goes after the events
	// committed before it (its evidence) and before the later ones.
	results     []pendingResult
	connections int // authenticated connections in this process
	// resultAfter is sentThrough when the last command_result was queued on
	// conn (resultQueued): an ACK beyond it proves the result arrived, since
	// the core handles one connection's frames in order.
	resultAfter  uint64
	resultQueued bool
	// boundReported is the outbox bound last reported as a diagnostic;
	// cleared once the store leaves storage pressure.
	boundReported string
	// warm is the prepared run.attach while a warm rotation holds the old
	// outbox at its receipt's cursor (holdWarm); nil otherwise.
	warm *warmHold
}

// warmHold: from a run.attach's prepared write until its rotation
// settles, no event after through is sent. The core binds its receipt to
// its cursor when the attach result arrives (prp.md §9.5 step 2), so an
// event ahead of the result, on this connection or replayed on the next,
// would give it another receipt than the runner's. The attach result
// itself goes ahead of every held event. A held event is discarded with
// the old outbox at activation, or replayed by the next process when the
// rotation dies in "prepared".
type warmHold struct {
	commandID string
	through   uint64
}

// pendingResult is a command result waiting for the send routine, behind
// the outbox prefix through after.
type pendingResult struct {
	res   state.CommandResult
	after uint64
}

func newSender(st *state.Store, id prp.Identity) *sender {
	return &sender{store: st, id: id, wake: make(chan struct{}, 1), turn: make(chan struct{}, 1)}
}

// poke asks the send routine to ship what is committed; it never blocks.
func (s *sender) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// shipNow ships what is committed on the caller's goroutine when nobody
// else is shipping and the link's queue has room, which spares a commit's
// events the hand-off to the routine; whatever it cannot queue at once,
// and any failure, it leaves to the routine. It never blocks, so a commit
// never waits for the socket. The caller holds no lock.
func (s *sender) shipNow() {
	select {
	case s.turn <- struct{}{}:
	default:
		s.poke() // the shipper may have passed this commit's events
		return
	}
	err := s.ship(context.Background(), false)
	<-s.turn
	if err != nil {
		s.poke()
	}
}

// run is the send routine: it ships the outbox suffix and the queued
// results each time it is poked, until ctx ends. A failed send leaves the
// rest for the next connection, which replays from the acknowledged
// cursor.
func (s *sender) run(ctx context.Context, onErr func(error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		select {
		case <-ctx.Done():
			return
		case s.turn <- struct{}{}:
		}
		err := s.ship(ctx, true)
		<-s.turn
		if err != nil {
			onErr(err)
		}
	}
}

// errQueueFull ends an inline pass (shipNow) at a full send queue.
var errQueueFull = errors.New("the send queue is full")

// send queues b on c; without wait, errQueueFull when the queue is full.
func send(ctx context.Context, c *prp.Conn, b []byte, wait bool) error {
	if wait {
		return c.Send(ctx, b)
	}
	queued, err := c.TrySend(b)
	if err == nil && !queued {
		err = errQueueFull
	}
	return err
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

// attach makes c (PRP version v) the current connection; the routine
// replays the unacknowledged outbox on it byte for byte (prp.md §9.4).
func (s *sender) attach(c *prp.Conn, v int) {
	s.mu.Lock()
	s.conn, s.version = c, v
	s.gen++
	s.sentThrough = s.store.Summary().AckedSourceSeq
	s.resultQueued = false
	s.mu.Unlock()
	s.poke()
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
	s.mu.Lock()
	s.id = id
	s.mu.Unlock()
}

// detach forgets the lost connection and the results not yet queued on it:
// the core re-delivers their commands and the journal replays them. A
// send in flight on it fails on its own.
func (s *sender) detach() {
	s.mu.Lock()
	s.conn = nil
	s.gen++
	s.results = nil
	s.mu.Unlock()
}

// queueResult hands the routine a command_result, to go after every event
// committed before it, so evidence reaches the core ahead of the result
// (prp.md §7.2 step 6); a held run.attach's result goes right after its
// receipt's cursor (warmHold). While disconnected it does nothing: the
// core re-delivers the command and the journal replays this result.
func (s *sender) queueResult(res state.CommandResult) {
	after := s.store.Summary().HighestSourceSeq
	s.mu.Lock()
	if s.conn == nil {
		s.mu.Unlock()
		return
	}
	if s.warm != nil && s.warm.commandID == res.CommandID {
		after = min(after, s.warm.through)
	}
	s.results = append(s.results, pendingResult{res: res, after: after})
	s.mu.Unlock()
	s.poke()
}

// holdWarm holds the outbox after through for the run.attach commandID
// (warmHold); releaseWarm ends the hold.
func (s *sender) holdWarm(commandID string, through uint64) {
	s.mu.Lock()
	s.warm = &warmHold{commandID: commandID, through: through}
	s.mu.Unlock()
}

func (s *sender) releaseWarm() {
	s.mu.Lock()
	s.warm = nil
	s.mu.Unlock()
	s.poke()
}

// ship sends, on the current connection, the committed outbox suffix after
// sentThrough in order, each event as stored (byte-identical on a replay)
// and downgraded on a v1 link, with each queued result after its evidence
// (prp.md §8.2, §8.5). Only the holder of turn calls it; without wait it
// never blocks and stops with errQueueFull. It returns once nothing
// committed is left unsent; a connection change between two sends ends
// the pass, and the poke that came with it starts the next.
func (s *sender) ship(ctx context.Context, wait bool) error {
	for {
		s.mu.Lock()
		c, v, gen, after := s.conn, s.version, s.gen, s.sentThrough
		limit := uint64(math.MaxUint64)
		if s.warm != nil {
			limit = s.warm.through
		}
		s.mu.Unlock()
		if c == nil {
			return nil
		}
		evs := s.store.Unsent(after)
		for i, e := range evs {
			if e.SourceSeq > limit {
				evs = evs[:i] // held (warmHold): releaseWarm pokes for them
				break
			}
		}
		for _, e := range evs {
			if err := s.shipResults(ctx, c, v, gen, e.SourceSeq, wait); err != nil {
				return err
			}
			b, err := e.Wire(v)
			if err != nil {
				return err
			}
			if err := send(ctx, c, b, wait); err != nil {
				return err
			}
			s.mu.Lock()
			if s.gen != gen {
				s.mu.Unlock()
				return nil
			}
			s.sentThrough = e.SourceSeq
			s.mu.Unlock()
		}
		if len(evs) == 0 {
			// Every committed event up to the hold is on the wire: so is
			// the evidence of every queued result before it.
			return s.shipResults(ctx, c, v, gen, min(limit, math.MaxUint64-1)+1, wait)
		}
		// Another pass: more may have been committed meanwhile.
	}
}

// shipResults sends the queued results whose evidence ends before event
// next; without wait it never blocks (see ship).
func (s *sender) shipResults(ctx context.Context, c *prp.Conn, v int, gen, next uint64, wait bool) error {
	for {
		s.mu.Lock()
		if s.gen != gen || len(s.results) == 0 || s.results[0].after >= next {
			s.mu.Unlock()
			return nil
		}
		pr, id := s.results[0], s.id
		s.mu.Unlock()
		b, err := resultEnvelope(pr.res, v, id)
		if err != nil {
			return err
		}
		if err := send(ctx, c, b, wait); err != nil {
			return err
		}
		s.mu.Lock()
		if s.gen == gen && len(s.results) > 0 {
			s.results = s.results[1:]
			s.resultAfter, s.resultQueued = s.sentThrough, true
		}
		s.mu.Unlock()
	}
}

// resultEnvelope is res as a command_result envelope of PRP version v for
// identity id.
func resultEnvelope(res state.CommandResult, v int, id prp.Identity) ([]byte, error) {
	payload, err := jsonenc.Marshal(prp.CommandResultPayload{
		CommandID: res.CommandID, ControllerSeq: res.ControllerSeq, CommandType: res.CommandType,
		Status: wireStatus(res), Result: res.Result,
	})
	if err != nil {
		return nil, err
	}
	return prp.MarshalEnvelope(prp.NewEventEnvelope(prp.KindCommandResult, v, id, payload))
}

// resultUnproven reports whether a command_result may not have arrived: one
// still waits for the routine, or no ACK of a later event proves the last
// one queued yet. With no later event (a command re-delivered after a
// reconnect) the core re-delivers it to the next process, which replays
// the journaled result.
func (s *sender) resultUnproven(sum state.Summary) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.results) > 0 {
		return true
	}
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
