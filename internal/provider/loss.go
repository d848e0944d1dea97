package provider

import "errors"

// LossReason is the closed set of agent channel losses (acp.md §5.1).
type LossReason string

// Loss reasons.
const (
	LossProviderExit     LossReason = "provider_exit"
	LossStdinEOF         LossReason = "stdin_eof"
	LossTransportClosed  LossReason = "transport_closed"
	LossWriteError       LossReason = "write_error"
	LossRPCFailure       LossReason = "rpc_failure"
	LossHeartbeatTimeout LossReason = "heartbeat_timeout"
	LossOther            LossReason = "other"
)

var lossMessages = map[LossReason]string{
	LossProviderExit:     "the agent exited before answering the prompt",
	LossStdinEOF:         "the agent's stdin closed unexpectedly",
	LossTransportClosed:  "the agent's process session disappeared",
	LossWriteError:       "a message to the agent could not be written",
	LossRPCFailure:       "the agent broke the JSON-RPC stream",
	LossHeartbeatTimeout: "the agent went silent past the watchdog",
	LossOther:            "the agent channel was lost",
}

// message is the public text for the reason; it never includes peer text.
func (r LossReason) message() string {
	if m, ok := lossMessages[r]; ok {
		return m
	}
	return lossMessages[LossOther]
}

// ErrWrite means a line could not be written to the agent's stdin (a
// write_error loss, acp.md §5.1).
var ErrWrite = errors.New("write agent stdin")

// LossReasonOf classifies a stream or transport error into the closed set.
func LossReasonOf(err error) LossReason {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrFrameExceeded), errors.Is(err, ErrTooManyBadLines), errors.Is(err, ErrUnknownResponse):
		return LossRPCFailure
	case errors.Is(err, ErrWrite):
		return LossWriteError
	case ClassOf(err) == ClassAgentDisconnected:
		return LossProviderExit
	}
	return LossOther
}

// LostError refuses a turn on a session whose channel loss is latched;
// the caller emits turn.started then the loss sequence at once.
type LostError struct{ Reason LossReason }

func (e *LostError) Error() string { return "start turn: agent channel lost: " + string(e.Reason) }
