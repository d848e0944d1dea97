package runner

import (
	"encoding/json"

	"github.com/pcrunner/pcrunner/internal/runner/config"
)

// maxLoggedMessageBytes bounds a failure message copied into a log line
// (beyond: a command_result message is already bounded by the state, this
// keeps one warning short).
const maxLoggedMessageBytes = 512

// resultFailure reads the code and message of a journaled failed result
// for the log. It logs what the journal recorded, never the handler's raw
// error: the state has redacted credential-shaped text in it and bounded it,
// and it is the text the server receives anyway.
func resultFailure(result json.RawMessage) (code, message string) {
	var r struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(result, &r)
	return config.OneLine(r.Code, maxLoggedMessageBytes), config.OneLine(r.Message, maxLoggedMessageBytes)
}
