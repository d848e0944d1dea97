// Package toolcall is the durable table of the run's semantic tool calls
// (tools.md §3): every call an agent makes through the bridge gets a callId
// unique for the run's whole life, is pending while the agent waits for its
// answer, detached when the agent stopped waiting, and settled once a result
// reached the agent. The table is plain JSON and lives in the agent's
// durable record, so a runnerd restart keeps every call.
//
// A Table is not safe for concurrent use: its owner (the agent Manager)
// guards it with its own mutex and commits it with the events it builds.
package toolcall

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// maxSettled bounds the settled calls kept for duplicate and conflict
// answers (tools.md §3 item 5). The table rides in every agent-path state
// write, so it stays small (128 × ~170 bytes ≈ 22 KiB): a core resends a
// result for a recent call; one older than the last 128 settled is
// answered "not pending".
const maxSettled = 128

// maxPending bounds the calls pending per session (tools.md §2: at most 32
// calls pending per session; the bridge enforces it, the table refuses a
// 33rd as a second line).
const maxPending = 32

// maxUnsettled bounds the unsettled calls kept (pending and detached): a
// detached call whose result never comes would otherwise stay for the
// run's life. Past it the oldest detached call is forgotten (a result for
// it is then "not pending").
const maxUnsettled = 4 * maxPending

// callIDBytes is the random part of a callId: 16 bytes make a collision
// across the run's life (agent and runnerd restarts included) negligible
// without any durable counter to keep in step.
const callIDBytes = 16

// state is where a call is in its life.
type state string

// Call states.
const (
	// Pending: the agent waits on its HTTP request for the answer.
	Pending state = "pending"
	// detached: the agent's request went away (connection closed, runnerd
	// restart, notifications/cancelled, a stopped turn); the result is
	// recorded, not delivered, and a re-call in the same turn takes it.
	detached state = "detached"
	// answered: the result was handed to the agent's request. It is in
	// the settled history and stays here, with its result, while its turn
	// may still run: a crash can cut the answer off before its HTTP write,
	// and after the restart (DetachAll) the agent's repeated call takes it
	// again (tools.md §3 items 1, 8). A live bridge never re-attaches it.
	answered state = "answered"
)

// Identity is the agent side of a call: the MCP session, the JSON-RPC id
// verbatim, and the agent process. The MCP session id is a bearer-like
// value, so only its digest is kept here (SessionKey).
type Identity struct {
	SessionKey string          `json:"sessionKey"`
	RequestID  json.RawMessage `json:"requestId"`
	Process    string          `json:"process"`
}

// SessionKey is the digest of an Mcp-Session-Id kept in place of the id.
func SessionKey(sessionID string) string {
	sum := sha256.Sum256([]byte("mcp-session\x00" + sessionID))
	return hex.EncodeToString(sum[:12])
}

// same reports whether two identities name the same agent request.
func (a Identity) same(b Identity) bool {
	return a.SessionKey == b.SessionKey && a.Process == b.Process && string(a.RequestID) == string(b.RequestID)
}

// Outcome is a result recorded for a call.
type Outcome struct {
	Result  json.RawMessage `json:"result"`
	IsError bool            `json:"isError"`
	// Digest is the content digest of Result ("sha256:"+hex).
	Digest string `json:"digest"`
}

// Call is one unsettled call.
type Call struct {
	CallID      string `json:"callId"`
	OperationID string `json:"operationId"`
	// Tool is the tools/call name the agent sent, for the identity
	// conflict check ({tool, arguments}, tools.md §2).
	Tool string `json:"tool"`
	// InputDigest is the content digest of the canonical input.
	InputDigest string `json:"inputDigest"`
	// TurnID is the provider turn the call was made in.
	TurnID string   `json:"turnId"`
	Agent  Identity `json:"agent"`
	State  state    `json:"state"`
	// Recorded is the result of a detached call until a re-call takes it.
	Recorded *Outcome `json:"recorded,omitempty"`
	// AnsweredBy is the semantic_tool.result command whose answer was
	// being handed to the waiting agent request when this was written: in
	// memory the call is settled, on disk it stays detached with its
	// result recorded until the write that records the command's final
	// result, so a crash in between leaves the answer for the agent's
	// repeated call (tools.md §3 items 1, 8).
	AnsweredBy string `json:"answeredBy,omitempty"`
	// Input is the canonical input of a paperclip_finish/paperclip_block
	// call: the turn's semantic result once the server accepts it
	// (tools.md §4). Catalog calls keep only the digest.
	Input json.RawMessage `json:"input,omitempty"`
}

