package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/quote"
)

// File names and schema names (R-state, prp.md §9.1).
const (
	// FileName is the state file inside the state directory (R-state STATE_FILE).
	FileName = "runner-state.json"
	// dirMode is the state directory's permission (prp.md §9.1: directories 0700).
	dirMode = 0o700
	// fileMode is the state file's permission (prp.md §9.1: files 0600).
	fileMode = 0o600
	// schema is the state schema name the server reads (R-state STATE_SCHEMA).
	schema = "paperclip.runner.durable.state.v1"
	// WarmTransitionSchema marks a state written during a warm run rotation (§9.5).
	WarmTransitionSchema = "paperclip.runner.durable.state.warm-transition.v1"
)

// Bounds (prp.md §9.2, §9.3; R-state constants).
const (
	// maxRecentCommands is the exact command journal size (R-state MAX_RECENT_COMMANDS).
	maxRecentCommands = 128
	// maxDiagnostics is how many redacted diagnostics are kept (R-state MAX_DIAGNOSTICS).
	maxDiagnostics = 32
	// maxCommandResultBytes bounds one sanitised command result (R-state MAX_COMMAND_RESULT_BYTES).
	maxCommandResultBytes = 64 * 1024
	// maxExecutorEventReceipts bounds the executor receipt journal (R-state MAX_EXECUTOR_EVENT_RECEIPTS).
	maxExecutorEventReceipts = 256
	// maxV2ReplayEvents is one kept event per v2-only family (R-state MAX_V2_REPLAY_EVENTS).
	maxV2ReplayEvents = 2
	// stateOverheadBytes is the allowance above the outbox bound for the rest
	// of the file (R-state STATE_OVERHEAD_BYTES).
	stateOverheadBytes = 16 * 1024 * 1024
	// maxDiagnosticChars bounds one diagnostic string (runnerd; keeps the file small).
	maxDiagnosticChars = 512
	// maxEventIDChars bounds event ids and types (event.schema.json maxLength 160).
	maxEventIDChars = 160
)

// Lifecycle is the runner lifecycle of prp.md §9.2.
type Lifecycle string

// Lifecycle values (prp.md §9.2).
const (
	Connecting         Lifecycle = "connecting"
	Ready              Lifecycle = "ready"
	Backpressure       Lifecycle = "backpressure"
	RecoverableFailure Lifecycle = "recoverable_failure"
	Unrecoverable      Lifecycle = "unrecoverable"
	// Suspending: an automatic suspend (per-turn completion, warm idle
	// timeout, lifetime rotation) waits for its events to be acknowledged
	// before the process exits "suspended" (the reference's name).
	Suspending Lifecycle = "suspending"
	Suspended  Lifecycle = "suspended"
	Stopped    Lifecycle = "stopped"
	Revoked    Lifecycle = "revoked"
	Draining   Lifecycle = "draining"
)

// Valid reports whether l is one of the §9.2 lifecycles.
func (l Lifecycle) Valid() bool {
	switch l {
	case Connecting, Ready, Backpressure, RecoverableFailure, Unrecoverable, Suspending, Suspended, Stopped, Revoked, Draining:
		return true
	}
	return false
}

// OutboxEvent is one durable, not yet acknowledged event. Envelope holds the
// exact compact bytes sent on a connection of the envelope's version.
type OutboxEvent struct {
	SourceSeq uint64          `json:"sourceSeq"`
	Priority  Priority        `json:"priority"`
	EventType string          `json:"eventType"`
	Envelope  json.RawMessage `json:"envelope"`
	ByteSize  int             `json:"byteSize"`
}

// CommandResult is a journaled command outcome; also the command_result payload.
type CommandResult struct {
	CommandID     string          `json:"commandId"`
	ControllerSeq uint64          `json:"controllerSeq"`
	CommandType   string          `json:"commandType"`
	Status        CommandStatus   `json:"status"`
	Result        json.RawMessage `json:"result"`
}

// TerminalFence is a pendingTerminalDelivery or pendingProviderCleanup fence (§7.4, §9.4).
type TerminalFence struct {
	CommandID     string    `json:"commandId"`
	ControllerSeq uint64    `json:"controllerSeq"`
	CommandType   string    `json:"commandType"`
	Lifecycle     Lifecycle `json:"lifecycle"`
}

