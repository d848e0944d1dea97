package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// Defaults of the runnerd flags (prp.md §13).
const (
	// defaultMaxOutboxBytes is --max-outbox-bytes' default (prp.md §13: 64 KiB).
	defaultMaxOutboxBytes = 64 * 1024
	// defaultP0ReserveBytes is --p0-reserve-bytes' default (prp.md §13: 32 KiB).
	defaultP0ReserveBytes = 32 * 1024
	// defaultMaxFrameBytes is --max-frame-bytes' default (prp.md §13: 1 MiB).
	defaultMaxFrameBytes = 1024 * 1024
	// ackPersistInterval: the ACK cursor is written on its own after this
	// many unsaved advances (prp.md §8.4, §12: 16).
	ackPersistInterval = 16
	// ackIdleFlush: an unsaved ACK cursor is written on its own once this
	// long has passed since its first unsaved advance without another
	// durable write (prp.md §8.4, §12: 100 ms). Until then it rides on the
	// next write; an older cursor after a crash only causes a
	// byte-identical replay the core deduplicates.
	ackIdleFlush = 100 * time.Millisecond

	// A state write that meets a full disk (ENOSPC, EDQUOT) is storage
	// pressure (durability.md §6.2): the write is redone whole from memory
	// until it succeeds, the wait is aborted (Abort), or pressureMaxWait
	// has passed, and only then does the store poison itself.
	// pressureRetryFirst is the first pause (the reference's floor between
	// attempts is 25 ms); it doubles up to pressureRetryMax.
	pressureRetryFirst = 25 * time.Millisecond
	pressureRetryMax   = time.Second
	// pressureMaxWait bounds one write's wait for space. A lease shorter
	// than this ends the wait first (Abort on the lease's expiry); the
	// bound covers a lease the core keeps renewing while the disk stays
	// full.
	pressureMaxWait = 30 * time.Minute
)

// validIdentity checks the six durable identity fields (prp.md §3.2).
func validIdentity(id prp.Identity) bool {
	for _, s := range []string{id.RunnerInstanceID, id.EnvironmentLeaseID, id.RunID, id.NormalizedSessionID, id.TurnID, id.ItemID} {
		if !validToken(s, maxEventIDChars) {
			return false
		}
	}
	// event_<runner>_<16 digits> must fit the 160-char sourceEventId bound.
	return len(runnerSourceEventID(id.RunnerInstanceID, 0)) <= maxEventIDChars
}

// Config configures a Store.
type Config struct {
	// Dir is the state directory (--state-dir). Created 0700 if absent.
	Dir string
	// Identity is the six durable identity fields (prp.md §3.2).
	Identity prp.Identity
	// MaxOutboxBytes, P0ReserveBytes, MaxFrameBytes: zero means the default.
	MaxOutboxBytes int
	P0ReserveBytes int
	MaxFrameBytes  int
	// FrameLimit, when set, is the current connection's frame limit when
	// smaller than MaxFrameBytes (a welcome's maxFrameBytes); framelimit.go.
	FrameLimit func() int
	// Now stamps emittedAt; nil means Clock's Now.
	Now func() time.Time
	// Clock times the idle write of the ACK cursor (ackIdleFlush); nil
	// means the system clock.
	Clock clock.Clock
	// Logger receives lifecycle facts, never payloads; nil discards.
	Logger *slog.Logger
	// WriteFault (tests only) is consulted before each step of a state
	// write with the step's name ("openat", "write", "fdatasync",
	// "rename", "fsync dir"); a non-nil result stands in for that step's
	// error. Nil in production.
	WriteFault func(op string) error
}

