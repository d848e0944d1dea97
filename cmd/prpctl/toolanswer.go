package main

// prpctl answers the agent's Paperclip tool calls as the core would
// (tools.md §3 item 4): every semantic_tool.input event gets one
// semantic_tool.result command, with the result the script or the flags
// set for its operation.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// Names of tools.md §3 and §4.
const (
	finishTool = "paperclip_finish"
	blockTool  = "paperclip_block"
)

// acceptedResult answers a reserved tool (paperclip_finish, paperclip_block)
// that the script gave no result for: the server's accepting answer, the
// success form of the rejection shape tools.md §4 names.
const acceptedResult = `{"success":true,"contentItems":[{"type":"inputText","text":"Paperclip accepted the result."}]}`

// missingResultText is the tool error a catalog operation without a
// configured result gets, so the agent is answered rather than left waiting.
const missingResultText = "prpctl has no result for this operation (set one with toolResults or --tool-result)"

// toolCore is the part of *control.Core the answerer uses.
type toolCore interface {
	Wait(ctx context.Context, cond func(s control.Snapshot) bool) error
	QueueCommand(cmd prp.Command) (prp.Command, error)
}

// toolAnswerer holds the results per operationId and queues one command per
// semantic_tool.input it sees.
type toolAnswerer struct {
	// mu guards results, failures, answered and queued.
	mu       sync.Mutex
	results  map[string]json.RawMessage   // standing answer per operation
	failures map[string][]json.RawMessage // isError answers, each used once, before results
	answered map[string]bool              // command ids queued
	queued   []string                     // command ids, in order
}

func newToolAnswerer() *toolAnswerer {
	return &toolAnswerer{results: map[string]json.RawMessage{}, failures: map[string][]json.RawMessage{},
		answered: map[string]bool{}}
}

// set applies a toolResults or toolErrors step.
func (a *toolAnswerer) set(results, failures map[string]json.RawMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for op, r := range results {
		a.results[op] = r
	}
	for op, r := range failures {
		a.failures[op] = append(a.failures[op], r)
	}
}

// commandIDs returns the ids of the commands queued so far.
func (a *toolAnswerer) commandIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.queued...)
}

// toolCommandID is tools.md §3 item 4's command id:
// command_tool_<first 32 hex of sha256(runId + "\0" + callId)>.
func toolCommandID(runID, callID string) string {
	sum := sha256.Sum256([]byte(runID + "\x00" + callID))
	return "command_tool_" + hex.EncodeToString(sum[:])[:32]
}

// toolInput is the part of a semantic_tool.input event prpctl reads.
type toolInput struct {
	EventID   string `json:"sourceEventId"`
	EventType string `json:"eventType"`
	RunID     string `json:"runId"`
	Payload   struct {
		SemanticTool struct {
			OperationID string          `json:"operationId"`
			CallID      string          `json:"callId"`
			Correlation json.RawMessage `json:"correlation"`
			Content     struct {
				Digest string `json:"digest"`
			} `json:"content"`
		} `json:"semantic_tool"`
	} `json:"payload"`
}

// commandFor builds the answer to one event envelope; ok is false for any
// other event, one already answered, or one missing what an answer needs.
func (a *toolAnswerer) commandFor(envelope json.RawMessage) (prp.Command, bool) {
	var env struct {
		Payload toolInput `json:"payload"`
	}
	if json.Unmarshal(envelope, &env) != nil || env.Payload.EventType != prp.EventSemanticToolInput {
		return prp.Command{}, false
	}
	ev := env.Payload
	st := ev.Payload.SemanticTool
	var corr struct {
		RunID string `json:"runId"`
	}
	_ = json.Unmarshal(st.Correlation, &corr)
	runID := corr.RunID
	if runID == "" {
		runID = ev.RunID
	}
	if st.CallID == "" || st.OperationID == "" || runID == "" {
		return prp.Command{}, false
	}
	id := toolCommandID(runID, st.CallID)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.answered[id] {
		return prp.Command{}, false
	}
	result, isError := a.resultLocked(st.OperationID)
	corrOut := st.Correlation
	if len(corrOut) == 0 {
		corrOut = json.RawMessage(`null`)
	}
	payload, err := json.Marshal(map[string]any{
		"callId": st.CallID, "operationId": st.OperationID, "inputDigest": st.Content.Digest,
		"sourceEventId": ev.EventID, "sourceEventType": prp.EventSemanticToolInput, "correlation": corrOut,
		"result": result, "isError": isError,
	})
	if err != nil {
		return prp.Command{}, false
	}
	a.answered[id] = true
	a.queued = append(a.queued, id)
	return prp.Command{CommandID: id, Type: prp.CommandSemanticToolResult, Payload: payload}, true
}

// resultLocked picks the answer for an operation: a pending failure first,
// then the standing result, then the reserved tools' acceptance, else a
// tool error saying none was configured.
func (a *toolAnswerer) resultLocked(op string) (json.RawMessage, bool) {
	if f := a.failures[op]; len(f) > 0 {
		a.failures[op] = f[1:]
		return f[0], true
	}
	if r, ok := a.results[op]; ok {
		return r, false
	}
	if op == finishTool || op == blockTool {
		return json.RawMessage(acceptedResult), false
	}
	b, _ := json.Marshal(map[string]any{"success": false,
		"contentItems": []any{map[string]any{"type": "inputText", "text": missingResultText}}})
	return b, true
}

// run watches the core's committed events and queues an answer to each
// semantic_tool.input, until ctx ends. A warm rotation restarts the event
// list; answers are keyed by command id, so nothing is answered twice.
func (a *toolAnswerer) run(ctx context.Context, core toolCore, log *slog.Logger) {
	seen := 0
	for {
		var events []json.RawMessage
		err := core.Wait(ctx, func(s control.Snapshot) bool {
			events = s.Events
			return len(s.Events) != seen
		})
		if len(events) < seen {
			seen = 0
		}
		for _, e := range events[seen:] {
			if cmd, ok := a.commandFor(e); ok {
				if _, qerr := core.QueueCommand(cmd); qerr != nil {
					log.Warn("queue tool result", "err", qerr)
				}
			}
		}
		seen = len(events)
		if err != nil {
			return
		}
	}
}

// parseToolResultFlag parses --tool-result OPERATION=JSON.
func parseToolResultFlag(v string) (string, json.RawMessage, error) {
	op, result, ok := strings.Cut(v, "=")
	if !ok || op == "" || !json.Valid([]byte(result)) {
		return "", nil, fmt.Errorf("%w: --tool-result needs OPERATION=JSON", errScript)
	}
	return op, json.RawMessage(result), nil
}
