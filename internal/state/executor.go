package state

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// Executor events (prp.md §8.1, §9.4) are the events a provider produces
// under an id of its own: the semantic tool events (tools.md §3 item 3). The
// receipt journal deduplicates them: a replay of the same id and data takes
// no new sequence number.

// enqueueExecutor appends an event produced by the executor (a provider)
// under executorEventID. A replayed executor event with identical data is
// not appended again: it returns the original sourceSeq and duplicate=true.
// The same id with different data is errExecutorEventConflict (prp.md §9.4).
func (tx *Tx) enqueueExecutor(executorEventID string, ev Event) (seq uint64, duplicate bool, err error) {
	if !validToken(executorEventID, maxEventIDChars) {
		return 0, false, fmt.Errorf("enqueue executor event: %w: bad executor event id", errInvalidEvent)
	}
	clean, err := sanitizeJSON(ev.Payload)
	if err != nil {
		return 0, false, fmt.Errorf("enqueue executor event: %w", err)
	}
	fp, err := executorFingerprint(ev.Type, ev.Priority, clean)
	if err != nil {
		return 0, false, err
	}
	if r, ok := tx.st.ExecutorEventReceipts[executorEventID]; ok {
		if r.Fingerprint != fp {
			return 0, false, fmt.Errorf("enqueue executor event: %w", errExecutorEventConflict)
		}
		return r.SourceSeq, true, nil
	}
	sourceID := ExecutorSourceEventID(tx.st.RunnerInstanceID, executorEventID)
	if len(tx.st.ExecutorEventReceipts) >= maxExecutorEventReceipts && tx.outboxHasSourceEventID(sourceID) {
		// Its receipt was evicted while the event still waits for an ACK;
		// the data can no longer be compared, so refuse as the reference does.
		return 0, false, fmt.Errorf("enqueue executor event: %w: already queued", errExecutorEventConflict)
	}
	ev.CoalesceKey, ev.ExecutorID = "", ""
	seq, err = tx.appendEvent(sourceID, ev)
	if err != nil {
		return 0, false, err
	}
	tx.coalesce = coalesceMark{}
	if tx.st.ExecutorEventReceipts == nil {
		tx.st.ExecutorEventReceipts = map[string]ExecutorEventReceipt{}
	}
	tx.st.ExecutorEventReceipts[executorEventID] = ExecutorEventReceipt{Fingerprint: fp, SourceSeq: seq}
	for len(tx.st.ExecutorEventReceipts) > maxExecutorEventReceipts {
		oldest, min := "", uint64(0)
		for id, r := range tx.st.ExecutorEventReceipts {
			if oldest == "" || r.SourceSeq < min {
				oldest, min = id, r.SourceSeq
			}
		}
		delete(tx.st.ExecutorEventReceipts, oldest)
	}
	return seq, false, nil
}

// outboxHasSourceEventID reports whether an unacknowledged event carries id.
// Executor ids are hex, so their JSON form needs no escaping.
func (tx *Tx) outboxHasSourceEventID(id string) bool {
	needle := []byte(`"sourceEventId":"` + id + `"`)
	for _, e := range tx.st.Outbox {
		if bytes.Contains(e.Envelope, needle) {
			return true
		}
	}
	return false
}

func executorFingerprint(eventType string, p Priority, cleanPayload json.RawMessage) (string, error) {
	id, err := jsonenc.Marshal(struct {
		EventType string          `json:"eventType"`
		Priority  Priority        `json:"priority"`
		Payload   json.RawMessage `json:"payload"`
	}{eventType, p, cleanPayload})
	if err != nil {
		return "", fmt.Errorf("fingerprint executor event: %w", err)
	}
	return prp.CanonicalDigest(id)
}
