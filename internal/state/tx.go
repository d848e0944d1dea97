package state

import (
	"encoding/json"
	"fmt"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/quote"
)

// Tx is one logical step on a private copy of the state. It is valid only
// inside the Update function that received it.
type Tx struct {
	s        *Store
	st       *State
	bound    *boundFact
	coalesce coalesceMark
	// shared is the highest sourceSeq the published state holds: an
	// outbox element at or below it sits in the array that state shares.
	shared uint64
}

func (tx *Tx) setBound(l Lifecycle, backpressure bool, diagnostic string) {
	tx.bound = &boundFact{lifecycle: l, backpressure: backpressure, diagnostic: diagnostic}
	tx.bound.apply(tx.st)
	tx.s.log.Warn("outbox bound reached", "lifecycle", string(l))
}

// Lifecycle returns the lifecycle in this transaction.
func (tx *Tx) Lifecycle() Lifecycle { return tx.st.Lifecycle }

// AckedSourceSeq returns the ACK cursor in this transaction.
func (tx *Tx) AckedSourceSeq() uint64 { return tx.st.AckedSourceSeq }

// HighestSourceSeq returns the highest sourceSeq produced so far.
func (tx *Tx) HighestSourceSeq() uint64 { return tx.st.HighestSourceSeq() }

// SetLifecycle sets the lifecycle (prp.md §9.2).
func (tx *Tx) SetLifecycle(l Lifecycle) error {
	if !l.Valid() {
		return fmt.Errorf("set lifecycle: unknown lifecycle %s", quote.Text(l))
	}
	tx.st.Lifecycle = l
	return nil
}

// turnEnded reports whether a provider turn's terminal event was committed
// since the last ClearTurnEnded.
func (tx *Tx) turnEnded() bool { return tx.st.TurnEnded }

// ClearTurnEnded records that the runner has acted on the ended turn.
func (tx *Tx) ClearTurnEnded() { tx.st.TurnEnded = false }

// recordDiagnostic appends a redacted diagnostic (at most maxDiagnostics kept).
func (tx *Tx) recordDiagnostic(msg string) { tx.st.addDiagnostic(msg) }

// SetRecoverableFailure records (code != "") or clears the recoverable failure.
func (tx *Tx) SetRecoverableFailure(code string) {
	if code == "" {
		tx.st.RecoverableFailure = nil
		return
	}
	c := redactText(code)
	tx.st.RecoverableFailure = &c
}

// SetProtocolVersion records the PRP version of the authenticated connection;
// new envelopes are built for it.
func (tx *Tx) SetProtocolVersion(v int) error {
	if v < 1 || v > MaxProtocolVersion {
		return fmt.Errorf("set protocol version: unsupported version %d", v)
	}
	tx.st.LastConnectionProtocolVersion = &v
	return nil
}

// SetTerminalFence persists lifecycle (suspended or stopped) with the
// pendingTerminalDelivery fence for a terminal command, before its result is
// sent (prp.md §7.4).
func (tx *Tx) SetTerminalFence(r CommandResult, l Lifecycle) error {
	if l != Suspended && l != Stopped {
		return fmt.Errorf("set terminal fence: lifecycle %s is not terminal", quote.Text(l))
	}
	tx.st.Lifecycle = l
	tx.st.PendingTerminalDelivery = &TerminalFence{CommandID: r.CommandID, ControllerSeq: r.ControllerSeq, CommandType: r.CommandType, Lifecycle: l}
	return nil
}

// Fenced reports whether a terminal command's result awaits delivery
// (pendingTerminalDelivery) in this transaction.
func (tx *Tx) Fenced() bool { return tx.st.PendingTerminalDelivery != nil }

// ClearTerminalFence clears pendingTerminalDelivery after the result was
// acknowledged and the outbox flushed (prp.md §7.4).
func (tx *Tx) ClearTerminalFence() { tx.st.PendingTerminalDelivery = nil }

// setProviderCleanupFence records that a provider may still be running after
// a failed stop (prp.md §9.4); nil clears it.
func (tx *Tx) setProviderCleanupFence(f *TerminalFence) {
	if f == nil {
		tx.st.PendingProviderCleanup = nil
		return
	}
	c := *f
	tx.st.PendingProviderCleanup = &c
}

// Revoke honours a core revoke (prp.md §3.2): epoch MUST exceed both the
// stored revocation epoch and the connection's lease revocation epoch, else
// ErrRevokeNotAdvancing (fatal) and nothing changes. The lifecycle becomes
// revoked; after the commit the runner exits 0, and a restart exits at once.
func (tx *Tx) Revoke(epoch, leaseEpoch uint64) error {
	if epoch <= tx.st.RevocationEpoch || epoch <= leaseEpoch {
		return fmt.Errorf("revoke epoch %d: %w", epoch, ErrRevokeNotAdvancing)
	}
	tx.st.RevocationEpoch = epoch
	tx.st.Lifecycle = Revoked
	return nil
}

// SetRecord stores v (JSON-encoded) as the top-level field name: the
// extension point for records other packages keep in runner-state.json
// (e.g. ACP session records, acp.md §3.4). The name must not be a state field.
// Never put secrets in a record.
func (tx *Tx) SetRecord(name string, v any) error {
	if name == "" || knownFields()[name] {
		return fmt.Errorf("set record: %s is reserved", quote.Text(name))
	}
	b, err := jsonenc.Marshal(v)
	if err != nil {
		return fmt.Errorf("set record %s: %w", name, err)
	}
	if tx.st.Extensions == nil {
		tx.st.Extensions = map[string]json.RawMessage{}
	}
	tx.st.Extensions[name] = b
	return nil
}

// deleteRecord removes the record name.
func (tx *Tx) deleteRecord(name string) { delete(tx.st.Extensions, name) }

// Record decodes the record name into v; ok is false when it is absent.
func (tx *Tx) Record(name string, v any) (ok bool, err error) {
	return tx.st.Record(name, v)
}

// Record decodes the extension record name into v; ok is false when absent.
func (st *State) Record(name string, v any) (ok bool, err error) {
	b, found := st.Extensions[name]
	if !found {
		return false, nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return true, fmt.Errorf("decode record %s: %w", name, err)
	}
	return true, nil
}
