package prp

import (
	"container/list"
	"net"
	"sync"
	"sync/atomic"
)

// maxUnauthenticatedPeers bounds the listener's connections that have not
// authenticated yet (TCP accepted, upgrading or in the handshake). A flood
// of half-open connections must not take the descriptors the state store
// needs: with runnerd at `prlimit --nofile=1024` about 1,500 of them make the
// next state save fail with EMFILE. 256 stays far below that
// limit and far above what the core needs (one connection per reconnect,
// plus the preview proxy's retries).
const maxUnauthenticatedPeers = 256

// Progress of an unauthenticated peer. Eviction takes the least advanced,
// oldest first, and never one that completed a step of the handshake.
const (
	peerSilent   int32 = iota // accepted; no byte received yet
	peerSending               // bytes received; no complete upgrade yet
	peerUpgraded              // the WebSocket upgrade completed: never evicted
)

// peerSet tracks unauthenticated listener connections, oldest first.
type peerSet struct {
	max int

	// mu guards order and each member peer's elem.
	mu    sync.Mutex
	order list.List // of *peer; guarded by mu
}

// peer is one tracked connection. It leaves the set when it is closed or
// when it authenticates (release); closing it twice is harmless.
type peer struct {
	net.Conn
	set   *peerSet
	stage atomic.Int32
	elem  *list.Element // guarded by set.mu; nil once out of the set
}

// admit tracks c. When the set is full it evicts one peer (returned as
// victim for the caller to close and report); when no peer may be evicted
// it returns p == nil and the caller refuses c.
func (s *peerSet) admit(c net.Conn) (p, victim *peer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.order.Len() >= s.max {
		victim = s.victimLocked()
		if victim == nil {
			return nil, nil
		}
		s.order.Remove(victim.elem)
		victim.elem = nil
	}
	p = &peer{Conn: c, set: s}
	p.elem = s.order.PushBack(p)
	return p, victim
}

// victimLocked picks the oldest peer that has sent nothing (asking the
// kernel, so bytes not yet read still count as sent), else the oldest one
// that has sent bytes without completing the upgrade, else nil.
func (s *peerSet) victimLocked() *peer {
	for e := s.order.Front(); e != nil; e = e.Next() {
		p := e.Value.(*peer)
		if p.stage.Load() != peerSilent {
			continue
		}
		if bytesPending(p.Conn) {
			p.stage.CompareAndSwap(peerSilent, peerSending)
			continue
		}
		return p
	}
	for e := s.order.Front(); e != nil; e = e.Next() {
		if p := e.Value.(*peer); p.stage.Load() == peerSending {
			return p
		}
	}
	return nil
}

func (s *peerSet) remove(p *peer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.elem != nil {
		s.order.Remove(p.elem)
		p.elem = nil
	}
}

// len reports how many peers are tracked.
func (s *peerSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}

func (p *peer) Read(b []byte) (int, error) {
	n, err := p.Conn.Read(b)
	if n > 0 {
		p.stage.CompareAndSwap(peerSilent, peerSending)
	}
	return n, err
}

func (p *peer) Close() error {
	p.set.remove(p)
	return p.Conn.Close()
}

// upgraded marks a completed WebSocket upgrade. p may be nil (a Listener
// without a socket, in tests).
func (p *peer) upgraded() {
	if p != nil {
		p.stage.Store(peerUpgraded)
	}
}

// release stops counting an authenticated peer; its connection stays open.
func (p *peer) release() {
	if p != nil {
		p.set.remove(p)
	}
}

// limitListener admits every accepted connection into a peerSet.
type limitListener struct {
	net.Listener
	set *peerSet
	// dropped reports an evicted or refused connection ("evicted", "refused").
	dropped func(what string, addr net.Addr)
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, victim := l.set.admit(c)
		if victim != nil {
			_ = victim.Conn.Close()
			l.dropped("evicted", victim.RemoteAddr())
		}
		if p == nil {
			_ = c.Close()
			l.dropped("refused", c.RemoteAddr())
			continue
		}
		return p, nil
	}
}
