package config

import (
	"errors"
	"strings"
	"unicode"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// Exit statuses of paperclip-runnerd (prp.md §13 "Logs and exit").
//
// The reference exits 1 for every failure, usage errors included; runnerd
// keeps 0 and 1 with the reference's meaning and adds 2 for a command line
// the server (or a person) got wrong, as Go and POSIX tools do. The server
// only distinguishes 0 from non-zero and maps the stderr text to a code.
const (
	ExitOK      = 0 // success: build metadata printed, revoke honoured, clean per-turn exit
	ExitFailure = 1 // the runner failed; stderr names the PRP error code
	ExitUsage   = 2 // bad flags or launch environment; nothing was started
)

// StderrPrefix starts every error line runnerd writes to stderr
// (prp.md §13; R-bin prints "paperclip-runnerd: <error>").
const StderrPrefix = "paperclip-runnerd: "

// maxErrorLineBytes bounds one stderr error line (beyond: the server keeps
// only the last 16 KiB of stderr, prp.md §13, so one line must never crowd
// out the rest).
const maxErrorLineBytes = 1024

// Code is an error code that leaves the process on stderr. The server finds
// the PRP codes in the text (LT maps /runner_ingress_bind_conflict/,
// /transport_reconnect_grace_exceeded/ to its own failure codes), so they are
// part of the wire contract (prp.md §11).
type Code string

// Codes runnerd reports. The PRP ones are spelled exactly as prp.md §11.
const (
	// CodeUsage marks a command-line error (beyond: the reference has no code).
	CodeUsage Code = "usage"
	// CodeIngressBindConflict: listener bind or listener path problems (prp.md §1.2).
	CodeIngressBindConflict Code = "runner_ingress_bind_conflict"
	// CodeReconnectGraceExceeded: disconnected longer than --reconnect-grace-ms (prp.md §6.1).
	CodeReconnectGraceExceeded Code = "transport_reconnect_grace_exceeded"
	// CodeReconnectDeadlineExceeded: the lifetime ended while reconnecting (prp.md §6.1).
	CodeReconnectDeadlineExceeded Code = "transport_reconnect_deadline_exceeded"
	// CodeLeaseExpired: the connection lease expired; a new ticket is needed (prp.md §5).
	CodeLeaseExpired Code = prp.LeaseExpiredCode
	// CodeBootstrapFailedClosed: the ticket may have been consumed before a
	// welcome arrived (prp.md §2.4). The reference prints only the message.
	CodeBootstrapFailedClosed Code = "bootstrap_failed_closed"
	// CodeConnectURLInvalid: a --connect-url runnerd refuses (prp.md §1.3
	// syntax, or ws:// to an address that is not loopback). Beyond: the
	// reference prints only a message; it exits 1, and so does runnerd.
	CodeConnectURLInvalid Code = "connect_url_invalid"
	// CodeBootstrapTicketMissing: durable mode without PAPERCLIP_RUNNER_BOOTSTRAP_TICKET.
	CodeBootstrapTicketMissing Code = "bootstrap_ticket_missing"
	// CodeBootstrapTicketInvalid: the ticket variable is empty or out of bounds.
	CodeBootstrapTicketInvalid Code = "bootstrap_ticket_invalid"
	// CodeStorageUnsupported: a storage operation runnerd does not implement
	// (durability.md §8.1: the line SHOULD start with this code).
	CodeStorageUnsupported Code = "storage_unsupported"
	// CodeIndexedStateUnsupported: the state directory holds the reference's
	// indexed store, which runnerd cannot read (durability.md §7.1; beyond:
	// the reference's message has no code).
	CodeIndexedStateUnsupported Code = "indexed_state_unsupported"
	// CodeRunnerFailed: any other failure of the runner (beyond).
	CodeRunnerFailed Code = "runner_failed"
)

// Fixed messages the spec spells out.
const (
	// msgBootstrapFailedClosed is the reference's text (prp.md §2.4).
	msgBootstrapFailedClosed = "bootstrap connection failed closed; provide a fresh one-use ticket"
)

// Error is a runner failure with a code. Msg is fixed text written by
// runnerd: it never holds a secret, a payload or text received from a peer.
// Err, when set, is the cause; it is printed too, so whoever wraps must keep
// the same rule for it.
type Error struct {
	Code Code
	Msg  string
	Err  error
}

// NewError returns an *Error with code, fixed message and optional cause.
func NewError(code Code, msg string, cause error) *Error {
	return &Error{Code: code, Msg: msg, Err: cause}
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error or *usageError with the same code,
// so that errors.Is(err, ErrLeaseExpired) matches any lease-expiry error.
func (e *Error) Is(target error) bool {
	return codeOf(target) == e.Code && e.Code != ""
}

// usageError is a command-line (or launch-environment) error: exit status 2,
// nothing started. Flag names the offending flag ("--max-frame-bytes"), or is
// empty when the problem spans flags. Code is CodeUsage unless the spec
// assigns the condition its own code (a bad --listen-path is
// runner_ingress_bind_conflict, prp.md §1.2, so the server recognises it).
type usageError struct {
	Code    Code
	Flag    string
	Problem string
}

func (e *usageError) Error() string {
	code := e.Code
	if code == "" {
		code = CodeUsage
	}
	if e.Flag == "" {
		return string(code) + ": " + e.Problem
	}
	return string(code) + ": " + e.Flag + ": " + e.Problem
}

// Is matches errUsage for every usage error, and the sentinel of its code.
func (e *usageError) Is(target error) bool {
	c := codeOf(target)
	if c == CodeUsage {
		return true
	}
	return c != "" && c == e.Code
}

// Sentinels for errors.Is. Each matches every error carrying its code.
var (
	errUsage                     error = &Error{Code: CodeUsage}
	errIngressBindConflict       error = &Error{Code: CodeIngressBindConflict}
	ErrReconnectGraceExceeded    error = &Error{Code: CodeReconnectGraceExceeded}
	ErrReconnectDeadlineExceeded error = &Error{Code: CodeReconnectDeadlineExceeded}
	ErrLeaseExpired              error = &Error{Code: CodeLeaseExpired}
	ErrBootstrapFailedClosed     error = &Error{Code: CodeBootstrapFailedClosed, Msg: msgBootstrapFailedClosed}
	ErrBootstrapTicketMissing    error = &Error{Code: CodeBootstrapTicketMissing}
	errBootstrapTicketInvalid    error = &Error{Code: CodeBootstrapTicketInvalid}
	errConnectURLInvalid         error = &Error{Code: CodeConnectURLInvalid}
)

func codeOf(err error) Code {
	switch e := err.(type) { //nolint:errorlint // the sentinel itself, not a chain
	case *Error:
		return e.Code
	case *usageError:
		if e.Code == "" {
			return CodeUsage
		}
		return e.Code
	}
	return ""
}

// CodeOf returns the code of the first coded error in err's chain, or
// CodeRunnerFailed when there is none.
func CodeOf(err error) Code {
	var ue *usageError
	if errors.As(err, &ue) {
		return codeOf(ue)
	}
	var e *Error
	if errors.As(err, &e) && e.Code != "" {
		return e.Code
	}
	return CodeRunnerFailed
}

// ExitCode maps err to the process exit status: ExitOK for nil, ExitUsage
// for usage errors, ExitFailure otherwise. A missing or malformed bootstrap
// ticket and a refused --connect-url exit 1 as the reference's runner does
// (it exits 1 for every failure), each with its own code on the line.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errConnectURLInvalid):
		return ExitFailure
	case errors.Is(err, errUsage):
		return ExitUsage
	default:
		return ExitFailure
	}
}

// FormatError renders err as the one stderr line runnerd prints before it
// exits: "paperclip-runnerd: <code>: <message>\n", code being CodeOf(err)
// (so a wrapped coded error still leads with its code). Control characters
// become spaces and the line is cut at maxErrorLineBytes, so the result is
// always exactly one line.
func FormatError(err error) string {
	if err == nil {
		return ""
	}
	code := string(CodeOf(err))
	text := code + ": " + strings.TrimPrefix(err.Error(), code+": ")
	return StderrPrefix + OneLine(text, maxErrorLineBytes-len(StderrPrefix)-1) + "\n"
}

// OneLine replaces control characters (newlines included) with spaces and
// cuts s to at most limit bytes without splitting a UTF-8 sequence, so a
// text runnerd prints or logs stays one bounded line.
func OneLine(s string, limit int) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			r = ' '
		}
		if b.Len()+len(string(r)) > limit {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