// Summary is the lock-free view a PRP pong needs (prp.md §3.2).
type Summary struct {
	Lifecycle        Lifecycle
	AckedSourceSeq   uint64
	HighestSourceSeq uint64
	OutboxBytes      int
	// LastControllerCommandSeq and ReconnectCount feed auth_hello.resume.
	LastControllerCommandSeq uint64
	ReconnectCount           uint64
	// StoragePressure is true while a durable write waits for disk space
	// (DiskFull) or the outbox is in backpressure (pong.storagePressure,
	// durability.md §6.2 item 5).
	StoragePressure bool
	// DiskFull is true while a durable write waits for disk space; the
	// committed state is the one before that write.
	DiskFull bool
	// TurnEnded: a provider turn's terminal event is committed and the
	// runner has not cleared it yet (State.TurnEnded).
	TurnEnded bool
}

// Recovery describes what Open found.
type Recovery struct {
	// Resumed is true when an existing state file was loaded (a process
	// restart); then ReconciledSeq is the P0 runner.reconciled event.
	Resumed        bool
	ReconnectCount uint64
	ReconciledSeq  uint64
	// Indeterminate lists commands that were pending at the crash, now
	// indeterminate: report them as failed/execution_indeterminate, never re-run.
	Indeterminate []CommandResult
	// PendingTerminalDelivery: the next connection only reconciles this
	// terminal result and finishes cleanup (prp.md §9.4).
	PendingTerminalDelivery *TerminalFence
	// PendingProviderCleanup blocks every command but a new turn.stop.
	PendingProviderCleanup *TerminalFence
}

// Store owns the state directory: the store file DBName, the source of
// truth, and FileName, its header's projection for the server. Its
// methods are safe for concurrent use.
type Store struct {
	cfg Config
	log *slog.Logger
	dir *dirHandle

	// db is the open store; the fields below it describe what it and
	// FileName hold. All are guarded by mu (set during Open before the
	// store is shared).
	db *bolt.DB
	// written is the state the store file holds (the target of the last
	// committed transaction); writtenHeader its header. A step writes
	// only its difference from written.
	written       *State
	writtenHeader []byte
	// projected is the header FileName holds (nil: unknown), and
	// projectedState the state it projects.
	projected      []byte
	projectedState *State
	hdr            headerEncoder

	mu          sync.Mutex // serialises writers and guards the db fields above; held across the fsync
	failed      error      // sticky write failure: disk and memory may differ
	ackAdvances int        // ACK advances since the cursor was last written
	// idle writes an unsaved ACK cursor after ackIdleFlush (nil until the
	// first unsaved advance); idleArmed: it is scheduled. Each arming gets
	// a timer of its own and a generation (idleGen), so a callback that
	// fired before a disarm and runs after a re-arm cannot unmark the newer
	// arming. idleCalls counts callbacks not yet finished or cancelled,
	// for Close.
	idle      clock.Timer
	idleArmed bool
	idleGen   uint64
	idleCalls sync.WaitGroup
	coalesce  coalesceMark
	closed    bool

	cur atomic.Pointer[State]   // committed state; immutable
	sum atomic.Pointer[Summary] // derived from cur

	gate struct {
		// mu guards everSent and pin, so a seq is a sender's or coalescing's,
		// never both.
		mu       sync.Mutex
		everSent uint64 // highest seq handed to a sender; never decreases
		pin      uint64 // seq being coalesced by an in-flight Update (0: none)
	}

	recovery Recovery
	writes   atomic.Uint64 // durable writes done, for tests and benchmarks

	// diskFull is set while a write waits for disk space (published in the
	// summary). abort is closed by Abort to end that wait; abortOnce and
	// abortErr (written before the close) belong to it.
	diskFull  atomic.Bool
	abort     chan struct{}
	abortOnce sync.Once
	abortErr  error
	// spaceMu guards spaceWait: open while a write waits for disk space,
	// closed when that wait ends (SpaceWait).
	spaceMu   sync.Mutex
	spaceWait chan struct{}
}

