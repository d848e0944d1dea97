// Package sessiondir holds the process-session directory contract
// (spec pcwrap-protocol.md §3): its layout and file names, and the
// wrapper's side of the identity and birth-time checks. The bodies that
// cross it (frames, stdin messages) are encoded by package frame. The client half (writing stdin files, consuming event
// files) lives in the client*/writer*/reader* files of this package.
package sessiondir

// Names inside a session directory (spec §3).
const (
	// StdinDir is the stdin queue directory, relative to the session dir.
	StdinDir = "stdin"
	// EventsDir holds event files in events output mode.
	EventsDir = "events"
	// CommandFile is the staged command payload for large payloads (§2.3).
	CommandFile = "command.b64"
	// LockFile is flocked exclusively by pcwrap for its lifetime (§3, beyond).
	LockFile = ".pcwrap.lock"
	// ChildFile records the child's {pgid,startTime} after spawn (§2.4, beyond).
	ChildFile = ".pcwrap.child"
	// SeqFile is the last-used stdin sequence of pcwrap send/stop (§10).
	SeqFile = ".pcwrap-stdin-seq"
	// ProbePrefix starts every birth-time probe file name (§5.2).
	ProbePrefix = ".paperclip-birthtime-probe-"
	// JSONSuffix ends every queue and event file name (§6.2).
	JSONSuffix = ".json"
	// TmpSuffix is appended to an event file name while it is written (§7.2).
	TmpSuffix = ".tmp"
)

// Environment variables of the launch contract (spec §2.2).
const (
	EnvDir        = "PAPERCLIP_PROCESS_SESSION_DIR"
	EnvCommandB64 = "PAPERCLIP_PROCESS_SESSION_COMMAND_B64"
	EnvMaxRetries = "PAPERCLIP_PROCESS_SESSION_STDIN_MAX_RETRIES"
	EnvGraceMS    = "PAPERCLIP_PROCESS_SESSION_TERMINATE_GRACE_MS"
	EnvOutput     = "PAPERCLIP_PROCESS_SESSION_OUTPUT"
	// EnvKeepGroup = "1" keeps the child's process group running after
	// the leader exits, until terminate() (beyond: client terminals,
	// tools.md §8, whose background jobs outlive their leader). Agents
	// leave it unset and keep the drain and group kill of §8.1 item 4.
	EnvKeepGroup = "PAPERCLIP_PROCESS_SESSION_KEEP_GROUP_ON_EXIT"
	// EnvPrefix: every variable starting with it is stripped from the child env (§2.4).
	EnvPrefix = "PAPERCLIP_PROCESS_SESSION"
)

// Output modes (spec §0, §2.1).
const (
	OutputEvents = "events"
	OutputStdout = "stdout"
)

// ParseTuning reads a tuning variable as the reference does: JavaScript
// parseInt(v, 10) (leading integer prefix, white space skipped), used only
// if positive; otherwise def.
func ParseTuning(v string, def int64) int64 {
	n, ok := ParseSeq(v)
	if !ok || n <= 0 {
		return def
	}
	return n
}
