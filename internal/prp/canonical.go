package prp

import (
	"errors"
)

// Canonical returns the canonical JSON of v exactly as the reference's
// canonicalJson produces it: keys sorted by UTF-16 code units at every level,
// compact, no HTML escaping, JavaScript number and string formatting, at most
// MaxCanonicalDepth levels and MaxCanonicalNodes values. v is any value
// encoding/json can marshal; a json.RawMessage or []byte is taken as JSON text.
func Canonical(v any) ([]byte, error) {
	return nil, errors.New("canonical: not implemented")
}