// ExecutorEventReceipt records that an executor event is durably in the outbox.
type ExecutorEventReceipt struct {
	Fingerprint string `json:"fingerprint"`
	SourceSeq   uint64 `json:"sourceSeq"`
}

// V2ReplayEvent keeps the real payload of the latest v2-only event of one
// family for replay on a later v2 connection (§8.2).
type V2ReplayEvent struct {
	SourceSeq uint64          `json:"sourceSeq"`
	Priority  Priority        `json:"priority"`
	EventType string          `json:"eventType"`
	Payload   json.RawMessage `json:"payload"`
}

// State is the content of runner-state.json. Field names are the reference's
// (R-state DurableState); the fields after RecoverableFailure are runnerd's.
// A State published by a Store is immutable: use Clone before changing it.
type State struct {
	Schema                        string                          `json:"schema"`
	RunnerInstanceID              string                          `json:"runnerInstanceId"`
	EnvironmentLeaseID            string                          `json:"environmentLeaseId"`
	RunID                         string                          `json:"runId"`
	NormalizedSessionID           string                          `json:"normalizedSessionId"`
	TurnID                        string                          `json:"turnId"`
	ItemID                        string                          `json:"itemId"`
	Lifecycle                     Lifecycle                       `json:"lifecycle"`
	NextSourceSeq                 uint64                          `json:"nextSourceSeq"`
	AckedSourceSeq                uint64                          `json:"ackedSourceSeq"`
	LastControllerCommandSeq      uint64                          `json:"lastControllerCommandSeq"`
	CompactedThroughControllerSeq uint64                          `json:"compactedThroughControllerSeq"`
	ReconnectCount                uint64                          `json:"reconnectCount"`
	MaxOutboxBytes                int                             `json:"maxOutboxBytes"`
	P0ReserveBytes                int                             `json:"p0ReserveBytes"`
	PeakOutboxBytes               int                             `json:"peakOutboxBytes"`
	Outbox                        []OutboxEvent                   `json:"outbox"`
	ProcessedCommands             map[string]CommandResult        `json:"processedCommands"`
	ProcessedCommandFingerprints  map[string]string               `json:"processedCommandFingerprints"`
	PendingTerminalDelivery       *TerminalFence                  `json:"pendingTerminalDelivery"`
	PendingProviderCleanup        *TerminalFence                  `json:"pendingProviderCleanup,omitempty"`
	WarmTransition                json.RawMessage                 `json:"warmTransition,omitempty"`
	ExecutorEventReceipts         map[string]ExecutorEventReceipt `json:"executorEventReceipts"`
	V2ReplayEvents                map[string]V2ReplayEvent        `json:"v2ReplayEvents"`
	LastConnectionProtocolVersion *int                            `json:"lastConnectionProtocolVersion"`
	Diagnostics                   []string                        `json:"diagnostics"`
	Backpressure                  bool                            `json:"backpressure"`
	RecoverableFailure            *string                         `json:"recoverableFailure"`

	// RevocationEpoch is the highest revoke epoch honoured (runnerd, §3.2).
	RevocationEpoch uint64 `json:"revocationEpoch,omitempty"`
	// TurnEnded is set in the write that commits a provider turn's terminal
	// event (turn.completed|failed|interrupted|cancelled) and cleared by the
	// runner once it has acted on it (runnerd: the per-turn exit, prp.md §7.4).
	TurnEnded bool `json:"turnEnded,omitempty"`
	// CompactedCommandFilter is the Bloom filter of command ids evicted from
	// the exact journal (runnerd, §9.3); it can only cause false rejections.
	CompactedCommandFilter []byte `json:"compactedCommandFilter,omitempty"`

	// Extensions holds every other top-level field, keyed by name: the
	// records other packages keep (e.g. the ACP session record, acp.md §3.4)
	// and fields of a newer writer. They round-trip byte-for-byte. Use
	// Tx.SetRecord.
	Extensions map[string]json.RawMessage `json:"-"`
	// Texts are the named append-only texts (text.go): in the store only,
	// never in FileName. Use Tx.PutText.
	Texts map[string][]byte `json:"-"`

	// outboxSize is the sum of the outbox's ByteSize when outboxSized;
	// kept by the package's own changes to the outbox, so a step does not
	// sum the whole outbox. A State built elsewhere sums it.
	outboxSize  int
	outboxSized bool
}

