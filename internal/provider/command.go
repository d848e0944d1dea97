package provider

// CodeCommandExecutionFailed is the result code of a command that failed
// for a reason no more specific code names.
const CodeCommandExecutionFailed = "command_execution_failed"

// CommandError is a failed command with a protocol-named code; its Message
// is a fixed text, never provider output. Rejected marks a refusal before
// any effect: the command result's status is rejected, not failed.
type CommandError struct {
	Code     string
	Message  string
	Rejected bool
}

func (e *CommandError) Error() string { return e.Message }

// Failed is a CodeCommandExecutionFailed error with the fixed text msg.
func Failed(msg string) error { return &CommandError{Code: CodeCommandExecutionFailed, Message: msg} }

// Tool-flow answers a driver gives the agent (tools.md §2–§4). They are
// fixed texts: never a value from the arguments or the server.
const (
	TextNoTurn           = "No Paperclip turn is active."
	TextIdentityConflict = "Duplicate call identity conflict."
	TextStopped          = "Paperclip stopped the active provider turn"
)
