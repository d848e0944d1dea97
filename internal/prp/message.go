package prp

import "errors"

// ErrControlIdentity reports a control envelope whose identity, connection,
// lease or version differs from the authenticated connection (spec §3.2).
var ErrControlIdentity = errors.New("control identity mismatch")

// ValidateControlIdentity checks a core→runner control envelope against the
// authenticated session (R-transport validate_control_identity).
func ValidateControlIdentity(env *Envelope, s *Session) error {
	return errors.New("validate control identity: not implemented")
}