// crashVisibleChange reports whether b differs from a in a field that the
// server acts on when it reads FileName with runnerd gone: the schema, the
// identity, the lifecycle and its bounds, a terminal fence, the warm
// transition or the revocation epoch. A projection that changes one is
// durable under FileName (its directory synced) before anything the step
// enables. The other fields (the sequence counters, the outbox view, the
// journal, the records) may lag after a power loss, never be torn:
// runnerd itself reads the store, and re-projects FileName from it before
// it connects.
func crashVisibleChange(a, b *State) bool {
	return a.Schema != b.Schema ||
		a.RunnerInstanceID != b.RunnerInstanceID || a.EnvironmentLeaseID != b.EnvironmentLeaseID ||
		a.RunID != b.RunID || a.NormalizedSessionID != b.NormalizedSessionID ||
		a.TurnID != b.TurnID || a.ItemID != b.ItemID ||
		a.Lifecycle != b.Lifecycle || a.Backpressure != b.Backpressure ||
		a.MaxOutboxBytes != b.MaxOutboxBytes || a.P0ReserveBytes != b.P0ReserveBytes ||
		!equalPtr(a.RecoverableFailure, b.RecoverableFailure) ||
		!equalPtr(a.PendingTerminalDelivery, b.PendingTerminalDelivery) ||
		!equalPtr(a.PendingProviderCleanup, b.PendingProviderCleanup) ||
		!bytes.Equal(a.WarmTransition, b.WarmTransition) ||
		a.RevocationEpoch != b.RevocationEpoch
}

// equalPtr reports whether a and b are both nil or point to equal values.
func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// plainState has State's fields without its methods, for the default codec.
type plainState State

var knownFields = sync.OnceValue(func() map[string]bool {
	known := map[string]bool{}
	t := reflect.TypeFor[plainState]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			known[name] = true
		}
	}
	return known
})

