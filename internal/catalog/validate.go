package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pcrunner/pcrunner/internal/quote"
)

// ValidateInput checks args (absent or empty: {}) against the operation's
// inputSchema. The error's message is the text that follows "Invalid tool
// input: " in the tool error, which the caller adds: the first schema error,
// `at "<instance path>": <keyword message>`, never the value. An operation
// that is not in the catalog (reserved names included: they go through
// NormalizeResult) is an error too.
func (c *Catalog) ValidateInput(operationID string, args json.RawMessage) error {
	op, ok := c.ops[operationID]
	if !ok {
		return fmt.Errorf("unknown operation %s", quote.Text(operationID))
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	if msg, ok := validate(op.input, args); !ok {
		return errors.New(msg)
	}
	return nil
}

// ValidateResult checks a successful semantic_tool.result value against the
// operation's responseSchema, as the reference runner does
// (provider_bridge.rs semantic_response_value): an object with a boolean "ok"
// and an "operationId" or "callId" member is an envelope; its operationId
// must be the call's; ok=true checks its "result" (else "value") member,
// ok=false needs a "denial" or "error" member and checks nothing. Any other
// value is checked whole. The message is "<what>: <first schema error>".
func (c *Catalog) ValidateResult(operationID string, result json.RawMessage) error {
	return c.validateResult(operationID, "", false, result)
}

// validateCallResult is ValidateResult that also requires an envelope's
// callId to be callID.
func (c *Catalog) validateCallResult(operationID, callID string, result json.RawMessage) error {
	return c.validateResult(operationID, callID, true, result)
}

func (c *Catalog) validateResult(operationID, callID string, checkCall bool, result json.RawMessage) error {
	op, ok := c.ops[operationID]
	if !ok {
		return fmt.Errorf("unknown operation %s", quote.Text(operationID))
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(result))
	if err != nil {
		return errors.New("the result is not JSON")
	}
	value, check, err := responseValue(inst, operationID, callID, checkCall)
	if err != nil || !check {
		return err
	}
	if msg, ok := validateValue(op.response, value); !ok {
		return fmt.Errorf("the result does not match the responseSchema: %s", msg)
	}
	return nil
}

func responseValue(inst any, operationID, callID string, checkCall bool) (value any, check bool, err error) {
	env, ok := inst.(map[string]any)
	if !ok {
		return inst, true, nil
	}
	okv, ok := env["ok"].(bool)
	if !ok {
		return inst, true, nil
	}
	_, hasOp := env["operationId"]
	_, hasCall := env["callId"]
	if !hasOp && !hasCall {
		return inst, true, nil
	}
	if op, _ := env["operationId"].(string); op != operationID {
		return nil, false, errors.New("the result envelope's operationId is not the call's")
	}
	if call, _ := env["callId"].(string); checkCall && call != callID {
		return nil, false, errors.New("the result envelope's callId is not the call's")
	}
	if okv {
		if v, ok := env["result"]; ok {
			return v, true, nil
		}
		if v, ok := env["value"]; ok {
			return v, true, nil
		}
		return nil, false, errors.New("the successful result envelope has no result or value")
	}
	_, hasDenial := env["denial"]
	_, hasError := env["error"]
	if hasDenial || hasError {
		return nil, false, nil
	}
	return nil, false, errors.New("the failed result envelope has no denial or error")
}
