package state

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// WarmPhase is the persisted phase of a warm run rotation (prp.md §9.5).
type WarmPhase string

// Warm phases (R-state PendingWarmRunTransition.phase).
const (
	// WarmPrepared: the receipt is built and persisted under the old
	// identity; the run.attach result may have been sent.
	WarmPrepared WarmPhase = "prepared"
	// WarmActivating: the core acknowledged the exact receipt and the state
	// now holds the new identity; the runner reconnects to activate it.
	WarmActivating WarmPhase = "activating"
)

// ErrWarmTransition: a warm-rotation step breaks §9.5 (wrong phase,
// unacknowledged outbox, inexact receipt, identity rules).
var ErrWarmTransition = errors.New("warm transition refused")

// PendingWarmTransition is runner-state.json's warmTransition (R-state
// PendingWarmRunTransition): the receipt, the phase, and the command and
// result it binds.
type PendingWarmTransition struct {
	Receipt prp.WarmTransition `json:"receipt"`
	Phase   WarmPhase          `json:"phase"`
	Command json.RawMessage    `json:"command"`
	Result  CommandResult      `json:"result"`
}

// identity returns the state's six identity fields.
func (st *State) identity() prp.Identity {
	return prp.Identity{
		RunnerInstanceID: st.RunnerInstanceID, EnvironmentLeaseID: st.EnvironmentLeaseID, RunID: st.RunID,
		NormalizedSessionID: st.NormalizedSessionID, TurnID: st.TurnID, ItemID: st.ItemID,
	}
}

// PendingWarm decodes the pending warm transition, if any.
func (st *State) PendingWarm() (*PendingWarmTransition, error) {
	if len(st.WarmTransition) == 0 || string(st.WarmTransition) == "null" {
		return nil, nil
	}
	var p PendingWarmTransition
	if err := json.Unmarshal(st.WarmTransition, &p); err != nil {
		return nil, fmt.Errorf("decode warm transition: %w", errCorruptState)
	}
	return &p, nil
}

// pendingWarm returns the committed state's pending warm transition, if any.
func (s *Store) pendingWarm() (*PendingWarmTransition, error) { return s.cur.Load().PendingWarm() }

// PrepareWarmTransition persists phase "prepared" (prp.md §9.5 step 2)
// under the old identity: the whole old outbox must be acknowledged, no
// terminal or cleanup fence may be pending, the receipt must bind this
// state's identity and cursor and the result it carries, and the new
// identity must keep runnerInstanceId, environmentLeaseId and
// normalizedSessionId and change runId. Preparing the same receipt again
// (a replayed command) is a no-op; another one is refused.
func (tx *Tx) PrepareWarmTransition(r prp.WarmTransition, command json.RawMessage, res CommandResult) error {
	bad := func(what string) error { return fmt.Errorf("prepare warm transition: %w: %s", ErrWarmTransition, what) }
	st := tx.st
	cur, err := st.PendingWarm()
	if err != nil {
		return err
	}
	if cur != nil {
		if cur.Phase == WarmPrepared && prp.SameWarmTransition(cur.Receipt.Marshal(), r) {
			return nil
		}
		return bad("another transition is pending")
	}
	if st.PendingTerminalDelivery != nil || st.PendingProviderCleanup != nil {
		return bad("a terminal or provider-cleanup fence is pending")
	}
	if st.AckedSourceSeq != st.HighestSourceSeq() || len(st.Outbox) != 0 {
		return bad("the old outbox is not fully acknowledged")
	}
	if r.Schema != prp.WarmTransitionSchema || r.OldIdentity != st.identity() {
		return bad("the receipt does not bind this state's identity")
	}
	if err := prp.CheckWarmIdentity(r.OldIdentity, r.NewIdentity); err != nil {
		return fmt.Errorf("prepare warm transition: %w", errors.Join(ErrWarmTransition, err))
	}
	if r.OldAckedSourceSeq < 0 || uint64(r.OldAckedSourceSeq) != st.AckedSourceSeq {
		return bad("the receipt's cursor is not the state's")
	}
	if res.CommandID != r.CommandID || res.ControllerSeq != r.ControllerSeq || res.CommandType != prp.CommandRunAttach ||
		res.Status != StatusCompleted {
		return bad("the result is not the receipt's completed run.attach")
	}
	if _, err := prp.DecodeWarmTransition(r.Marshal()); err != nil {
		return fmt.Errorf("prepare warm transition: %w", errors.Join(ErrWarmTransition, err))
	}
	st.Schema = WarmTransitionSchema
	st.WarmTransition = jsonenc.MustMarshal(PendingWarmTransition{Receipt: r, Phase: WarmPrepared, Command: command, Result: res})
	return nil
}

