package agent

import (
	"encoding/json"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/terminal"
)

// terminalLocked answers terminal/* when the session's record says
// initialize advertised terminal: true (tools.md §8); ok is false for any
// other request. A wait_for_exit whose command still runs gets no line
// here: answerTerminalWait writes it when the exit arrives, so the read
// loop never blocks on a command. m.mu held.
func (m *Manager) terminalLocked(in provider.Inbound) ([][]byte, bool) {
	if !terminal.IsMethod(in.Method) || !m.cl.ClientCapabilities().Terminal {
		return nil, false
	}
	rec := m.cl.Record()
	var result any
	var err error
	if in.Method == terminal.MethodCreate {
		var req terminal.CreateRequest
		if req, err = terminal.DecodeCreate(in.Params); err == nil {
			if err = checkTerminalSession(rec, req.SessionID); err == nil {
				result, err = m.terms.Create(req, m.fsRoots(rec.Cwd).Cwd, m.terminalEnvLocked())
			}
		}
	} else {
		var req terminal.Request
		if req, err = terminal.DecodeRequest(in.Params); err == nil {
			err = checkTerminalSession(rec, req.SessionID)
		}
		if err == nil {
			switch in.Method {
			case terminal.MethodOutput:
				result, err = m.terms.Output(req)
			case terminal.MethodWaitForExit:
				var st terminal.ExitStatus
				var done bool
				st, done, err = m.terms.WaitForExit(req, in.ID)
				if err == nil && !done {
					return nil, true // answered by answerTerminalWait
				}
				result = st
			case terminal.MethodKill:
				err = m.terms.Kill(req)
				result = terminal.KillResult{}
			default:
				err = m.terms.Release(req)
				result = terminal.ReleaseResult{}
			}
		}
	}
	return m.answerClientLocked(in, result, err, "client terminal"), true
}

// checkTerminalSession refuses a request for another session than this one.
func checkTerminalSession(rec provider.Record, id string) error {
	if id != rec.ACPSessionID {
		return &terminal.Error{Code: terminal.CodeResourceNotFound, Message: "unknown session"}
	}
	return nil
}

// terminalEnvLocked is a terminal's base environment: the agent's
// allowlist (acp.md §2.2, tools.md §8). m.mu held.
func (m *Manager) terminalEnvLocked() []string {
	env, _ := acpx.AgentEnv(m.agentName(), m.cfg.Environ)
	return env
}

// answerTerminalWait writes the deferred answer of a wait_for_exit, on
// the terminal's goroutine: committed like any other line (acp.md §3.2).
// Nothing is written to an agent that is gone.
func (m *Manager) answerTerminalWait(id json.RawMessage, st terminal.ExitStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil || m.proc.lost || m.cl == nil {
		return
	}
	line, err := m.cl.Respond(id, st)
	if err != nil {
		return
	}
	if err := m.commitThenWriteLocked(nil, [][]byte{line}); err != nil {
		m.log.Warn("write a terminal exit answer", "err", err)
	}
}