// settled is a call whose result reached the agent.
type settled struct {
	CallID       string `json:"callId"`
	OperationID  string `json:"operationId"`
	ResultDigest string `json:"resultDigest"`
	IsError      bool   `json:"isError"`
}

// Table is the durable call table.
type Table struct {
	// Calls are the unsettled calls in creation order.
	Calls []*Call `json:"calls"`
	// Settled is the bounded history, oldest first (maxSettled).
	Settled []settled `json:"settled"`
}

// errTooManyPending is a new call while maxPending calls are pending.
var errTooManyPending = errors.New("too many pending calls")

// NewCallID returns a fresh run-unique callId.
func NewCallID() string {
	var b [callIDBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "call_" + hex.EncodeToString(b[:])
}

// clone returns a deep copy, for the immutable snapshot a commit stores.
func (t *Table) clone() *Table {
	if t == nil {
		return nil
	}
	out := &Table{Calls: make([]*Call, len(t.Calls)), Settled: append([]settled(nil), t.Settled...)}
	for i, c := range t.Calls {
		cc := *c
		cc.Input = append(json.RawMessage(nil), c.Input...)
		cc.Agent.RequestID = append(json.RawMessage(nil), c.Agent.RequestID...)
		if c.Recorded != nil {
			r := *c.Recorded
			cc.Recorded = &r
		}
		out.Calls[i] = &cc
	}
	return out
}

// Find returns the unsettled call callID.
func (t *Table) Find(callID string) *Call {
	for _, c := range t.Calls {
		if c.CallID == callID {
			return c
		}
	}
	return nil
}

// findSettled returns the settled history entry of callID.
func (t *Table) findSettled(callID string) (settled, bool) {
	for i := len(t.Settled) - 1; i >= 0; i-- {
		if t.Settled[i].CallID == callID {
			return t.Settled[i], true
		}
	}
	return settled{}, false
}

// ByIdentity returns the unsettled call the agent request id names. An
// answered call is not one: its request had its answer.
func (t *Table) ByIdentity(id Identity) *Call {
	for _, c := range t.Calls {
		if c.State != answered && c.Agent.same(id) {
			return c
		}
	}
	return nil
}

// Reattachable returns the detached call a re-call takes (tools.md §3
// item 1): same turn, same operation, same canonical-argument digest.
func (t *Table) Reattachable(turnID, operationID, inputDigest string) *Call {
	for _, c := range t.Calls {
		if c.State == detached && c.TurnID == turnID && c.OperationID == operationID && c.InputDigest == inputDigest {
			return c
		}
	}
	return nil
}

// Add records a new pending call.
func (t *Table) Add(c *Call) error {
	n := 0
	for _, x := range t.Calls {
		if x.State == Pending {
			n++
		}
	}
	if n >= maxPending {
		return errTooManyPending
	}
	// An answered call of another turn can no longer be repeated.
	kept := t.Calls[:0]
	for _, x := range t.Calls {
		if x.State != answered || x.TurnID == c.TurnID {
			kept = append(kept, x)
		}
	}
	clear(t.Calls[len(kept):])
	t.Calls = kept
	if len(t.Calls) >= maxUnsettled {
		for i, x := range t.Calls {
			if x.State == detached || x.State == answered {
				t.Calls = append(t.Calls[:i:i], t.Calls[i+1:]...)
				break
			}
		}
	}
	c.State = Pending
	t.Calls = append(t.Calls, c)
	return nil
}

// Settle moves callID to the settled history with its outcome.
func (t *Table) Settle(callID string, o Outcome) {
	for i, c := range t.Calls {
		if c.CallID != callID {
			continue
		}
		t.Calls = append(t.Calls[:i:i], t.Calls[i+1:]...)
		t.addSettled(c, o)
		return
	}
}

// addSettled puts c with outcome o in the settled history, once.
func (t *Table) addSettled(c *Call, o Outcome) {
	if _, ok := t.findSettled(c.CallID); ok {
		return
	}
	t.Settled = append(t.Settled, settled{CallID: c.CallID, OperationID: c.OperationID, ResultDigest: o.Digest, IsError: o.IsError})
	if over := len(t.Settled) - maxSettled; over > 0 {
		t.Settled = append([]settled(nil), t.Settled[over:]...)
	}
}

// MarkAnswered settles callID, whose result o was handed to the agent's
// request, and keeps it with o for a repeated call after a restart (see
// answered).
func (t *Table) MarkAnswered(callID string, o Outcome) {
	c := t.Find(callID)
	if c == nil {
		return
	}
	t.addSettled(c, o)
	c.State, c.Recorded, c.AnsweredBy = answered, &o, ""
}

// Open reports whether a call is pending or detached (an answered call
// kept for a repeat is not open).
func (t *Table) Open() bool {
	for _, c := range t.Calls {
		if c.State != answered {
			return true
		}
	}
	return false
}

// Detach marks callID detached: its agent request is gone.
func (t *Table) Detach(callID string) {
	if c := t.Find(callID); c != nil {
		c.State = detached
	}
}

// DetachAll detaches every pending call: after a runnerd restart no agent
// request of the previous life is still waiting (their connections died
// with it). An answered call is detached too: its answer may have died
// with them, so a repeated call takes its result. It reports whether
// anything changed.
func (t *Table) DetachAll() bool {
	changed := false
	for _, c := range t.Calls {
		if c.State == Pending || c.State == answered {
			c.State = detached
			changed = true
		}
	}
	return changed
}

// digest is the semantic content digest: "sha256:" + hex(sha256(canonical
// JSON)), with the reference-exact canonical JSON (prp.md §2.2), as the
// server's digestPaperclipSemanticContent recomputes it.
func digest(v json.RawMessage) (string, error) {
	c, err := prp.Canonical(v)
	if err != nil {
		return "", fmt.Errorf("digest semantic content: %w", err)
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// CanonicalInput returns the canonical re-encoding of args and its digest:
// the bytes sent in semantic_tool.input are the bytes digested (tools.md
// §3 item 3).
func CanonicalInput(args json.RawMessage) (json.RawMessage, string, error) {
	c, err := prp.Canonical(args)
	if err != nil {
		return nil, "", fmt.Errorf("canonicalize tool input: %w", err)
	}
	sum := sha256.Sum256(c)
	return json.RawMessage(c), "sha256:" + hex.EncodeToString(sum[:]), nil
}

// Record keeps o as the result of the detached call callID, for a re-call
// in its turn to take (tools.md §3 items 1, 5).
func (t *Table) Record(callID string, o Outcome) {
	if c := t.Find(callID); c != nil {
		c.State = detached
		c.Recorded = &o
	}
}

// Answering keeps o as the recorded result of callID while commandID
// hands it to the waiting agent request: durably the call stays detached
// with its result until SettleAnswered (see Call.AnsweredBy).
func (t *Table) Answering(callID, commandID string, o Outcome) {
	if c := t.Find(callID); c != nil {
		c.State, c.Recorded, c.AnsweredBy = detached, &o, commandID
	}
}

// SettleAnswered settles the calls commandID answered. It reports whether
// t changed.
func (t *Table) SettleAnswered(commandID string) bool {
	changed := false
	for _, c := range t.Calls {
		if c.AnsweredBy == commandID && c.Recorded != nil {
			t.MarkAnswered(c.CallID, *c.Recorded)
			changed = true
		}
	}
	return changed
}

// Unanswered lists, by command id, the calls whose answer a crash may
// have cut off (Answering without SettleAnswered), and forgets that
// mark: they stay detached with their result for a repeated call.
func (t *Table) Unanswered() map[string]string {
	var out map[string]string
	for _, c := range t.Calls {
		if c.AnsweredBy == "" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[c.AnsweredBy] = c.CallID
		c.AnsweredBy = ""
	}
	return out
}

// Drop forgets an unsettled call that never became durable.
func (t *Table) Drop(callID string) {
	for i, c := range t.Calls {
		if c.CallID == callID {
			t.Calls = append(t.Calls[:i:i], t.Calls[i+1:]...)
			return
		}
	}
}

// Restore puts back a call whose result was handed to an agent request
// that went away before the answer left: the call is detached again with
// its result recorded, for a re-call to take (tools.md §3 item 1).
func (t *Table) Restore(c Call, o Outcome) {
	for i := len(t.Settled) - 1; i >= 0; i-- {
		if t.Settled[i].CallID == c.CallID {
			t.Settled = append(t.Settled[:i:i], t.Settled[i+1:]...)
			break
		}
	}
	if x := t.Find(c.CallID); x != nil {
		// Its answer never reached the agent.
		x.State, x.Recorded, x.AnsweredBy = detached, &o, ""
		return
	}
	c.State, c.Recorded, c.AnsweredBy = detached, &o, ""
	t.Calls = append(t.Calls, &c)
}
