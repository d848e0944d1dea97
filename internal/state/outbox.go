package state

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// Wire constants of the event envelope (prp.md §3.2, §8.1).
const (
	// protocolName is the PRP protocol name (prp.md §0).
	protocolName = "paperclip.runner"
	// MaxProtocolVersion is the highest PRP version runnerd speaks (prp.md §2.5).
	MaxProtocolVersion = 2
	// executorEventDomain prefixes the executor sourceEventId hash (prp.md §8.1).
	executorEventDomain = "paperclip.executor-event.v1\x00"
	// emittedAtLayout is RFC 3339 UTC with milliseconds (a JSON Schema date-time).
	emittedAtLayout = "2006-01-02T15:04:05.000Z07:00"
)

// Payload values of the events the store emits itself, runner.reconciled
// and runner.diagnostic (prp.md §8.3, §8.2).
const (
	// reconciledOutcome is runner.reconciled's payload outcome after a restart (§9.4).
	reconciledOutcome = "same_durable_session_resumed"
	// codeEventRequiresV2 marks a v2-only event downgraded on a v1 link (§8.2).
	codeEventRequiresV2 = "event_requires_prp_v2"
	// CodeP0StorageExhausted is recorded when P0 exceeds the hard limit (§9.3).
	CodeP0StorageExhausted = "p0_storage_exhausted"
)

// Priority is an event priority (prp.md §8.1).
type Priority uint8

// Priorities (prp.md §8.1).
const (
	// P0: facts that may use the reserve (lifecycle, terminal, failure diagnostics).
	P0 Priority = 0
	// P1: normal events.
	P1 Priority = 1
	// P2: coalescable deltas.
	P2 Priority = 2
)

// Event is an event to enqueue. Payload must be a JSON object; it is
// sanitised before it is stored.
type Event struct {
	Type     string
	Priority Priority
	Payload  json.RawMessage
	// CoalesceKey (P2 only, runner events only): when the newest outbox event
	// is an unsent P2 event of the same type and key, this event merges into
	// it instead of taking a new sequence number (prp.md §9.3). The string
	// fields named in concatFields concatenate; every other field takes the
	// newest value. The merged payload is sanitised again, so a credential
	// split across two deltas is still redacted.
	CoalesceKey string
	// ExecutorID, when set, makes Enqueue append this as an executor
	// event under that id (EnqueueExecutor, prp.md §9.4); it never
	// coalesces.
	ExecutorID string
}

// envelope is the PRP event envelope in the reference's field order.
type envelope struct {
	Protocol            string       `json:"protocol"`
	Version             int          `json:"version"`
	Kind                string       `json:"kind"`
	RunnerInstanceID    string       `json:"runnerInstanceId"`
	EnvironmentLeaseID  string       `json:"environmentLeaseId"`
	RunID               string       `json:"runId"`
	NormalizedSessionID string       `json:"normalizedSessionId"`
	TurnID              string       `json:"turnId"`
	ItemID              string       `json:"itemId"`
	Payload             eventPayload `json:"payload"`
}

type eventPayload struct {
	Schema              string          `json:"schema"`
	SourceEventID       string          `json:"sourceEventId"`
	SourceSeq           uint64          `json:"sourceSeq"`
	SourceInstanceID    string          `json:"sourceInstanceId"`
	SourceKind          string          `json:"sourceKind"`
	RunID               string          `json:"runId"`
	NormalizedSessionID string          `json:"normalizedSessionId"`
	TurnID              string          `json:"turnId"`
	ItemID              string          `json:"itemId"`
	EventType           string          `json:"eventType"`
	SchemaVersion       int             `json:"schemaVersion"`
	Priority            Priority        `json:"priority"`
	EmittedAt           string          `json:"emittedAt"`
	Payload             json.RawMessage `json:"payload"`
}