// MarshalJSON writes the known fields in declaration order, then extensions
// in key order. It never escapes HTML, so stored envelopes keep their bytes.
func (s *State) MarshalJSON() ([]byte, error) {
	c := *s
	c.normalize()
	c.Outbox = []OutboxEvent{}
	b, err := jsonenc.Marshal((*plainState)(&c))
	if err != nil {
		return nil, err
	}
	// The outbox dominates the file and its envelopes are already compact
	// JSON built (or compacted on load) by this package, so they are copied
	// in verbatim instead of being re-validated by the encoder. The empty
	// placeholder is the first `"outbox":[]` in b: only the identity and
	// counter fields precede it, and an escaped string cannot contain it.
	i := bytes.Index(b, []byte(`"outbox":[]`))
	if i < 0 {
		return nil, fmt.Errorf("encode state: outbox placeholder missing")
	}
	i += len(`"outbox":[`)
	var buf bytes.Buffer
	buf.Grow(len(b) + s.outboxBytes() + 128*len(s.Outbox))
	buf.Write(b[:i])
	for k, e := range s.Outbox {
		if k > 0 {
			buf.WriteByte(',')
		}
		v, err := encodeOutboxEvent(e)
		if err != nil {
			return nil, err
		}
		buf.Write(v)
	}
	buf.Write(b[i:])
	if len(s.Extensions) == 0 {
		return buf.Bytes(), nil
	}
	buf.Truncate(buf.Len() - 1) // drop the closing brace
	for _, k := range slices.Sorted(maps.Keys(s.Extensions)) {
		if knownFields()[k] {
			return nil, fmt.Errorf("encode state: extension %s shadows a state field", quote.Text(k))
		}
		key, err := jsonenc.Marshal(k)
		if err != nil {
			return nil, err
		}
		// Verbatim: every extension is compact JSON already (SetRecord
		// encodes it, UnmarshalJSON compacts what a file holds), and the
		// agent's record is rewritten on every commit of the agent path.
		buf.WriteByte(',')
		buf.Write(key)
		buf.WriteByte(':')
		buf.Write(s.Extensions[k])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads the known fields and keeps every other field in Extensions.
func (s *State) UnmarshalJSON(b []byte) error {
	var p plainState
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	for k, v := range all {
		if knownFields()[k] {
			continue
		}
		if p.Extensions == nil {
			p.Extensions = map[string]json.RawMessage{}
		}
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			return err
		}
		p.Extensions[k] = c.Bytes()
	}
	*s = State(p)
	return nil
}

// normalize replaces nil collections with empty ones: the reference reader
// expects arrays and objects, never null.
func (s *State) normalize() {
	if s.Outbox == nil {
		s.Outbox = []OutboxEvent{}
	}
	if s.ProcessedCommands == nil {
		s.ProcessedCommands = map[string]CommandResult{}
	}
	if s.ProcessedCommandFingerprints == nil {
		s.ProcessedCommandFingerprints = map[string]string{}
	}
	if s.ExecutorEventReceipts == nil {
		s.ExecutorEventReceipts = map[string]ExecutorEventReceipt{}
	}
	if s.V2ReplayEvents == nil {
		s.V2ReplayEvents = map[string]V2ReplayEvent{}
	}
	if s.Diagnostics == nil {
		s.Diagnostics = []string{}
	}
}

// Clone returns a deep copy. Raw JSON values are shared: nothing in this
// package mutates them in place.
func (s *State) Clone() *State {
	c := s.cloneShared()
	c.Outbox = slices.Clone(s.Outbox)
	return c
}

// cloneShared is Clone for a transaction: the outbox's backing array is
// shared, not copied, so a step costs nothing per stored event. That is
// safe because the array is append-only below every published length:
// an append writes past the published state's length (a discarded
// transaction's append is overwritten by the next), an ACK trims by
// reslicing, and the one in-place change, a P2 merge into the newest
// event, reallocates first (tryCoalesce). Only the store's writer, under
// its lock, appends.
func (s *State) cloneShared() *State {
	c := *s
	c.ProcessedCommands = maps.Clone(s.ProcessedCommands)
	c.ProcessedCommandFingerprints = maps.Clone(s.ProcessedCommandFingerprints)
	c.ExecutorEventReceipts = maps.Clone(s.ExecutorEventReceipts)
	c.V2ReplayEvents = maps.Clone(s.V2ReplayEvents)
	c.Diagnostics = slices.Clone(s.Diagnostics)
	c.CompactedCommandFilter = slices.Clone(s.CompactedCommandFilter)
	c.Extensions = maps.Clone(s.Extensions)
	c.Texts = maps.Clone(s.Texts)
	if s.PendingTerminalDelivery != nil {
		f := *s.PendingTerminalDelivery
		c.PendingTerminalDelivery = &f
	}
	if s.PendingProviderCleanup != nil {
		f := *s.PendingProviderCleanup
		c.PendingProviderCleanup = &f
	}
	if s.LastConnectionProtocolVersion != nil {
		v := *s.LastConnectionProtocolVersion
		c.LastConnectionProtocolVersion = &v
	}
	if s.RecoverableFailure != nil {
		v := *s.RecoverableFailure
		c.RecoverableFailure = &v
	}
	return &c
}

// outboxBytes is the sum of the stored envelope sizes.
func (s *State) outboxBytes() int {
	if s.outboxSized {
		return s.outboxSize
	}
	return s.sumOutbox()
}

// sizeOutbox caches the outbox's size on a state this package owns.
func (s *State) sizeOutbox() { s.outboxSize, s.outboxSized = s.sumOutbox(), true }

// resizeOutbox adds delta to a cached size.
func (s *State) resizeOutbox(delta int) {
	if s.outboxSized {
		s.outboxSize += delta
	}
}

func (s *State) sumOutbox() int {
	n := 0
	for _, e := range s.Outbox {
		n += e.ByteSize
	}
	return n
}

// HighestSourceSeq is the highest sourceSeq ever produced (0 if none).
func (s *State) HighestSourceSeq() uint64 {
	if s.NextSourceSeq == 0 {
		return 0
	}
	return s.NextSourceSeq - 1
}

// isObject reports whether raw is a JSON object.
func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}