// Open loads the state in cfg.Dir or creates a fresh one, and performs
// restart recovery (prp.md §9.4): pending commands become indeterminate,
// reconnectCount is incremented and a P0 runner.reconciled event is
// enqueued, in one durable write. A revoked state, or a stopped state with no
// pending fence, returns ErrExitNow: the caller exits 0 at once. A corrupt
// file returns errCorruptState and is left untouched on disk.
func Open(cfg Config) (*Store, error) {
	if cfg.MaxOutboxBytes == 0 {
		cfg.MaxOutboxBytes = defaultMaxOutboxBytes
	}
	if cfg.P0ReserveBytes == 0 {
		cfg.P0ReserveBytes = defaultP0ReserveBytes
	}
	if cfg.MaxFrameBytes == 0 {
		cfg.MaxFrameBytes = defaultMaxFrameBytes
	}
	if cfg.MaxOutboxBytes < 0 || cfg.P0ReserveBytes < 0 || cfg.P0ReserveBytes >= cfg.MaxOutboxBytes || cfg.MaxFrameBytes < 0 {
		return nil, errors.New("open state: outbox bounds must satisfy 0 <= p0 reserve < max outbox bytes")
	}
	if !validIdentity(cfg.Identity) {
		return nil, errors.New("open state: identity fields must be non-empty, at most 160 chars, without control characters")
	}
	if cfg.Now == nil {
		cfg.Now = clock.Or(cfg.Clock).Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := openDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	dir.clk, dir.fault = cfg.Clock, cfg.WriteFault
	s := &Store{cfg: cfg, log: log.With("component", "state"), dir: dir, abort: make(chan struct{})}
	if err := s.load(); err != nil {
		if s.db != nil {
			_ = s.db.Close()
		}
		dir.close()
		return nil, err
	}
	return s, nil
}

func (s *Store) stateLimit() int64 { return int64(s.cfg.MaxOutboxBytes) + stateOverheadBytes }

func (s *Store) load() error {
	if err := s.dir.removeStaleTemps(); err != nil {
		return err
	}
	st, fresh, err := s.openStore()
	if err != nil {
		return err
	}
	if fresh {
		st.sizeOutbox()
		s.publish(st)
		s.log.Info("created runner state")
		return nil
	}
	if st.Schema == WarmTransitionSchema {
		if err := st.recoverWarm(s.cfg.Identity); err != nil {
			return err
		}
	}
	if err := st.check(s.cfg); err != nil {
		return err
	}
	fenced := st.PendingTerminalDelivery != nil || st.PendingProviderCleanup != nil
	if st.Lifecycle == Revoked || (st.Lifecycle == Stopped && !fenced) {
		return fmt.Errorf("open state: lifecycle %s: %w", st.Lifecycle, ErrExitNow)
	}
	st.sizeOutbox()
	s.publish(st)
	s.gate.everSent = st.HighestSourceSeq() // anything stored may have been sent
	rec := Recovery{Resumed: true}
	err = s.Update(func(tx *Tx) error {
		rec.Indeterminate = tx.st.reconcilePending()
		tx.st.ReconnectCount++
		rec.ReconnectCount = tx.st.ReconnectCount
		seq, err := tx.Enqueue(Event{Type: prp.EventRunnerReconciled, Priority: P0,
			Payload: json.RawMessage(`{"outcome":"` + reconciledOutcome + `"}`)})
		rec.ReconciledSeq = seq
		return err
	})
	if err != nil {
		return fmt.Errorf("recover state: %w", err)
	}
	cur := s.cur.Load()
	rec.PendingTerminalDelivery = cur.PendingTerminalDelivery
	rec.PendingProviderCleanup = cur.PendingProviderCleanup
	s.recovery = rec
	s.log.Info("recovered runner state", "reconnectCount", rec.ReconnectCount,
		"indeterminateCommands", len(rec.Indeterminate), "outboxEvents", len(cur.Outbox))
	return nil
}

func (s *Store) fresh() *State {
	id := s.cfg.Identity
	st := &State{
		Schema: schema, RunnerInstanceID: id.RunnerInstanceID, EnvironmentLeaseID: id.EnvironmentLeaseID,
		RunID: id.RunID, NormalizedSessionID: id.NormalizedSessionID, TurnID: id.TurnID, ItemID: id.ItemID,
		Lifecycle: Connecting, NextSourceSeq: 1,
		MaxOutboxBytes: s.cfg.MaxOutboxBytes, P0ReserveBytes: s.cfg.P0ReserveBytes,
	}
	st.normalize()
	st.sizeOutbox()
	return st
}

// Recovery reports what Open found.
func (s *Store) Recovery() Recovery { return s.recovery }

// Summary returns the pong view without taking the write lock.
func (s *Store) Summary() Summary { return *s.sum.Load() }

// Identity is the committed state's PRP run identity (the semantic tool
// events' correlation, tools.md §3 item 3).
func (s *Store) Identity() prp.Identity { return s.cur.Load().identity() }

// Snapshot returns a private deep copy of the committed state.
func (s *Store) Snapshot() *State { return s.cur.Load().Clone() }

// The accessors below read one field of the committed state and copy only
// what they return: the hot paths of the runner (a welcome, a command, an
// ACK) need one value, and Snapshot clones the outbox and the journal.

// PendingTerminalDelivery returns a copy of the terminal fence, or nil.
func (s *Store) PendingTerminalDelivery() *TerminalFence {
	f := s.cur.Load().PendingTerminalDelivery
	if f == nil {
		return nil
	}
	c := *f
	return &c
}

// Result returns a copy of the journal entry of commandID; ok is false when
// the journal does not hold it (never seen, or compacted).
func (s *Store) Result(commandID string) (res CommandResult, ok bool) {
	res, ok = s.cur.Load().ProcessedCommands[commandID]
	res.Result = bytes.Clone(res.Result)
	return res, ok
}

// LastConnectionProtocolVersion returns the protocol version of the last
// authenticated connection; ok is false before the first one.
func (s *Store) LastConnectionProtocolVersion() (version int, ok bool) {
	v := s.cur.Load().LastConnectionProtocolVersion
	if v == nil {
		return 0, false
	}
	return *v, true
}

// Cursors are the sequence cursors auth_hello's resume carries (prp.md §3.2).
type Cursors struct {
	LastControllerCommandSeq uint64
	NextSourceSeq            uint64
	AckedSourceSeq           uint64
}

// Cursors returns the committed sequence cursors.
func (s *Store) Cursors() Cursors {
	st := s.cur.Load()
	return Cursors{LastControllerCommandSeq: st.LastControllerCommandSeq, NextSourceSeq: st.NextSourceSeq, AckedSourceSeq: st.AckedSourceSeq}
}

// Record decodes the committed extension record name into v (see
// State.Record) without copying the rest of the state.
func (s *Store) Record(name string, v any) (ok bool, err error) { return s.cur.Load().Record(name, v) }

// Unacked returns every committed, unacknowledged outbox event in order.
// The slice is the caller's; the envelopes must not be modified.
func (s *Store) Unacked() []OutboxEvent { return append([]OutboxEvent(nil), s.cur.Load().Outbox...) }

// Unsent returns the committed outbox events with sourceSeq > after, in
// order, for the caller to send; once returned, an event's bytes are fixed
// (no later P2 event merges into it). Pass the ACK cursor after a reconnect
// to replay the whole unacknowledged suffix.
func (s *Store) Unsent(after uint64) []OutboxEvent {
	s.gate.mu.Lock()
	defer s.gate.mu.Unlock()
	var out []OutboxEvent
	ob := s.cur.Load().Outbox
	// The outbox is contiguous by sourceSeq: the events at or below after
	// are skipped by index, so a send costs nothing per unsent-and-kept
	// event before it.
	if len(ob) > 0 && after >= ob[0].SourceSeq {
		ob = ob[min(after-ob[0].SourceSeq+1, uint64(len(ob))):]
	}
	for _, e := range ob {
		if e.SourceSeq <= after {
			continue
		}
		if s.gate.pin != 0 && e.SourceSeq >= s.gate.pin {
			break
		}
		out = append(out, e)
		s.gate.everSent = max(s.gate.everSent, e.SourceSeq)
	}
	return out
}

// pinUnsent claims seq for coalescing if no sender has seen it.
func (s *Store) pinUnsent(seq uint64) bool {
	s.gate.mu.Lock()
	defer s.gate.mu.Unlock()
	if seq <= s.gate.everSent {
		return false
	}
	s.gate.pin = seq
	return true
}

func (s *Store) unpin() {
	s.gate.mu.Lock()
	s.gate.pin = 0
	s.gate.mu.Unlock()
}

// Update applies fn to a private copy of the state and commits the result
// with one durable write. If fn fails nothing is written, except that a
// bound violation inside fn (ErrBackpressure, ErrP0StorageExhausted) still
// commits its lifecycle change and diagnostic on the previous state. A
// write that meets a full disk waits for space (see commit); a failed
// write poisons the store: every later call returns that error.
// fn must not call Update, ApplyAck, Flush or Close (they take the same lock).
func (s *Store) Update(fn func(tx *Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	base := s.cur.Load()
	tx := &Tx{s: s, st: base.cloneShared(), coalesce: s.coalesce, shared: base.HighestSourceSeq()}
	defer s.unpin()
	if err := fn(tx); err != nil {
		if tx.bound != nil {
			st := base.cloneShared()
			tx.bound.apply(st)
			if werr := s.commit(st); werr != nil {
				return errors.Join(err, werr)
			}
			s.coalesce = coalesceMark{}
		}
		return err
	}
	if err := s.commit(tx.st); err != nil {
		return err
	}
	s.coalesce = tx.coalesce
	return nil
}

// ApplyAck applies a cumulative ACK (prp.md §8.4): trims the outbox and
// advances the cursor in memory at once, so the bounds see the freed bytes.
// ErrAckBehindCursor and ErrAckBeyondProduced are fatal protocol errors and
// change nothing. The ACK never writes because it empties the outbox: the
// cursor rides on the next durable write (every write saves the whole
// in-memory state), or is written on its own after ackPersistInterval
// unsaved advances or ackIdleFlush without another write. Until then the
// file keeps the older cursor with the outbox events above it, so a crash
// replays exactly that suffix byte for byte, which the core admits as
// duplicates. persisted reports whether this call wrote. It takes the
// write lock, so it waits for an in-flight write: never call it from the
// reader that answers pings.
func (s *Store) ApplyAck(seq uint64, protocolVersion int) (persisted bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return false, err
	}
	st := s.cur.Load().cloneShared()
	advanced, err := st.applyAck(seq, protocolVersion)
	if err != nil || !advanced {
		return false, err
	}
	s.ackAdvances++
	if s.ackAdvances < ackPersistInterval {
		s.publish(st)
		s.armIdleLocked()
		return false, nil
	}
	if err := s.commit(st); err != nil {
		return false, err
	}
	return true, nil
}

// armIdleLocked schedules the idle write of the cursor unless one is
// scheduled. Called with mu held.
func (s *Store) armIdleLocked() {
	if s.idleArmed {
		return
	}
	s.idleArmed = true
	s.idleGen++
	gen := s.idleGen
	s.idleCalls.Add(1)
	s.idle = clock.Or(s.cfg.Clock).AfterFunc(ackIdleFlush, func() { s.idleFlush(gen) })
}

// disarmIdleLocked cancels the idle write: a write just saved the cursor.
// A callback that already started finds nothing to write. Called with mu
// held.
func (s *Store) disarmIdleLocked() {
	if !s.idleArmed {
		return
	}
	s.idleArmed = false
	if s.idle.Stop() {
		s.idleCalls.Done()
	}
}

// idleFlush is the idle timer's callback: it writes the cursor if no write
// has saved it since it was scheduled. A failure poisons the store like
// any write; the next call reports it.
func (s *Store) idleFlush(gen uint64) {
	defer s.idleCalls.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.idleGen || !s.idleArmed {
		return // disarmed before it ran; a newer arming has its own timer
	}
	s.idleArmed = false
	if s.usable() != nil || s.ackAdvances == 0 {
		return
	}
	_ = s.commit(s.cur.Load())
}

// flush writes the in-memory ACK cursor if it is ahead of the file.
func (s *Store) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if s.ackAdvances == 0 {
		return nil
	}
	return s.commit(s.cur.Load())
}

