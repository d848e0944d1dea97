package prp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// digestJSON is the canonical JSON CanonicalDigest hashes: Canonical (the
// reference's canonicalJson). Canonical refuses values above the core's node and
// depth bounds, but the reference runner fingerprints commands of any size
// (R-state canonical_json), so such a value falls back to an unbounded
// encoding with sorted keys. The choice depends only on the input, so a
// fingerprint is stable.
func digestJSON(raw []byte) ([]byte, error) {
	c, err := Canonical(json.RawMessage(raw))
	if err == nil || !errors.Is(err, ErrCanonicalTooLarge) {
		return c, err
	}
	return unboundedCanonicalJSON(raw)
}

// unboundedCanonicalJSON sorts object keys at every level and writes no
// insignificant whitespace; numbers keep their text.
func unboundedCanonicalJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonicalize json: %w", err)
	}
	var buf bytes.Buffer
	if err := writeUnboundedCanonical(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeUnboundedCanonical(buf *bytes.Buffer, v any) error {
	switch t := v.(type) {
	case map[string]any:
		buf.WriteByte('{')
		for i, k := range slices.Sorted(maps.Keys(t)) {
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, err := jsonenc.Marshal(k)
			if err != nil {
				return err
			}
			buf.Write(kb)
			buf.WriteByte(':')
			if err := writeUnboundedCanonical(buf, t[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeUnboundedCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	default:
		b, err := jsonenc.Marshal(t)
		if err != nil {
			return fmt.Errorf("canonicalize json: %w", err)
		}
		buf.Write(b)
	}
	return nil
}

// CanonicalDigest is the lower-case hex SHA-256 of the canonical JSON of
// raw: the command fingerprint of the journal (prp.md §7.2) and the
// executor-event fingerprint (§9.4).
func CanonicalDigest(raw []byte) (string, error) {
	c, err := digestJSON(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}
