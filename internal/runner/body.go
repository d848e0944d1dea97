package runner

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/outputbody"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
)

// minBodyProtocolVersion is the first PRP version whose event enum has
// output.body.chunk (workspace.md §7.1): on v1, previews only.
const minBodyProtocolVersion = 2

// Diagnostic codes of the body path.
const (
	// codeBodySkipped: the body did not fit the outbox room, the frame
	// limit or the batch; the carrier went with its preview (workspace.md
	// §7.6).
	codeBodySkipped = "output_body_skipped"
	// codeBodyInvalid: a chunk failed the runner's own check, a runner bug
	// (workspace.md §7.5).
	codeBodyInvalid = "output_body_invalid"
)

// bodyCarrier is an event whose full text may travel as a body:
// item.completed of a message or a thought, tool.execution.completed of a
// tool's output.
type bodyCarrier struct {
	// Event is the event as it goes without a body, its payload holding
	// the usual inline text.
	Event state.Event
	// Text is the full text (up to outputbody.MaxBodyBytes; more is cut).
	Text string
	// TextField names the payload's inline text ("text", "output") and
	// TruncatedField the flag saying it is cut ("textTruncated",
	// "outputTruncated").
	TextField, TruncatedField string
}

// bodyOutcome says how a carrier went.
type bodyOutcome int

// Outcomes of enqueueBody.
const (
	// bodyInline: no body (short text or a v1 lease); the carrier as it was.
	bodyInline bodyOutcome = iota
	// bodyAttached: the chunks, then the carrier with outputBody.
	bodyAttached
	// bodySkipped: the carrier with its preview only, and a diagnostic.
	bodySkipped
)

// enqueueBody adds c to the outbox in tx (workspace.md §7): a text over
// the threshold on a v2 lease is sanitised as the outbox would, cut into
// chunks, and committed as the chunks followed by the carrier with
// outputBody, all in one group. When the group does not fit, the carrier
// goes with its preview only, plus harness.diagnostic output_body_skipped:
// a body never costs its carrier. With a body or without, the carrier's
// inline text is cut to the threshold, so that it fits where the body did
// not.
func enqueueBody(tx *state.Tx, c bodyCarrier) (bodyOutcome, error) {
	if tx.EventProtocolVersion() < minBodyProtocolVersion || len(c.Text) <= outputbody.Threshold {
		_, err := tx.Enqueue(c.Event)
		return bodyInline, err
	}
	clean := state.RedactSecrets(c.Text)
	preview, err := c.payload(clean, nil)
	if err != nil {
		return bodyInline, err
	}
	carrier := c.Event
	carrier.Payload, carrier.CoalesceKey = preview, ""
	body, err := outputbody.Cut(clean)
	if err == nil {
		err = checkBody(body)
	}
	if err != nil {
		return bodySkipped, skipBody(tx, carrier, prp.EventRunnerDiagnostic, codeBodyInvalid, "an output body failed the runner's own check; its preview was sent")
	}
	group := make([]state.Event, 0, len(body.Chunks)+1)
	for _, ch := range body.Chunks {
		p, err := jsonenc.Marshal(ch)
		if err != nil {
			return bodyInline, err
		}
		group = append(group, state.Event{Type: prp.EventOutputBodyChunk, Priority: state.P1, Payload: p})
	}
	withBody := carrier
	if withBody.Payload, err = c.payload(clean, &body.Ref); err != nil {
		return bodyInline, err
	}
	group = append(group, withBody)
	_, err = tx.EnqueueGroup(group, outputbody.MaxBatchEvents)
	if errors.Is(err, state.ErrChunkRewritten) {
		return bodySkipped, skipBody(tx, carrier, prp.EventRunnerDiagnostic, codeBodyInvalid, "the outbox would rewrite an output body chunk; its preview was sent")
	}
	if errors.Is(err, state.ErrGroupDoesNotFit) {
		return bodySkipped, skipBody(tx, carrier, prp.EventHarnessDiagnostic, codeBodySkipped,
			fmt.Sprintf("an output body of %d chunks does not fit the outbox; its preview was sent", len(body.Chunks)))
	}
	if err != nil {
		return bodyInline, err
	}
	return bodyAttached, nil
}

// checkBody applies outputbody.Check to every chunk with the outbox's
// sanitiser.
func checkBody(b outputbody.Body) error {
	for _, ch := range b.Chunks {
		if err := outputbody.Check(ch, state.RedactSecrets); err != nil {
			return err
		}
	}
	return nil
}

// skipBody enqueues the carrier with its preview and a diagnostic saying why
// it has no body.
func skipBody(tx *state.Tx, carrier state.Event, typ, code, message string) error {
	if _, err := tx.Enqueue(carrier); err != nil {
		return err
	}
	key := "code" // harness.diagnostic's; runner.diagnostic names it reasonCode
	if typ == prp.EventRunnerDiagnostic {
		key = "reasonCode"
	}
	p, err := jsonenc.Marshal(map[string]string{key: code, "message": message})
	if err != nil {
		return err
	}
	_, err = tx.Enqueue(state.Event{Type: typ, Priority: state.P1, Payload: p})
	return err
}

// payload is the carrier's payload with its inline text cut to the
// threshold and, when ref is set, outputBody.
func (c bodyCarrier) payload(text string, ref *outputbody.Ref) (json.RawMessage, error) {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(c.Event.Payload, &p); err != nil {
		return nil, fmt.Errorf("carrier payload: %w", err)
	}
	inline, _ := outputbody.Preview(text, outputbody.Threshold)
	p[c.TextField] = jsonenc.MustMarshal(inline)
	p[c.TruncatedField] = json.RawMessage("true")
	if ref != nil {
		p["outputBody"] = jsonenc.MustMarshal(ref)
	}
	return jsonenc.Marshal(p)
}
