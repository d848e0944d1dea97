package config

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// BootstrapTicketEnv is the only source of the one-use bootstrap ticket
// (prp.md §2.4, §13). It is never accepted on the command line.
const BootstrapTicketEnv = "PAPERCLIP_RUNNER_BOOTSTRAP_TICKET"

// maxBootstrapTicketBytes bounds the ticket (beyond: the reference sets no
// bound; its tickets are short opaque strings, and a bound keeps a runaway
// variable out of every handshake).
const maxBootstrapTicketBytes = 16 * 1024

// redacted replaces the ticket wherever it could be printed.
const redacted = "[redacted]"

// BootstrapTicket holds the one-use bootstrap ticket in memory only
// (ARCHITECTURE.md invariant 3). Every way Go can print or encode a value —
// fmt verbs (%v %+v %#v %s %q %x %d …), slog, encoding/json, encoding.Text,
// on the value or a pointer — yields "[redacted]"; only Reveal returns the
// secret, for the handshake.
// The zero value and a nil *BootstrapTicket hold no ticket. Not safe for
// concurrent use: one owner (the handshake) reveals and destroys it.
type BootstrapTicket struct {
	// secret holds the bytes in a closure: reflection (fmt printing an
	// unexported field, where these methods cannot run) sees only a func
	// value, never the bytes. wipe=true overwrites and forgets them.
	secret func(wipe bool) []byte
}

func newTicketSecret(b []byte) func(wipe bool) []byte {
	return func(wipe bool) []byte {
		if wipe {
			clear(b)
			b = nil
		}
		return b
	}
}

// NewBootstrapTicket wraps value (for tests and for callers that obtained a
// ticket another way). An empty or whitespace-only value, or one longer than
// maxBootstrapTicketBytes, is errBootstrapTicketInvalid.
func NewBootstrapTicket(value string) (*BootstrapTicket, error) {
	if strings.TrimSpace(value) == "" {
		return nil, NewError(CodeBootstrapTicketInvalid, BootstrapTicketEnv+" is empty", nil)
	}
	if len(value) > maxBootstrapTicketBytes {
		return nil, NewError(CodeBootstrapTicketInvalid, fmt.Sprintf("%s is longer than %d bytes", BootstrapTicketEnv, maxBootstrapTicketBytes), nil)
	}
	return &BootstrapTicket{secret: newTicketSecret([]byte(value))}, nil
}

// TakeBootstrapTicket removes PAPERCLIP_RUNNER_BOOTSTRAP_TICKET from the
// process environment and returns its value. It must run first in main,
// before argument parsing and before anything could start a child process.
//
// Whatever the outcome, afterwards the variable is gone: from os.Environ (so
// no child inherits it) and, on Linux, its value is also overwritten in the
// process's initial environment block, so /proc/<pid>/environ — readable by
// every process of the same user, agents included — does not show it.
// It returns (nil, nil) when the variable is absent; an empty or oversize
// value is errBootstrapTicketInvalid. (The Go runtime keeps its own private
// copy of the start-up environment; that copy never leaves the process.)
func TakeBootstrapTicket() (*BootstrapTicket, error) {
	value, ok := os.LookupEnv(BootstrapTicketEnv)
	// os.Unsetenv also drops later duplicates of the name (syscall clears
	// them when it first copies the environment).
	unsetErr := os.Unsetenv(BootstrapTicketEnv)
	scrubInitialEnviron(BootstrapTicketEnv)
	if unsetErr != nil {
		return nil, NewError(CodeBootstrapTicketInvalid, "remove "+BootstrapTicketEnv+" from the environment", unsetErr)
	}
	if !ok {
		return nil, nil
	}
	return NewBootstrapTicket(value)
}

// Reveal returns a copy of the ticket's bytes for the PRP handshake, or nil
// once the ticket is destroyed. Callers must not log, store or wrap it.
func (t *BootstrapTicket) Reveal() []byte {
	if !t.Present() {
		return nil
	}
	return append([]byte(nil), t.secret(false)...)
}

// Present reports whether the ticket holds a value.
func (t *BootstrapTicket) Present() bool {
	return t != nil && t.secret != nil && len(t.secret(false)) > 0
}

// Destroy overwrites the ticket and forgets it; prp.md §2.4 destroys it once
// the welcome delivers the lease token. Safe to call more than once.
func (t *BootstrapTicket) Destroy() {
	if t == nil || t.secret == nil {
		return
	}
	t.secret(true)
	t.secret = nil
}

// String implements fmt.Stringer without revealing the ticket.
func (BootstrapTicket) String() string { return redacted }

// GoString implements fmt.GoStringer without revealing the ticket.
func (BootstrapTicket) GoString() string { return redacted }

// Format implements fmt.Formatter: every verb prints "[redacted]" (without
// it, %d or %x of the struct would print the bytes).
func (BootstrapTicket) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue implements slog.LogValuer without revealing the ticket.
func (BootstrapTicket) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON implements json.Marshaler without revealing the ticket.
func (BootstrapTicket) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler without revealing the ticket.
func (BootstrapTicket) MarshalText() ([]byte, error) { return []byte(redacted), nil }