// Close flushes the ACK cursor and releases the directory. Later calls fail
// with errClosed.
func (s *Store) Close() error {
	err := s.flush()
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.disarmIdleLocked()
		if s.failed == nil {
			err = errors.Join(err, s.compactIfSparse())
		}
		if s.db != nil {
			err = errors.Join(err, s.db.Close())
			s.db = nil
		}
		s.dir.close()
	}
	s.mu.Unlock()
	// A callback that fired before the disarm finds the store closed.
	s.idleCalls.Wait()
	if errors.Is(err, errClosed) {
		return nil
	}
	return err
}

func (s *Store) usable() error {
	if s.closed {
		return errClosed
	}
	return s.failed
}

// commit makes st durable and publishes it. Called with mu held (or
// during Open). One commit is one store transaction holding st's
// difference from what the store holds (putDelta), then FileName's
// projection of the header when it changed; only then is st published,
// so nothing depending on it is released before both are durable. A full
// disk (ENOSPC, EDQUOT at any step) is storage pressure: the summary
// reports it and the failed step is redone whole from memory (a failed
// store transaction leaves the store as it was, so it is rerun; the
// projection is rewritten through a new temp file, never a lone sync,
// which Linux may report clean after losing the data) until it succeeds,
// Abort ends the wait, or pressureMaxWait passes.
func (s *Store) commit(st *State) error {
	header, err := s.hdr.encode(st)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if int64(len(header)) > stateOverheadBytes {
		return fmt.Errorf("save state: %w", errStateTooLarge)
	}
	err = s.persist(st, header)
	if err != nil && diskFullErr(err) {
		err = s.waitForSpace(func() error { return s.persist(st, header) }, err)
	}
	if err != nil {
		s.failed = fmt.Errorf("save state: %w", err)
		s.log.Error("runner state write failed; store is unusable", "err", err)
		return s.failed
	}
	s.writes.Add(1)
	s.publish(st)
	// Every write saves the whole in-memory state, cursor included.
	s.ackAdvances = 0
	s.disarmIdleLocked()
	return nil
}

