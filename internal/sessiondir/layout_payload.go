package sessiondir

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/pcrunner/pcrunner/internal/frame"
)

// ErrPayload is the one message for any payload failure (spec §2.3): fixed
// text, because a parse error could echo credentials.
var ErrPayload = errors.New("Failed to read sandbox process session command payload.")

// Payload is the decoded command payload (spec §2.3).
type Payload struct {
	Command string
	Args    []string
	Cwd     string
	// Env overlays pcwrap's environment, in the payload's key order.
	Env [][2]string
}

// DecodePayload decodes base64 (as leniently as Node) → UTF-8 → JSON.
// Every failure is ErrPayload and nothing else: no detail can leak
// payload bytes. args that is not an array counts as []; a non-string
// arg or env value is converted as JavaScript's String() would for
// numbers, booleans and null; other env values are skipped.
func DecodePayload(b64 string) (Payload, error) {
	raw := frame.DecodeBase64(b64)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return Payload{}, ErrPayload
	}
	var p Payload
	if err := json.Unmarshal(obj["command"], &p.Command); err != nil || p.Command == "" {
		return Payload{}, ErrPayload
	}
	var args []json.RawMessage
	if json.Unmarshal(obj["args"], &args) == nil {
		for _, a := range args {
			s, ok := jsString(a)
			if !ok {
				return Payload{}, ErrPayload
			}
			p.Args = append(p.Args, s)
		}
	}
	if c, ok := obj["cwd"]; ok {
		_ = json.Unmarshal(c, &p.Cwd) // a non-string cwd means pcwrap's own
	}
	if e, ok := obj["env"]; ok && len(e) > 0 && e[0] == '{' {
		env, err := orderedObject(e)
		if err != nil {
			return Payload{}, ErrPayload
		}
		for _, kv := range env {
			if s, ok := jsString(kv.v); ok {
				p.Env = append(p.Env, [2]string{kv.k, s})
			}
		}
	}
	return p, nil
}

// jsString converts a JSON scalar as String() would; objects and arrays
// are not converted.
func jsString(v json.RawMessage) (string, bool) {
	if len(v) == 0 {
		return "", false
	}
	switch v[0] {
	case '"':
		var s string
		if json.Unmarshal(v, &s) != nil {
			return "", false
		}
		return s, true
	case 't', 'f', 'n':
		return string(v), true
	case '{', '[':
		return "", false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return "", false
	}
	return strconv.FormatFloat(f, 'f', -1, 64), true
}

type rawKV struct {
	k string
	v json.RawMessage
}

// orderedObject decodes a JSON object keeping key order (later
// duplicates replace earlier ones in place, as in JavaScript).
func orderedObject(b []byte) ([]rawKV, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var out []rawKV
	idx := map[string]int{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if i, ok := idx[k]; ok {
			out[i].v = v
			continue
		}
		idx[k] = len(out)
		out = append(out, rawKV{k, v})
	}
	return out, nil
}
