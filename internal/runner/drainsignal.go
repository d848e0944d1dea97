package runner

import "sync"

// drainSignal wakes the agent's flow-control gate (agent.Sink.DrainSignal,
// prp.md §8.5): wait returns a channel that the next fire closes. The ACK
// path fires it on prp.Client's ack routine, which no command blocks.
type drainSignal struct {
	// mu guards ch.
	mu sync.Mutex
	ch chan struct{}
}

// wait returns the channel the next fire closes.
func (s *drainSignal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// fire wakes every waiter; it never blocks.
func (s *drainSignal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// ackApplied runs after each ACK the store applied (the welcome's cursor
// or an ack frame): the outbox may now be drained.
func (r *loop) ackApplied() {
	if r.exec != nil {
		r.exec.drained.fire()
	}
}
