package prp

import "errors"

// Session is one authenticated secure channel (spec §2.2): the session id,
// the negotiated version, the bound identity and connection, and the two
// direction keys with their counters.
//
// Seal and Open are not safe for concurrent use per direction: exactly one
// writer goroutine seals (so the counter order equals the send order) and
// exactly one reader goroutine opens. A Seal and an Open may run concurrently.
type Session struct {
	// ID is the session id, "sha256:" + hex(binding).
	ID string
	// Version is the negotiated PRP version, fixed for the connection.
	Version int
	// Identity is the six identity fields the connection is bound to.
	Identity Identity
	// ConnectionID and ConnectionLeaseID come from the welcome.
	ConnectionID      string
	ConnectionLeaseID string
}

// Seal encrypts plaintext under the next outbound counter and returns the
// secure-frame JSON to send as one text message.
func (s *Session) Seal(plaintext []byte) ([]byte, error) {
	return nil, errors.New("seal frame: not implemented")
}

// Open parses a secure frame, requires the next inbound counter, and returns
// the plaintext. Any error is fatal for the connection.
func (s *Session) Open(frame []byte) ([]byte, error) {
	return nil, errors.New("open frame: not implemented")
}
