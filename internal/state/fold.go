package state

import (
	"encoding/json"
	"strings"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// foldFrameShare: a folded run's payloads stay under 1/foldFrameShare of
// the frame bound, which leaves room for the envelope, for escaping and for
// sealing, which doubles the size (SealedFrameBytes; the outbox's own merge
// still checks the merged envelope against the bound).
const foldFrameShare = 4

// Fold is fold with the store's bound.
func (tx *Tx) Fold(evs []Event) []Event { return fold(evs, tx.s.cfg.MaxFrameBytes/foldFrameShare) }

// fold merges each run of consecutive P2 events of one type and
// CoalesceKey into one event, with the payload the outbox's one-by-one
// merge would give (mergeDelta applied left to right), but decoding each
// payload once and encoding the run once. A batch enqueued event by event
// otherwise re-decodes and re-encodes the growing merged event on every
// delta (10,000 chunks in one turn took 3.5x as long). The outbox still
// merges the first folded event into an unsent predecessor. A run stops
// before its payloads pass maxBytes, so the merged envelope stays under the
// frame bound, and at a payload that is not a JSON object.
func fold(evs []Event, maxBytes int) []Event {
	out := make([]Event, 0, len(evs))
	for i := 0; i < len(evs); {
		j, size := i+1, len(evs[i].Payload)
		for j < len(evs) && foldable(evs[i], evs[j]) && size+len(evs[j].Payload) <= maxBytes {
			size += len(evs[j].Payload)
			j++
		}
		if j-i == 1 {
			out = append(out, evs[i])
			i++
			continue
		}
		merged, n := mergeRun(evs[i:j])
		ev := evs[i]
		ev.Payload = merged
		out = append(out, ev)
		i += n
	}
	return out
}

func foldable(a, b Event) bool {
	return a.Priority == P2 && b.Priority == P2 && a.CoalesceKey != "" &&
		a.Type == b.Type && a.CoalesceKey == b.CoalesceKey
}

// mergeRun merges the payloads of run into one and reports how many events
// it took (at least one): it stops before a payload that is not an object.
func mergeRun(run []Event) (json.RawMessage, int) {
	var cur map[string]json.RawMessage
	if err := json.Unmarshal(run[0].Payload, &cur); err != nil || cur == nil {
		return run[0].Payload, 1
	}
	texts := map[string]*strings.Builder{} // concatFields holding a string
	joined := map[string]bool{}            // texts that a later string joined
	for k, v := range cur {
		if concatFields[k] {
			var s string
			if json.Unmarshal(v, &s) == nil {
				texts[k] = &strings.Builder{}
				texts[k].WriteString(s)
			}
		}
	}
	n := 1
	for _, e := range run[1:] {
		var next map[string]json.RawMessage
		if err := json.Unmarshal(e.Payload, &next); err != nil || next == nil {
			break
		}
		for k, v := range next {
			var s string
			if concatFields[k] && json.Unmarshal(v, &s) == nil {
				if b := texts[k]; b != nil {
					b.WriteString(s)
					joined[k] = true
					continue
				}
				// mergeDelta joins only two strings; otherwise the newest
				// value wins, and later strings join onto it.
				cur[k] = v
				texts[k] = &strings.Builder{}
				texts[k].WriteString(s)
				continue
			}
			cur[k] = v
			delete(texts, k)
			delete(joined, k)
		}
		n++
	}
	for k, b := range texts {
		if !joined[k] {
			continue // a lone string keeps its bytes, as mergeDelta keeps them
		}
		enc, err := jsonenc.Marshal(b.String())
		if err != nil {
			return run[0].Payload, 1
		}
		cur[k] = enc
	}
	out, err := jsonenc.Marshal(cur)
	if err != nil {
		return run[0].Payload, 1
	}
	return out, n
}