// persist writes what of st is not yet durable: the store transaction
// (unless the store holds st already), then the projection (unless
// FileName holds it already). Each part is redone whole on a retry.
func (s *Store) persist(st *State, header []byte) error {
	if s.written != st {
		if err := s.writeDelta(st, header); err != nil {
			return err
		}
		killPoint(KillStoreCommitted)
	}
	if !bytes.Equal(s.projected, header) {
		syncDir := s.projectedState == nil || crashVisibleChange(s.projectedState, st)
		if err := s.dir.write(header, syncDir); err != nil {
			return err
		}
		s.projected, s.projectedState = header, st
		killPoint(KillProjected)
	}
	return nil
}

// writeDelta commits st's difference from the store's content in one
// transaction. A transaction that changes nothing is not committed.
func (s *Store) writeDelta(st *State, header []byte) error {
	if s.db == nil {
		return errors.New("commit state store: the store is not open")
	}
	tx, err := s.db.Begin(true)
	if err != nil {
		return fmt.Errorf("begin state store transaction: %w", err)
	}
	changed, err := putDelta(tx, s.written, st, s.writtenHeader, header)
	if err == nil && changed {
		if err = s.dir.injected("store commit"); err == nil {
			err = tx.Commit()
		}
	}
	if err != nil || !changed {
		_ = tx.Rollback()
	}
	if err != nil {
		return fmt.Errorf("commit state store: %w", err)
	}
	s.written, s.writtenHeader = st, header
	return nil
}

