// Package jsonenc is the one compact JSON encoder of runnerd and pcwrap's
// Go side: the bytes that go into runner-state.json and into PRP envelopes.
//
// Marshal writes what JSON.stringify and serde_json write for the values we
// build (struct field order, no insignificant whitespace, no HTML escaping),
// so the reference and this runner produce the same bytes (one difference:
// encoding/json always writes U+2028 and U+2029 as \u2028 and \u2029, which
// decode alike). MustMarshalEscaped is
// encoding/json's default form (<, > and & as \u003c, \u003e, \u0026); it
// exists only for the agent manager's command results, which have always
// been stored and sent in that form (the journal keeps them compacted, not
// re-encoded), so switching them would change bytes on disk and on the wire.
//
// Canonical JSON (sorted keys, JavaScript number formatting) is another
// thing: prp.Canonical, whose parser also serves the handshake and secure
// frames.
package jsonenc

import (
	"bytes"
	"encoding/json"
)

// Marshal encodes v compactly without HTML escaping and without the
// encoder's trailing newline.
func Marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// MustMarshal is Marshal for values the caller builds itself (maps and
// structs of strings, numbers and booleans), which cannot fail to encode; it
// panics otherwise, because that is a programming error.
func MustMarshal(v any) json.RawMessage {
	b, err := Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// MustMarshalEscaped is MustMarshal with HTML escaping on (json.Marshal's
// form). See the package comment for its one user.
func MustMarshalEscaped(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
