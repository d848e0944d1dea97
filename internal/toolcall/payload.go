package toolcall

import (
	"bytes"
	"encoding/json"
)

// payloadSchema is the schema of the semantic_tool payload (tools.md §3
// items 3–4).
const payloadSchema = "paperclip.prp.semantic_tool.v1"

// Result codes of the semantic_tool.result event and command (tools.md §3
// items 4–5).
const (
	codeSucceeded      = "semantic_tool_succeeded"
	codeFailed         = "semantic_tool_failed"
	CodeResultConflict = "semantic_tool_result_conflict"
	CodeNotPending     = "semantic_tool_not_pending"
)

// Correlation is the PRP identity a semantic event names: the run
// identity's runId, normalizedSessionId, turnId and itemId exactly (the
// reference core closes the connection otherwise).
type Correlation struct {
	RunID               string `json:"runId"`
	NormalizedSessionID string `json:"normalizedSessionId"`
	TurnID              string `json:"turnId"`
	ItemID              string `json:"itemId"`
}

func (c Correlation) value() map[string]any {
	return map[string]any{"runId": c.RunID, "normalizedSessionId": c.NormalizedSessionID, "turnId": c.TurnID, "itemId": c.ItemID}
}

// InputPayload is the payload of semantic_tool.input for call c, whose
// canonical input is input (tools.md §3 item 3).
func InputPayload(c *Call, corr Correlation, input json.RawMessage) map[string]any {
	return map[string]any{"semantic_tool": map[string]any{
		"schema":         payloadSchema,
		"schemaVersion":  1,
		"phase":          "input",
		"operationId":    c.OperationID,
		"callId":         c.CallID,
		"correlation":    corr.value(),
		"idempotencyKey": nil,
		"content": map[string]any{
			"digest":               c.InputDigest,
			"redactionDisposition": "digest_only",
			"references":           []any{},
		},
		"input": input,
	}}
}

// ResultPayload is the payload of semantic_tool.result for call c with
// outcome o (tools.md §3 item 4). A result.resultReceipt that names this
// call and correlation as a result receipt is used verbatim.
func ResultPayload(c *Call, corr Correlation, o Outcome) map[string]any {
	if r := receipt(c, corr, o.Result); r != nil {
		return map[string]any{"semantic_tool": r}
	}
	outcome, code := "succeeded", codeSucceeded
	if o.IsError {
		outcome, code = "failed", codeFailed
	}
	return map[string]any{"semantic_tool": map[string]any{
		"schema":         payloadSchema,
		"schemaVersion":  1,
		"phase":          "result",
		"operationId":    c.OperationID,
		"callId":         c.CallID,
		"correlation":    corr.value(),
		"idempotencyKey": nil,
		"content": map[string]any{
			"digest":               o.Digest,
			"redactionDisposition": "digest_only",
			"references":           []any{},
		},
		"outcome":               outcome,
		"code":                  code,
		"retryable":             false,
		"authorizationBoundary": "active_task",
		"operationReceiptId":    "operation_" + c.CallID,
	}}
}

// receipt returns result.resultReceipt when it is this call's result
// receipt: schema, phase "result", operationId, callId and a correlation
// equal to corr.
func receipt(c *Call, corr Correlation, result json.RawMessage) json.RawMessage {
	var r struct {
		ResultReceipt json.RawMessage `json:"resultReceipt"`
	}
	if json.Unmarshal(result, &r) != nil || len(r.ResultReceipt) == 0 {
		return nil
	}
	var head struct {
		Schema      string          `json:"schema"`
		Phase       string          `json:"phase"`
		OperationID string          `json:"operationId"`
		CallID      string          `json:"callId"`
		Correlation json.RawMessage `json:"correlation"`
	}
	if json.Unmarshal(r.ResultReceipt, &head) != nil || head.Schema != payloadSchema || head.Phase != "result" ||
		head.OperationID != c.OperationID || head.CallID != c.CallID {
		return nil
	}
	got, err1 := digest(head.Correlation)
	want, err2 := digest(mustJSON(corr.value()))
	if err1 != nil || err2 != nil || got != want {
		return nil
	}
	return bytes.Clone(r.ResultReceipt)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// AgentText is the text of the MCP answer to the agent: JSON(result)
// (tools.md §3 item 4).
func AgentText(result json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, result) != nil {
		return string(result)
	}
	return buf.String()
}