// ActivateWarmTransition applies the core's command_result_ack (§9.5
// steps 3–4): its warmTransition must be exactly the prepared receipt.
// The state then becomes a fresh state of the new identity, phase
// "activating": new sequence and journal cursors, an empty outbox and
// journal. What the live provider session needs (its records, the
// executor receipt journal that keeps a replayed provider event from
// being appended twice) carries over; nothing of the old run is re-sent.
func (tx *Tx) ActivateWarmTransition(ackReceipt json.RawMessage) error {
	bad := func(what string) error {
		return fmt.Errorf("activate warm transition: %w: %s", ErrWarmTransition, what)
	}
	st := tx.st
	cur, err := st.PendingWarm()
	if err != nil {
		return err
	}
	if cur == nil || cur.Phase != WarmPrepared {
		return bad("no prepared transition")
	}
	if !prp.SameWarmTransition(ackReceipt, cur.Receipt) {
		return bad("the acknowledged receipt is not the prepared one")
	}
	st.activateWarm(cur)
	return nil
}

// activateWarm makes st a fresh state of cur's new identity, phase
// "activating" (see ActivateWarmTransition).
func (st *State) activateWarm(cur *PendingWarmTransition) {
	n := cur.Receipt.NewIdentity
	st.RunID, st.TurnID, st.ItemID = n.RunID, n.TurnID, n.ItemID
	st.NextSourceSeq, st.AckedSourceSeq = 1, 0
	st.LastControllerCommandSeq, st.CompactedThroughControllerSeq = 0, 0
	st.Outbox, st.PeakOutboxBytes = nil, 0
	st.outboxSize, st.outboxSized = 0, true
	st.ProcessedCommands, st.ProcessedCommandFingerprints = nil, nil
	st.CompactedCommandFilter = nil
	st.V2ReplayEvents, st.Diagnostics = nil, nil
	st.TurnEnded, st.Backpressure, st.RecoverableFailure = false, false, nil
	cur.Phase = WarmActivating
	st.WarmTransition = jsonenc.MustMarshal(cur)
	st.normalize()
}

// CompleteWarmTransition clears an activating transition once the core
// acknowledged warm_transition_activated for transitionID: the state is
// a plain state of the new identity again.
func (tx *Tx) CompleteWarmTransition(transitionID string) error {
	st := tx.st
	cur, err := st.PendingWarm()
	if err != nil {
		return err
	}
	if cur == nil || cur.Phase != WarmActivating || cur.Receipt.TransitionID != transitionID {
		return fmt.Errorf("complete warm transition: %w: no activating transition with this id", ErrWarmTransition)
	}
	st.Schema, st.WarmTransition = schema, nil
	return nil
}

// recoverWarm settles, at load, a warm transition a crash cut short
// (prp.md §9.5), so the process that resumes holds exactly one
// identity. The lease the receipt binds died with the process, so the
// rotation cannot finish as §9.5 runs it; which identity goes on is the
// core's knowledge, and the server launches runnerd under it (as):
//   - "prepared", relaunched as the old identity: the core never admitted
//     the run.attach result (it would have acknowledged it, and then moved
//     on). The attach becomes execution_indeterminate in the old journal: a
//     re-delivered run.attach replays that, never a second rotation.
//   - "prepared", relaunched as the new identity: the core acknowledged
//     the receipt, so it is committed to the new identity: the state rolls
//     forward as the ack would have made it.
//   - "activating": the core acknowledged the exact receipt, so only the
//     new identity is possible; the state already is it.
//
// Any other identity is left for checkBinding to refuse.
func (st *State) recoverWarm(as prp.Identity) error {
	p, err := st.PendingWarm()
	if err != nil || p == nil {
		return err
	}
	switch p.Phase {
	case WarmPrepared:
		if p.Receipt.OldIdentity != st.identity() {
			return corruptState("prepared warm transition does not bind the state's identity")
		}
		switch as {
		case p.Receipt.NewIdentity:
			st.activateWarm(p)
		case p.Receipt.OldIdentity:
			if r, ok := st.ProcessedCommands[p.Receipt.CommandID]; ok {
				r.Status = StatusIndeterminate
				r.Result = codeResult(CodeExecutionIndeterminate, "runner recovered during a warm run rotation; the attach was not applied")
				st.ProcessedCommands[p.Receipt.CommandID] = r
			}
		default:
			return nil // checkBinding refuses it; the file stays as it is
		}
	case WarmActivating:
		if p.Receipt.NewIdentity != st.identity() {
			return corruptState("activating warm transition does not bind the state's identity")
		}
	default:
		return corruptState("unknown warm transition phase")
	}
	st.Schema, st.WarmTransition = schema, nil
	return nil
}
