package mcpbridge

import (
	"context"
	"encoding/json"
)

// pendingCall is one tools/call waiting for its Handler.
type pendingCall struct {
	cancel context.CancelFunc
}

type admission int

const (
	admitted    admission = iota
	admitClosed           // the server is closing: the call is cancelled
	admitFull             // maxPending calls already wait
)

// admit registers a pending call, or says why not.
func (s *Server) admit(id string, pc *pendingCall) admission {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return admitClosed
	}
	if s.npending >= maxPending {
		return admitFull
	}
	calls := s.pending[id]
	if calls == nil {
		calls = make(map[*pendingCall]struct{}, 1)
		s.pending[id] = calls
	}
	calls[pc] = struct{}{}
	s.npending++
	return admitted
}

func (s *Server) release(id string, pc *pendingCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls := s.pending[id]
	if _, ok := calls[pc]; !ok {
		return
	}
	delete(calls, pc)
	if len(calls) == 0 {
		delete(s.pending, id)
	}
	s.npending--
}

// cancelCall cancels every pending call with this JSON-RPC id (a client
// should have one; MCP ids are unique per session and direction).
func (s *Server) cancelCall(id json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pc := range s.pending[string(id)] {
		pc.cancel()
	}
}
