package agent

import (
	"encoding/json"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/terminal"
)

// terminalLocked takes terminal/* when the session's record says
// initialize advertised terminal: true (tools.md §8); ok is false for any
// other request. A request it refuses is answered at once (lines); an
// accepted one becomes op, run without m.mu (a create spawns pcwrap). A
// wait_for_exit whose command still runs gets no line: answerTerminalWait
// writes it when the exit arrives, so the read loop never blocks on a
// command. m.mu held.
func (m *Manager) terminalLocked(in provider.Inbound) (lines [][]byte, op *clientOp, ok bool) {
	if !terminal.IsMethod(in.Method) || !m.cl.ClientCapabilities().Terminal {
		return nil, nil, false
	}
	const what = "client terminal"
	rec := m.cl.Record()
	refuse := func(err error) ([][]byte, *clientOp, bool) {
		return m.answerClientLocked(in, nil, err, what), nil, true
	}
	accept := func(run func() (any, bool, error)) ([][]byte, *clientOp, bool) {
		return nil, &clientOp{in: in, what: what, run: run}, true
	}
	if in.Method == terminal.MethodCreate {
		req, err := terminal.DecodeCreate(in.Params)
		if err == nil {
			err = checkTerminalSession(rec, req.SessionID)
		}
		if err != nil {
			return refuse(err)
		}
		cwd, env := m.fsRoots(rec.Cwd).Cwd, m.terminalEnvLocked()
		lines, op, ok := accept(func() (any, bool, error) {
			res, err := m.terms.Create(req, cwd, env)
			return res, true, err
		})
		op.abandon = func(res any) {
			// Its session ended while it started: nobody will release it.
			_ = m.terms.Release(terminal.Request{SessionID: req.SessionID, TerminalID: terminal.CreatedID(res)})
		}
		return lines, op, ok
	}
	req, err := terminal.DecodeRequest(in.Params)
	if err == nil {
		err = checkTerminalSession(rec, req.SessionID)
	}
	if err != nil {
		return refuse(err)
	}
	switch in.Method {
	case terminal.MethodOutput:
		return accept(func() (any, bool, error) {
			res, err := m.terms.Output(req)
			return res, true, err
		})
	case terminal.MethodWaitForExit:
		return accept(func() (any, bool, error) {
			st, done, err := m.terms.WaitForExit(req, in.ID)
			return st, done || err != nil, err
		})
	case terminal.MethodKill:
		return accept(func() (any, bool, error) { return terminal.KillResult{}, true, m.terms.Kill(req) })
	default:
		return accept(func() (any, bool, error) { return terminal.ReleaseResult{}, true, m.terms.Release(req) })
	}
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
