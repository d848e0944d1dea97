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

// clientFSLocked answers fs/read_text_file and fs/write_text_file when the
// session's record says initialize advertised them; ok is false for any
// other request, which then gets -32601 like any unknown method. The answer is made
// here, in stream order, so it is committed with the event file that
// carried the request (a restart re-reads and re-answers an uncommitted
// one; a write is idempotent). m.mu held.
func (m *Manager) clientFSLocked(in provider.Inbound) ([][]byte, bool) {
	caps := m.cl.ClientCapabilities()
	if !(in.Method == clientfs.MethodReadTextFile && caps.FS.ReadTextFile) &&
		!(in.Method == clientfs.MethodWriteTextFile && caps.FS.WriteTextFile) {
		return nil, false
	}
	rec := m.cl.Record()
	roots := m.fsRoots(rec.Cwd)
	var result any
	var err error
	switch in.Method {
	case clientfs.MethodReadTextFile:
		var req clientfs.ReadRequest
		if req, err = clientfs.DecodeRead(in.Params); err == nil {
			if err = checkFSSession(rec, req.SessionID); err == nil {
				result, err = clientfs.Read(roots, req)
			}
		}
	default:
		var req clientfs.WriteRequest
		if req, err = clientfs.DecodeWrite(in.Params); err == nil {
			if err = checkFSSession(rec, req.SessionID); err == nil {
				err = clientfs.Write(roots, req)
				result = clientfs.WriteResult{}
			}
		}
	}
	return m.answerClientLocked(in, result, err, "client file system"), true
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
