package prp

import (
	"log/slog"
	"testing"
	"time"
)

// Internals that the external tests (package prp_test) use. Those tests
// run the runner half against a control.Core, so they cannot be in package
// prp (package control imports prp); they reach these names only here.
const (
	MaxUnauthenticatedPeers = maxUnauthenticatedPeers
	PeerLogInterval         = peerLogInterval
	TestRunPath             = testRunPath
	MaxUnackedEventBytes    = maxUnackedEventBytes
)

// FrameCost is frameCost: what a plaintext costs in the send window.
func FrameCost(pt []byte) int { return frameCost(pt) }

// ListenerPeers counts the listener's unauthenticated peers.
func ListenerPeers(l *Listener) int { return l.peers.len() }

// NewPipeListener is pipeListener: a Listener without a socket, fed
// upgrades through its ServeHTTP. Close it with ClosePipeListener.
func NewPipeListener(path string) *Listener { return pipeListener(path) }

// ClosePipeListener is closePipeListener.
func ClosePipeListener(l *Listener) { closePipeListener(l) }

// RawUpgrade is rawUpgrade: one hand-written upgrade request over TCP,
// returning the HTTP status.
func RawUpgrade(t *testing.T, addr, target, extra string) int {
	return rawUpgrade(t, addr, target, extra)
}

// SetPongSent sets the ClientConfig's pong observer (benchmarks).
func SetPongSent(c *ClientConfig, f func(time.Duration)) { c.pongSent = f }

// SetListenerLogger replaces a pipe listener's logger.
func SetListenerLogger(l *Listener, log *slog.Logger) { l.log = log }
