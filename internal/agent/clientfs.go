package agent

import (
	"errors"

	"github.com/pcrunner/pcrunner/internal/clientfs"
	"github.com/pcrunner/pcrunner/internal/provider"
)

// advertiseLocked records the client capabilities the next initialize
// advertises: fs unless the descriptor turned it off. A
// resumed session keeps what its record says it was promised, so the
// agent's contract never changes under it. m.mu held.
func (m *Manager) advertiseLocked(b *Binding, resume bool) {
	if resume && m.cl.Record().ClientCapabilities != nil {
		return
	}
	var caps provider.ClientCapabilities
	if !resume && !b.NoClientFS {
		caps.FS = provider.FSCapabilities{ReadTextFile: true, WriteTextFile: true}
	}
	caps.Terminal = !resume && !b.NoClientTerminal
	m.cl.SetClientCapabilities(caps)
}

// clientFSLocked takes fs/read_text_file and fs/write_text_file when the
// session's record says initialize advertised them; ok is false for any
// other request, which then gets -32601 like any unknown method. A request
// it refuses is answered at once (lines); an accepted one becomes op, which
// the caller runs without m.mu (the file work, a write's fsyncs) and
// answers in stream order, so the answer is committed with the event file
// that carried the request (a restart re-reads and re-answers an
// uncommitted one; a write is idempotent). m.mu held.
func (m *Manager) clientFSLocked(in provider.Inbound) (lines [][]byte, op *clientOp, ok bool) {
	caps := m.cl.ClientCapabilities()
	if !(in.Method == clientfs.MethodReadTextFile && caps.FS.ReadTextFile) &&
		!(in.Method == clientfs.MethodWriteTextFile && caps.FS.WriteTextFile) {
		return nil, nil, false
	}
	const what = "client file system"
	rec := m.cl.Record()
	roots := m.fsRoots(rec.Cwd)
	switch in.Method {
	case clientfs.MethodReadTextFile:
		req, err := clientfs.DecodeRead(in.Params)
		if err == nil {
			err = checkFSSession(rec, req.SessionID)
		}
		if err != nil {
			return m.answerClientLocked(in, nil, err, what), nil, true
		}
		return nil, &clientOp{in: in, what: what, run: func() (any, bool, error) {
			res, err := clientfs.Read(roots, req)
			return res, true, err
		}}, true
	default:
		req, err := clientfs.DecodeWrite(in.Params)
		if err == nil {
			err = checkFSSession(rec, req.SessionID)
		}
		if err != nil {
			return m.answerClientLocked(in, nil, err, what), nil, true
		}
		return nil, &clientOp{in: in, what: what, run: func() (any, bool, error) {
			return clientfs.WriteResult{}, true, clientfs.Write(roots, req)
		}}, true
	}
}

// clientOp is an accepted client-side request (file system, terminals)
// whose work may block: it runs without m.mu (runClientOpLocked).
type clientOp struct {
	in   provider.Inbound
	what string // the kind of request, for the log
	// run does the work; answer is false when the answer comes later
	// (a terminal's wait_for_exit while the command runs).
	run func() (result any, answer bool, err error)
	// abandon undoes what run made when its answer is dropped (a terminal
	// created for a session that ended meanwhile); nil when nothing needs it.
	abandon func(result any)
}

// runClientOpLocked runs op with m.mu released and returns its answer
// lines. ok is false when, meanwhile, p stopped being the live process or
// the ACP client changed: the caller stops handling p's messages (the
// event file stays unconsumed). m.mu held on entry and on return.
func (m *Manager) runClientOpLocked(p *process, op *clientOp) (lines [][]byte, ok bool) {
	cl := m.cl
	m.mu.Unlock()
	result, answer, err := op.run()
	m.mu.Lock()
	if m.proc != p || m.cl != cl {
		if op.abandon != nil && err == nil {
			op.abandon(result)
		}
		return nil, false
	}
	if !answer {
		return nil, true
	}
	return m.answerClientLocked(op.in, result, err, op.what), true
}

// answerClientLocked is the answer line of a client-side request (file
// system, terminals): the result, the refusal as its JSON-RPC error, or a
// fixed internal error that never carries err's text. m.mu held.
func (m *Manager) answerClientLocked(in provider.Inbound, result any, err error, what string) [][]byte {
	var line []byte
	var e *provider.ClientError
	switch {
	case errors.As(err, &e):
		m.log.Info("refused a "+what+" request", "method", in.Method, "code", e.Code)
		line, err = m.cl.RespondError(in.ID, e.Code, e.Message)
	case err != nil:
		m.log.Warn(what+" request failed", "method", in.Method, "err", err)
		line, err = m.cl.RespondError(in.ID, provider.CodeInternalError, what+" failure")
	default:
		line, err = m.cl.Respond(in.ID, result)
	}
	if err != nil {
		return nil
	}
	return [][]byte{line}
}

// checkFSSession refuses a request for another session than this one.
func checkFSSession(rec provider.Record, id string) error {
	if id != rec.ACPSessionID {
		return &clientfs.Error{Code: clientfs.CodeResourceNotFound, Message: "unknown session"}
	}
	return nil
}

// fsRoots is the session's file system: the cwd session/new or
// session/resume was given. runnerd sends no additionalDirectories, so
// there are none. Writes are refused under deny-all (tools.md §8). m.mu
// held.
func (m *Manager) fsRoots(cwd string) clientfs.Roots {
	r := clientfs.Roots{Cwd: cwd}
	if b := m.st.Binding; b != nil {
		if r.Cwd == "" {
			r.Cwd = b.Cwd
		}
		r.ReadOnly = b.PermissionMode == provider.DenyAll
	}
	return r
}
