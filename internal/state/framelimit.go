package state

// A secure frame carries an envelope's ciphertext as hex with its tag and
// a fixed header: 2×(len+sealTagBytes)+sealOverheadBytes bytes for len
// encoded bytes (workspace.md §3.4).
const (
	sealTagBytes      = 16
	sealOverheadBytes = 128
)

// SealedFrameBytes is the size of the secure frame that carries an
// envelope of n encoded bytes.
func SealedFrameBytes(n int) int { return 2*(n+sealTagBytes) + sealOverheadBytes }

// frameLimit is the frame limit an event must fit: MaxFrameBytes, or the
// connection's smaller one (Config.FrameLimit).
func (s *Store) frameLimit() int {
	limit := s.cfg.MaxFrameBytes
	if s.cfg.FrameLimit != nil {
		if n := s.cfg.FrameLimit(); n > 0 {
			limit = min(limit, n)
		}
	}
	return limit
}

// frameFits reports whether an envelope of n encoded bytes, sealed, fits
// the frame limit. The outbox refuses one that does not: sent in order,
// every send of it would fail and it would stall every event behind it.
func (s *Store) frameFits(n int) bool { return SealedFrameBytes(n) <= s.frameLimit() }