// waitForSpace redoes the write (redo), which failed with the full-disk
// error first, with doubling pauses (pressureRetryFirst up to
// pressureRetryMax) until it succeeds or fails otherwise, Abort is called,
// or pressureMaxWait has passed. The summary reports the pressure
// meanwhile. Called with mu held.
func (s *Store) waitForSpace(redo func() error, first error) error {
	clk := clock.Or(s.cfg.Clock)
	s.setDiskFull(true)
	defer s.setDiskFull(false)
	s.log.Warn("runner state write blocked by a full disk; retrying", "err", first)
	deadline := clk.Now().Add(pressureMaxWait)
	pause := pressureRetryFirst
	err := first
	for attempt := 2; ; attempt++ {
		left := deadline.Sub(clk.Now())
		if left <= 0 {
			return fmt.Errorf("storage pressure: no space within %s: %w", pressureMaxWait, err)
		}
		t := clk.NewTimer(min(pause, left))
		select {
		case <-t.C():
		case <-s.abort:
			t.Stop()
			return errors.Join(fmt.Errorf("storage pressure: %w", ErrWriteAborted), s.abortErr, err)
		}
		pause = min(2*pause, pressureRetryMax)
		err = redo()
		if err == nil {
			s.log.Info("runner state write completed after a full disk", "attempts", attempt)
			return nil
		}
		if !diskFullErr(err) {
			return err
		}
	}
}

