// Package terminal is runnerd's side of ACP's client terminals (tools.md
// §8): terminal/create|output|wait_for_exit|kill|release.
// Each terminal is a pcwrap process session of its own under
// <state-dir>/process-sessions/<terminalId>/, started with the keep-group
// option, so it survives a runnerd restart, is killed as a process group,
// and its background jobs outlive the leader until kill or release. Its
// merged output is kept as a bounded tail in <state-dir>/terminals/<id>.tail,
// outside runner-state.json.
package terminal

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/pcrunner/pcrunner/internal/clientfs"
	"github.com/pcrunner/pcrunner/internal/provider"
)

// ACP client methods (agent-client-protocol schema).
const (
	MethodCreate      = "terminal/create"
	MethodOutput      = "terminal/output"
	MethodWaitForExit = "terminal/wait_for_exit"
	MethodKill        = "terminal/kill"
	methodRelease     = "terminal/release"
)

// IsMethod reports whether method is one of the terminal methods.
func IsMethod(method string) bool {
	switch method {
	case MethodCreate, MethodOutput, MethodWaitForExit, MethodKill, methodRelease:
		return true
	}
	return false
}

// Bounds (tools.md §8).
const (
	// defaultOutputByteLimit is the tail kept when create names no limit
	// (tools.md §8: 64 KiB).
	defaultOutputByteLimit = 64 << 10
	// maxOutputByteLimit caps outputByteLimit (tools.md §8: 1 MiB).
	maxOutputByteLimit = 1 << 20
	// maxOpen is the number of terminals a session may hold open
	// (tools.md §8: 16).
	maxOpen = 16
	// killGraceMS is kill's TERM→KILL grace, given to the terminal's
	// pcwrap as PAPERCLIP_PROCESS_SESSION_TERMINATE_GRACE_MS (tools.md §8:
	// 1,500 ms).
	killGraceMS = 1500
	// maxArgs and maxEnv bound a create request's lists (beyond: the ACP
	// line limit already bounds the bytes; these bound the work per
	// request and the staged payload).
	maxArgs = 4096
	maxEnv  = 1024
)

// The JSON-RPC error codes and the refusal type are acpx's, shared with
// the other client-side handlers.
const (
	codeInvalidParams    = provider.CodeInvalidParams
	codeInternalError    = provider.CodeInternalError
	CodeResourceNotFound = provider.CodeResourceNotFound
)

// Error is a refused request (provider.ClientError).
type Error = provider.ClientError

func invalid(msg string) error  { return &Error{Code: codeInvalidParams, Message: msg} }
func notFound(msg string) error { return &Error{Code: CodeResourceNotFound, Message: msg} }

// envVariable is one entry of create's env.
type envVariable struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// CreateRequest is terminal/create's params.
type CreateRequest struct {
	SessionID       string        `json:"sessionId"`
	Command         string        `json:"command"`
	Args            []string      `json:"args,omitempty"`
	Env             []envVariable `json:"env,omitempty"`
	Cwd             string        `json:"cwd,omitempty"`
	OutputByteLimit *int64        `json:"outputByteLimit,omitempty"`
}

// createResult is terminal/create's result.
type createResult struct {
	TerminalID string `json:"terminalId"`
}

// CreatedID is the terminal id in a Create result; "" for anything else.
func CreatedID(result any) string {
	if r, ok := result.(createResult); ok {
		return r.TerminalID
	}
	return ""
}

// Request is the params of output, wait_for_exit, kill and release.
type Request struct {
	SessionID  string `json:"sessionId"`
	TerminalID string `json:"terminalId"`
}

// ExitStatus is how a terminal's command ended: exactly one of the two
// is set once it exited.
type ExitStatus struct {
	ExitCode *int    `json:"exitCode"`
	Signal   *string `json:"signal"`
}

// outputResult is terminal/output's result.
type outputResult struct {
	Output     string      `json:"output"`
	Truncated  bool        `json:"truncated"`
	ExitStatus *ExitStatus `json:"exitStatus,omitempty"`
}

// KillResult and ReleaseResult are empty objects.
type (
	KillResult    struct{}
	ReleaseResult struct{}
)

// DecodeCreate decodes and checks terminal/create's params: a command
// without NUL, env names that are valid and do not start with PAPERCLIP_
// (tools.md §8), an absolute cwd if any, a limit in [0, maxOutputByteLimit].
func DecodeCreate(raw json.RawMessage) (CreateRequest, error) {
	var r CreateRequest
	if err := clientfs.DecodeParams(raw, &r); err != nil {
		return CreateRequest{}, invalid("create terminal: params are not a valid request")
	}
	if r.SessionID == "" || r.Command == "" {
		return CreateRequest{}, invalid("create terminal: sessionId and command are required")
	}
	if len(r.Args) > maxArgs || len(r.Env) > maxEnv {
		return CreateRequest{}, invalid("create terminal: too many args or env entries")
	}
	if strings.IndexByte(r.Command, 0) >= 0 || strings.IndexByte(r.Cwd, 0) >= 0 {
		return CreateRequest{}, invalid("create terminal: command or cwd holds a NUL byte")
	}
	for _, a := range r.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return CreateRequest{}, invalid("create terminal: an argument holds a NUL byte")
		}
	}
	for _, e := range r.Env {
		if e.Name == "" || strings.ContainsAny(e.Name, "=\x00") || strings.IndexByte(e.Value, 0) >= 0 {
			return CreateRequest{}, invalid("create terminal: an env entry is not a valid variable")
		}
		if strings.HasPrefix(e.Name, "PAPERCLIP_") {
			return CreateRequest{}, invalid("create terminal: env names starting with PAPERCLIP_ are refused")
		}
	}
	if r.Cwd != "" && !strings.HasPrefix(r.Cwd, "/") {
		return CreateRequest{}, invalid("create terminal: cwd is not an absolute path")
	}
	if l := r.OutputByteLimit; l != nil && (*l < 0 || *l > maxOutputByteLimit) {
		return CreateRequest{}, invalid("create terminal: outputByteLimit is outside 0..1048576")
	}
	return r, nil
}

// DecodeRequest decodes the params of output, wait_for_exit, kill and
// release.
func DecodeRequest(raw json.RawMessage) (Request, error) {
	var r Request
	if err := clientfs.DecodeParams(raw, &r); err != nil {
		return Request{}, invalid("terminal request: params are not a valid request")
	}
	if r.SessionID == "" || r.TerminalID == "" {
		return Request{}, invalid("terminal request: sessionId and terminalId are required")
	}
	return r, nil
}

// keepTail appends p to tail and keeps at most limit bytes of the end,
// cut so the kept part starts on a UTF-8 character boundary (at most
// utf8.UTFMax-1 continuation bytes dropped). truncated says bytes were
// already dropped before: then continuation bytes that begin the tail
// belong to a character whose start is gone. It reports whether bytes
// have been dropped, now or before.
func keepTail(tail, p []byte, limit int, truncated bool) ([]byte, bool) {
	if len(tail)+len(p) <= limit {
		tail = append(tail, p...)
	} else {
		truncated = true
		if len(p) >= limit {
			tail = append(tail[:0], p[len(p)-limit:]...)
		} else {
			drop := len(tail) + len(p) - limit
			n := copy(tail, tail[drop:])
			tail = append(tail[:n], p...)
		}
	}
	if !truncated {
		return tail, false
	}
	cut := 0
	for cut < len(tail) && cut < utf8.UTFMax-1 && !utf8.RuneStart(tail[cut]) {
		cut++
	}
	if cut > 0 {
		n := copy(tail, tail[cut:])
		tail = tail[:n]
	}
	return tail, true
}
