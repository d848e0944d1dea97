package provider

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Line-stream bounds (acp.md §3.3, §7).
const (
	// MaxLineBytes bounds one stdout line: the Go SDK's 10 MiB scanner max.
	MaxLineBytes = 10 << 20
	// MaxConsecutiveBadLines fails the session (the value an acpx pull request proposes).
	MaxConsecutiveBadLines = 10
)

// Protocol-named line-stream failures. Each is a `rpc_failure` loss.
var (
	// ErrFrameExceeded is the literal text the server maps to
	// provider_frame_too_large; runnerd writes it to its stderr.
	ErrFrameExceeded = errors.New("stdout frame exceeded")
	// ErrTooManyBadLines means MaxConsecutiveBadLines non-JSON-RPC lines.
	ErrTooManyBadLines = errors.New("too many consecutive non-json-rpc stdout lines")
	// ErrUnknownResponse is a response to an id runnerd never issued.
	ErrUnknownResponse = errors.New("response to an unknown request id")
)

// FeedLines splits provider stdout into complete lines, hands each to
// handle in order and returns what handle decoded, also when it stops
// early. *partial is the line begun in an earlier call (the
// record keeps it, so a restart resumes mid-line); it is joined to the
// first line and left holding the new tail. A line over maxLine fails with
// ErrFrameExceeded, and the first error stops the split.
func FeedLines(partial *[]byte, p []byte, maxLine int, handle func(line []byte) ([]Inbound, error)) ([]Inbound, error) {
	var out []Inbound
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(*partial)+len(p) > maxLine {
				return out, ErrFrameExceeded
			}
			*partial = append(*partial, p...)
			return out, nil
		}
		line := p[:i]
		if len(*partial) > 0 {
			line = append(*partial, line...)
			*partial = nil
		}
		p = p[i+1:]
		if len(line) > maxLine {
			return out, ErrFrameExceeded
		}
		msgs, err := handle(line)
		out = append(out, msgs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// Call-site errors.
var (
	ErrTurnActive       = errors.New("start turn: a turn is already active")
	ErrNoSession        = errors.New("acp session not established")
	ErrNoTurn           = errors.New("no active turn")
	ErrUnknownAgentCall = errors.New("answer agent request: not pending")
)

// InboundKind tells what an Inbound carries.
type InboundKind int

// Inbound kinds.
const (
	// KindResponse answers one of runnerd's requests (not session/prompt).
	KindResponse InboundKind = iota + 1
	// KindRequest is an agent→client request runnerd must answer.
	KindRequest
	// KindUpdate is a session/update for the current session.
	KindUpdate
	// KindTurnSettled is the answer to the active turn's session/prompt.
	KindTurnSettled
	// KindCancelRequest is $/cancel_request for a pending agent request;
	// runnerd answers that request with -32800.
	KindCancelRequest
	// KindEvents carries events another wire protocol's driver mapped
	// itself, for what ACP has no session update for (codex.md §5).
	KindEvents
	// KindRequestResolved is the provider closing one of its own pending
	// requests (Codex's serverRequest/resolved, codex.md §4): its runtime
	// request is cancelled and nothing is answered.
	KindRequestResolved
)

// Inbound is one message from the agent, in stream order.
type Inbound struct {
	Kind InboundKind
	// ID is the request id: runnerd's for responses, the agent's for
	// requests and cancel requests.
	ID       json.RawMessage
	Method   string
	Params   json.RawMessage
	Result   json.RawMessage
	RPCError *RPCError
	// Err is the classified failure of a response or settled turn.
	Err error

	// Update is set for KindUpdate; TurnID names the turn it belongs to
	// ("" for session-level updates outside a turn).
	Update *SessionUpdate
	TurnID string

	// Permission is set for session/request_permission requests.
	Permission *PermissionRequest

	// Outcome is set for KindTurnSettled.
	Outcome *TurnOutcome

	// Events is set for KindEvents.
	Events []Event
}

// TurnOutcome is how a turn ended.
type TurnOutcome struct {
	TurnID string
	// StopReason is the agent's, or "cancelled" for every answer after a
	// cancel (acp.md §4.4 step 3).
	StopReason string
	Cancelled  bool
	Usage      *TokenUsage
	// Err is non-nil when the prompt failed without a cancel.
	Err error
}

// Call is an encoded outbound request.
type Call struct {
	ID   int64
	Line []byte
}