// Abort ends a write's wait for disk space, now or when one starts: that
// write, and every later one, fails with ErrWriteAborted and cause, and
// the store keeps the state committed before it. For a runner that is
// stopping (a revoke, a stop command, the lease's end) while a write is
// blocked, so it can unwind without persisting or reporting what it
// cannot persist. A write that does not meet a full disk is unaffected.
func (s *Store) Abort(cause error) {
	s.abortOnce.Do(func() {
		s.abortErr = cause
		close(s.abort)
	})
}

func (s *Store) setDiskFull(v bool) {
	s.spaceMu.Lock()
	switch {
	case v && s.spaceWait == nil:
		s.spaceWait = make(chan struct{})
	case !v && s.spaceWait != nil:
		close(s.spaceWait)
		s.spaceWait = nil
	}
	s.spaceMu.Unlock()
	s.diskFull.Store(v)
	s.publish(s.cur.Load())
}

// SpaceWait returns a channel closed when the current wait for disk space
// ends (the write completed, failed or was aborted), or nil when no write
// waits. It never blocks: a caller that would otherwise queue on the
// store's lock behind the blocked write (an ACK, durability.md §6.2 item
// 2) waits on the channel instead, with its own bound.
func (s *Store) SpaceWait() <-chan struct{} {
	s.spaceMu.Lock()
	defer s.spaceMu.Unlock()
	if s.spaceWait == nil {
		return nil
	}
	return s.spaceWait
}

// diskFullErr reports a write failure for lack of space: no blocks, or the
// user's quota.
func diskFullErr(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func (s *Store) publish(st *State) {
	if st == nil {
		return // a write blocked during Open: nothing committed yet
	}
	s.cur.Store(st)
	full := s.diskFull.Load()
	s.sum.Store(&Summary{
		Lifecycle: st.Lifecycle, AckedSourceSeq: st.AckedSourceSeq, HighestSourceSeq: st.HighestSourceSeq(),
		OutboxBytes: st.outboxBytes(), LastControllerCommandSeq: st.LastControllerCommandSeq,
		ReconnectCount: st.ReconnectCount, StoragePressure: st.Backpressure || full, DiskFull: full,
		TurnEnded: st.TurnEnded,
	})
}

func (s *Store) now() time.Time { return s.cfg.Now() }

// boundFact is the lifecycle change of a bound violation, committed even
// when the transaction that hit it is abandoned.
type boundFact struct {
	lifecycle    Lifecycle
	backpressure bool
	diagnostic   string
}

func (b *boundFact) apply(st *State) {
	st.Lifecycle = b.lifecycle
	st.Backpressure = b.backpressure
	st.addDiagnostic(b.diagnostic)
}

func (st *State) addDiagnostic(msg string) {
	st.Diagnostics = append(st.Diagnostics, redactText(msg))
	if n := len(st.Diagnostics); n > maxDiagnostics {
		st.Diagnostics = append([]string(nil), st.Diagnostics[n-maxDiagnostics:]...)
	}
}