// Wire returns the bytes to send on a connection of the given PRP version.
// On the version the event was built for they are the stored bytes, so a
// replay is byte-identical. On a v1 connection a v2-only event goes out as
// runner.diagnostic {reasonCode: event_requires_prp_v2, originalEventType}
// with the same sequence and id, so the v1 cumulative ACK can pass it; its
// real payload is never copied (prp.md §8.2).
func (e OutboxEvent) Wire(version int) ([]byte, error) {
	// The common case sends the stored bytes: read only the two numbers
	// that decide it (every event is sent at least once).
	var head struct {
		Version int `json:"version"`
		Payload struct {
			SchemaVersion int `json:"schemaVersion"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(e.Envelope, &head); err != nil {
		return nil, fmt.Errorf("decode stored envelope: %w", errCorruptState)
	}
	downgrade := version < 2 && head.Payload.SchemaVersion >= 2
	if head.Version == version && !downgrade {
		return e.Envelope, nil
	}
	var env envelope
	if err := json.Unmarshal(e.Envelope, &env); err != nil {
		return nil, fmt.Errorf("decode stored envelope: %w", errCorruptState)
	}
	env.Version = version
	if downgrade {
		p, err := jsonenc.Marshal(map[string]string{"reasonCode": codeEventRequiresV2, "originalEventType": e.EventType})
		if err != nil {
			return nil, err
		}
		env.Payload.Schema = "paperclip.prp.event.v1"
		env.Payload.EventType = prp.EventRunnerDiagnostic
		env.Payload.SchemaVersion = 1
		env.Payload.Payload = p
	}
	return jsonenc.Marshal(env)
}

// sourceEventID returns the sourceEventId inside the stored envelope.
func (e OutboxEvent) sourceEventID() string {
	var env struct {
		Payload struct {
			SourceEventID string `json:"sourceEventId"`
		} `json:"payload"`
	}
	_ = json.Unmarshal(e.Envelope, &env)
	return env.Payload.SourceEventID
}

// runnerSourceEventID is the sourceEventId of a runner event (prp.md §8.1).
func runnerSourceEventID(runnerInstanceID string, seq uint64) string {
	return fmt.Sprintf("event_%s_%016d", runnerInstanceID, seq)
}

// ExecutorSourceEventID is the sourceEventId of an executor event (prp.md §8.1).
func ExecutorSourceEventID(runnerInstanceID, executorEventID string) string {
	sum := sha256.Sum256([]byte(executorEventDomain + runnerInstanceID + "\x00" + executorEventID))
	return "event_executor_" + hex.EncodeToString(sum[:])
}

func validToken(s string, limit int) bool {
	if s == "" || len(s) > limit {
		return false
	}
	return !strings.ContainsFunc(s, unicode.IsControl)
}

// coalesceMark remembers the newest outbox event that later P2 events may
// merge into. It lives in memory only: after a restart nothing merges into
// an event that may have been sent.
type coalesceMark struct {
	seq       uint64
	eventType string
	key       string
}

// Enqueue appends a runner event (sourceEventId event_<runner>_<seq>) and
// returns its sourceSeq. The event is durable when the Update commits.
// A bound violation returns ErrBackpressure or ErrP0StorageExhausted; the
// event is dropped but the lifecycle change and diagnostic are committed even
// when fn then fails (prp.md §9.3).
func (tx *Tx) Enqueue(ev Event) (uint64, error) {
	if ev.ExecutorID != "" {
		seq, _, err := tx.enqueueExecutor(ev.ExecutorID, ev)
		return seq, err
	}
	if seq, ok, err := tx.tryCoalesce(ev); ok || err != nil {
		return seq, err
	}
	id := runnerSourceEventID(tx.st.RunnerInstanceID, tx.st.NextSourceSeq)
	seq, err := tx.appendEvent(id, ev)
	if err != nil {
		return 0, err
	}
	tx.coalesce = coalesceMark{}
	if ev.Priority == P2 && ev.CoalesceKey != "" {
		tx.coalesce = coalesceMark{seq: seq, eventType: ev.Type, key: ev.CoalesceKey}
	}
	return seq, nil
}

// buildEnvelope makes the compact envelope bytes of one event.
func (tx *Tx) buildEnvelope(sourceEventID string, seq uint64, ev Event, clean json.RawMessage) ([]byte, error) {
	st := tx.st
	schemaVersion := prp.EventRuleOf(ev.Type).SchemaVersion()
	version := tx.EventProtocolVersion()
	return jsonenc.Marshal(envelope{
		Protocol: protocolName, Version: version, Kind: "event",
		RunnerInstanceID: st.RunnerInstanceID, EnvironmentLeaseID: st.EnvironmentLeaseID,
		RunID: st.RunID, NormalizedSessionID: st.NormalizedSessionID, TurnID: st.TurnID, ItemID: st.ItemID,
		Payload: eventPayload{
			Schema:        fmt.Sprintf("paperclip.prp.event.v%d", schemaVersion),
			SourceEventID: sourceEventID, SourceSeq: seq,
			SourceInstanceID: st.RunnerInstanceID, SourceKind: "runner",
			RunID: st.RunID, NormalizedSessionID: st.NormalizedSessionID, TurnID: st.TurnID, ItemID: st.ItemID,
			EventType: ev.Type, SchemaVersion: schemaVersion, Priority: ev.Priority,
			EmittedAt: tx.s.now().UTC().Format(emittedAtLayout),
			Payload:   clean,
		},
	})
}

func (tx *Tx) checkEvent(ev Event) error {
	if !validToken(ev.Type, maxEventIDChars) {
		return fmt.Errorf("enqueue event: %w: bad event type", errInvalidEvent)
	}
	if ev.Priority > P2 {
		return fmt.Errorf("enqueue event: %w: bad priority", errInvalidEvent)
	}
	return nil
}

// appendEvent checks bounds and appends one new event.
func (tx *Tx) appendEvent(sourceEventID string, ev Event) (uint64, error) {
	b, err := tx.buildEvent(sourceEventID, tx.st.NextSourceSeq, ev)
	if err != nil {
		return 0, err
	}
	if err := tx.checkBounds(ev.Priority, len(b.env), 0); err != nil {
		return 0, err
	}
	return tx.appendBuilt(b), nil
}

// builtEvent is an event checked, sanitised and encoded for one sequence
// number, not yet in the outbox.
type builtEvent struct {
	ev    Event
	seq   uint64
	clean json.RawMessage
	env   []byte
}

// buildEvent checks, sanitises and encodes ev as sequence seq. An
// output.body.chunk the sanitiser would change is refused: its digests
// cover its exact text (workspace.md §7.4).
func (tx *Tx) buildEvent(sourceEventID string, seq uint64, ev Event) (builtEvent, error) {
	if err := tx.checkEvent(ev); err != nil {
		return builtEvent{}, err
	}
	if !validToken(sourceEventID, maxEventIDChars) {
		return builtEvent{}, fmt.Errorf("enqueue event: %w: source event id too long", errInvalidEvent)
	}
	clean, changed, err := sanitizeJSONChanged(ev.Payload)
	if err != nil {
		return builtEvent{}, fmt.Errorf("enqueue event: %w", err)
	}
	if changed && ev.Type == prp.EventOutputBodyChunk {
		return builtEvent{}, fmt.Errorf("enqueue event: %w", ErrChunkRewritten)
	}
	env, err := tx.buildEnvelope(sourceEventID, seq, ev, clean)
	if err != nil {
		return builtEvent{}, fmt.Errorf("encode envelope: %w", err)
	}
	return builtEvent{ev: ev, seq: seq, clean: clean, env: env}, nil
}

// appendBuilt appends an event built for the next sequence number.
func (tx *Tx) appendBuilt(b builtEvent) uint64 {
	ev, seq, env := b.ev, b.seq, b.env
	tx.st.NextSourceSeq++
	tx.st.Outbox = append(tx.st.Outbox, OutboxEvent{
		SourceSeq: seq, Priority: ev.Priority, EventType: ev.Type, Envelope: env, ByteSize: len(env),
	})
	tx.st.resizeOutbox(len(env))
	tx.st.PeakOutboxBytes = max(tx.st.PeakOutboxBytes, tx.st.outboxBytes())
	rule := prp.EventRuleOf(ev.Type)
	if rule.EndsTurn {
		tx.st.TurnEnded = true
	}
	if fam := rule.V2Family; fam != "" {
		if tx.st.V2ReplayEvents == nil {
			tx.st.V2ReplayEvents = map[string]V2ReplayEvent{}
		}
		tx.st.V2ReplayEvents[fam] = V2ReplayEvent{SourceSeq: seq, Priority: ev.Priority, EventType: ev.Type, Payload: b.clean}
	}
	return seq
}

// EnqueueGroup appends evs as runner events in order, all or none: a body's
// chunks and the event that carries it (workspace.md §7.4). It refuses with
// ErrGroupDoesNotFit, storing nothing and changing no lifecycle, a group of
// more than maxEvents events, an event whose sealed frame exceeds the frame
// limit, or a group that does not fit the non-P0 room. A P0 or executor
// event has no place in a group (it would need the reserve or the receipt
// journal): it is refused as invalid. No event of the group coalesces, and
// none is merged into later.
func (tx *Tx) EnqueueGroup(evs []Event, maxEvents int) ([]uint64, error) {
	if len(evs) == 0 || len(evs) > maxEvents {
		return nil, fmt.Errorf("enqueue group of %d: %w", len(evs), ErrGroupDoesNotFit)
	}
	built := make([]builtEvent, 0, len(evs))
	total := 0
	for i, ev := range evs {
		if ev.Priority == P0 || ev.ExecutorID != "" {
			return nil, fmt.Errorf("enqueue group: %w: P0 and executor events go alone", errInvalidEvent)
		}
		ev.CoalesceKey = ""
		seq := tx.st.NextSourceSeq + uint64(i)
		b, err := tx.buildEvent(runnerSourceEventID(tx.st.RunnerInstanceID, seq), seq, ev)
		if err != nil {
			return nil, err
		}
		if !tx.s.frameFits(len(b.env)) {
			return nil, fmt.Errorf("enqueue group: %w: an event exceeds the frame limit", ErrGroupDoesNotFit)
		}
		total += len(b.env)
		built = append(built, b)
	}
	cfg := tx.s.cfg
	if tx.st.outboxBytes()+total > cfg.MaxOutboxBytes-cfg.P0ReserveBytes {
		return nil, fmt.Errorf("enqueue group of %d bytes: %w", total, ErrGroupDoesNotFit)
	}
	seqs := make([]uint64, len(built))
	for i, b := range built {
		seqs[i] = tx.appendBuilt(b)
	}
	tx.coalesce = coalesceMark{}
	return seqs, nil
}

// EventProtocolVersion is the PRP version the events of this transaction
// are built for: the last connection's, or the highest runnerd speaks.
func (tx *Tx) EventProtocolVersion() int {
	if v := tx.st.LastConnectionProtocolVersion; v != nil && *v >= 1 && *v <= MaxProtocolVersion {
		return *v
	}
	return MaxProtocolVersion
}

// checkBounds applies the outbox bounds to an event of size bytes that
// replaces replaced bytes (prp.md §9.3).
func (tx *Tx) checkBounds(p Priority, size, replaced int) error {
	cfg := tx.s.cfg
	if !tx.s.frameFits(size) {
		return fmt.Errorf("enqueue event: %w", ErrEventTooLarge)
	}
	projected := tx.st.outboxBytes() - replaced + size
	if p != P0 && projected > cfg.MaxOutboxBytes-cfg.P0ReserveBytes {
		tx.setBound(Backpressure, true, "outbox soft limit reached; non-P0 event rejected")
		return fmt.Errorf("enqueue event: %w", ErrBackpressure)
	}
	if projected > cfg.MaxOutboxBytes {
		tx.setBound(Unrecoverable, tx.st.Backpressure, CodeP0StorageExhausted+": P0 outbox reserve exhausted; operator recovery is required")
		return fmt.Errorf("enqueue event: %w", ErrP0StorageExhausted)
	}
	return nil
}

// tryCoalesce merges a P2 event into the newest unsent P2 event of the same
// type and key. ok reports whether it merged.
func (tx *Tx) tryCoalesce(ev Event) (seq uint64, ok bool, err error) {
	m := tx.coalesce
	if ev.Priority != P2 || ev.CoalesceKey == "" || m.seq == 0 || m.eventType != ev.Type || m.key != ev.CoalesceKey {
		return 0, false, nil
	}
	n := len(tx.st.Outbox)
	if n == 0 || tx.st.Outbox[n-1].SourceSeq != m.seq {
		return 0, false, nil
	}
	if !tx.s.pinUnsent(m.seq) {
		return 0, false, nil // already handed to the sender: its bytes are fixed
	}
	if err := tx.checkEvent(ev); err != nil {
		return 0, false, err
	}
	clean, err := sanitizeJSON(ev.Payload)
	if err != nil {
		return 0, false, fmt.Errorf("enqueue event: %w", err)
	}
	last := tx.st.Outbox[n-1]
	var env envelope
	if err := json.Unmarshal(last.Envelope, &env); err != nil {
		return 0, false, fmt.Errorf("decode stored envelope: %w", errCorruptState)
	}
	merged, err := mergeDelta(env.Payload.Payload, clean)
	if err == nil {
		merged, err = sanitizeJSON(merged)
	}
	if err != nil {
		return 0, false, nil // not mergeable: append instead
	}
	env.Payload.Payload = merged
	env.Payload.EmittedAt = tx.s.now().UTC().Format(emittedAtLayout)
	b, err := jsonenc.Marshal(env)
	if err != nil {
		return 0, false, fmt.Errorf("encode envelope: %w", err)
	}
	if !tx.s.frameFits(len(b)) {
		return 0, false, nil // too big to merge: start a new event
	}
	if err := tx.checkBounds(P2, len(b), last.ByteSize); err != nil {
		return 0, false, err
	}
	tx.st.resizeOutbox(len(b) - last.ByteSize)
	last.Envelope, last.ByteSize = b, len(b)
	if last.SourceSeq <= tx.shared {
		// The published state holds this element in the shared array
		// (cloneShared): the outbox gets an array of its own first.
		tx.st.Outbox = append(slices.Clip(tx.st.Outbox[:n-1]), last)
	} else {
		tx.st.Outbox[n-1] = last
	}
	tx.st.PeakOutboxBytes = max(tx.st.PeakOutboxBytes, tx.st.outboxBytes())
	if prp.EventRuleOf(ev.Type).EndsTurn {
		tx.st.TurnEnded = true
	}
	return last.SourceSeq, true, nil
}

// concatFields are the payload fields whose strings a merge concatenates:
// "text" is item.delta's text (the reference fixture phase-01
// happy-path.json), "delta" the generic delta field.
var concatFields = map[string]bool{"text": true, "delta": true}

// mergeDelta merges next into prev: concatFields strings concatenate,
// other top-level fields take next's value.
func mergeDelta(prev, next json.RawMessage) (json.RawMessage, error) {
	var a, b map[string]json.RawMessage
	if err := json.Unmarshal(prev, &a); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(next, &b); err != nil {
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(a)+len(b))
	maps.Copy(out, a)
	for k, v := range b {
		if concatFields[k] {
			var ds, dn string
			if json.Unmarshal(a[k], &ds) == nil && json.Unmarshal(v, &dn) == nil {
				joined, err := jsonenc.Marshal(ds + dn)
				if err != nil {
					return nil, err
				}
				out[k] = joined
				continue
			}
		}
		out[k] = v
	}
	return jsonenc.Marshal(out)
}

// applyAck applies a cumulative ACK (prp.md §8.4). It reports whether the
// cursor advanced.
func (st *State) applyAck(seq uint64, protocolVersion int) (bool, error) {
	if seq < st.AckedSourceSeq {
		return false, fmt.Errorf("apply ack %d (cursor %d): %w", seq, st.AckedSourceSeq, ErrAckBehindCursor)
	}
	if seq > st.HighestSourceSeq() {
		return false, fmt.Errorf("apply ack %d (produced %d): %w", seq, st.HighestSourceSeq(), ErrAckBeyondProduced)
	}
	if seq == st.AckedSourceSeq {
		return false, nil
	}
	st.AckedSourceSeq = seq
	i, freed := 0, 0
	for i < len(st.Outbox) && st.Outbox[i].SourceSeq <= seq {
		freed += st.Outbox[i].ByteSize
		i++
	}
	// A reslice, not a copy: the array is shared (cloneShared).
	st.Outbox = st.Outbox[i:]
	st.resizeOutbox(-freed)
	if protocolVersion >= 2 {
		for fam, e := range st.V2ReplayEvents {
			if e.SourceSeq <= seq {
				delete(st.V2ReplayEvents, fam)
			}
		}
	}
	if st.Backpressure && st.outboxBytes() < st.MaxOutboxBytes-st.P0ReserveBytes {
		st.Backpressure = false
		if st.Lifecycle == Backpressure {
			st.Lifecycle = Ready
		}
	}
	return true, nil
}

// ApplyAck applies a cumulative ACK inside this transaction; it is durable
// with the transaction. Prefer Store.ApplyAck, which batches cursor writes.
func (tx *Tx) ApplyAck(seq uint64, protocolVersion int) error {
	_, err := tx.st.applyAck(seq, protocolVersion)
	return err
}

// RestoreV2ReplayEvents re-enqueues, with fresh sequence numbers, the real
// payloads of v2-only events that a v1 connection acknowledged as
// downgraded diagnostics (prp.md §8.2). Call it on a v2 connection.
func (tx *Tx) RestoreV2ReplayEvents() error {
	var replay []V2ReplayEvent
	for _, e := range tx.st.V2ReplayEvents {
		if e.SourceSeq <= tx.st.AckedSourceSeq {
			replay = append(replay, e)
		}
	}
	slices.SortFunc(replay, func(a, b V2ReplayEvent) int { return cmp.Compare(a.SourceSeq, b.SourceSeq) })
	for _, e := range replay {
		if _, err := tx.Enqueue(Event{Type: e.EventType, Priority: e.Priority, Payload: e.Payload}); err != nil {
			return fmt.Errorf("restore v2 replay events: %w", err)
		}
	}
	return nil
}
