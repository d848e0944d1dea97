package acpx

import "time"

// Startup and cancel bounds (acp.md §4, §7).
const (
	// ResumeOpenBound bounds an adopt/resume session.open
	// (--session-open-resume-timeout-ms).
	ResumeOpenBound = 30 * time.Second
	// coldOpenBoundSlow bounds a cold session.open for claude, pi and
	// opencode (--session-open-cold-timeout-agent).
	coldOpenBoundSlow = 60 * time.Second
	// ColdOpenBoundDefault bounds a cold session.open for codex and every
	// other agent (--session-open-cold-timeout-ms).
	ColdOpenBoundDefault = 30 * time.Second
	// CancelGrace is how long a cancelled prompt may take to settle before
	// the agent is stopped (--cancel-grace-ms).
	CancelGrace = 5 * time.Second
	// lossDeadline bounds a turn after its agent channel is lost
	// (--loss-deadline-ms, acp.md §5.1).
	lossDeadline = 30 * time.Second
	// loadReplayQuiet and loadReplayMax bound the wait for quiet after a
	// session/load answer (acpx).
	loadReplayQuiet = 80 * time.Millisecond
	loadReplayMax   = 5 * time.Second
	// AgentStopWait is pcwrap's 3000 ms grace plus acpx's 1000 ms kill wait.
	AgentStopWait = 4 * time.Second
	// MaxConcurrentColdStarts is the cold-start gate (Paperclip
	// ACPX_MAX_CONCURRENT_SESSION_INITS); coldStartGateMaxWait is its
	// fail-open wait (ACPX_SESSION_INIT_GATE_MAX_WAIT_MS).
	MaxConcurrentColdStarts = 4
	coldStartGateMaxWait    = 10 * time.Minute
)

// agentCommands maps a known agent to its command and cold bound
// (acp.md §2.1).
var agentCommands = map[string]struct {
	argv  []string
	bound time.Duration
}{
	"claude":   {[]string{"claude-agent-acp"}, coldOpenBoundSlow},
	"codex":    {[]string{"codex-acp"}, ColdOpenBoundDefault},
	"pi":       {[]string{"pi-acp"}, coldOpenBoundSlow},
	"opencode": {[]string{"opencode", "acp"}, coldOpenBoundSlow},
	"gemini":   {[]string{"gemini", "--acp"}, ColdOpenBoundDefault},
}

// AgentCommand returns the argv for a known agent; ok is false for an
// unknown name (which then needs an explicit command).
func AgentCommand(agent string) (argv []string, ok bool) {
	a, ok := agentCommands[agent]
	if !ok {
		return nil, false
	}
	return append([]string(nil), a.argv...), true
}

// OpenBound is the session.open bound for agent: the resume bound when
// resuming or adopting, else the agent's cold bound. The bound follows the
// agent name even when the command is overridden (tests run fakeacp as
// claude).
func OpenBound(agent string, resume bool) time.Duration {
	if resume {
		return ResumeOpenBound
	}
	if a, ok := agentCommands[agent]; ok {
		return a.bound
	}
	return ColdOpenBoundDefault
}
