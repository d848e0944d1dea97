package provider

import (
	"errors"
	"fmt"
	"strings"
)

// Class is a provider failure class (acp.md §6); it is the `code` of a
// failed command result and of turn.failed / session.failed payloads.
type Class string

// Classes runnerd produces over ACP, with the reference runner's names.
const (
	ClassAgentSpawnFailed          Class = "agent_spawn_failed"
	ClassAgentStartupExitNonzero   Class = "agent_startup_exit_nonzero"
	ClassAgentStartupSignal        Class = "agent_startup_signal"
	ClassAgentStartupNoStderr      Class = "agent_startup_no_stderr"
	ClassAuthenticationRequired    Class = "authentication_required"
	ClassSessionHandshakeTimeout   Class = "session_handshake_timeout"
	ClassSessionResumeRequired     Class = "session_resume_required"
	ClassACPSessionInitFailed      Class = "acp_session_init_failed"
	ClassAgentDisconnected         Class = "agent_disconnected"
	ClassRequestedModelUnsupported Class = "requested_model_unsupported"
	ClassProviderFrameTooLarge     Class = "provider_frame_too_large"
	ClassTurnFailed                Class = "acpx_turn_failed"
	ClassUnclassified              Class = "unclassified"
)

// fixedMessages are the public texts per class: never peer text.
var fixedMessages = map[Class]string{
	ClassAgentSpawnFailed:          "the ACP agent could not be started",
	ClassAgentStartupExitNonzero:   "the ACP agent exited during startup",
	ClassAgentStartupSignal:        "the ACP agent was killed by a signal during startup",
	ClassAgentStartupNoStderr:      "the ACP agent exited during startup without output",
	ClassAuthenticationRequired:    "the ACP agent requires authentication",
	ClassSessionHandshakeTimeout:   "the ACP agent did not complete initialization in time",
	ClassSessionResumeRequired:     "the ACP session could not be resumed",
	ClassACPSessionInitFailed:      "the ACP session could not be initialized",
	ClassAgentDisconnected:         "the ACP agent disconnected",
	ClassRequestedModelUnsupported: "the requested model is not supported by the ACP agent",
	ClassProviderFrameTooLarge:     "the ACP agent wrote an oversize stdout frame",
	ClassTurnFailed:                "the ACP agent failed the turn",
	ClassUnclassified:              "the ACP agent failed",
}

// Failure is a classified provider failure. Error() carries only the class
// and a fixed message, so it may leave the process; the raw cause stays
// reachable through errors.Is/As for redacted diagnostics only.
type Failure struct {
	Class   Class
	Message string
	cause   error
}

// NewFailure returns a failure with the class's fixed message.
func NewFailure(c Class, cause error) *Failure {
	msg, ok := fixedMessages[c]
	if !ok {
		msg = fixedMessages[ClassUnclassified]
	}
	return &Failure{Class: c, Message: msg, cause: cause}
}

func (f *Failure) Error() string { return string(f.Class) + ": " + f.Message }

// Unwrap exposes the cause to errors.Is/As (never to Error()).
func (f *Failure) Unwrap() error { return f.cause }

// ClassOf returns the class of err, or ClassUnclassified.
func ClassOf(err error) Class {
	var f *Failure
	if errors.As(err, &f) {
		return f.Class
	}
	return ClassUnclassified
}

// HandshakeTimeout is the session.open expiry (acp.md §4.1 step 4); the
// message names the executable only, never its arguments.
func HandshakeTimeout(command string, boundMs int64) *Failure {
	exe := command
	if i := strings.LastIndexByte(exe, '/'); i >= 0 {
		exe = exe[i+1:]
	}
	if f := strings.Fields(exe); len(f) > 0 {
		exe = f[0]
	}
	return &Failure{
		Class:   ClassSessionHandshakeTimeout,
		Message: fmt.Sprintf("ACP agent %s did not complete ACP initialization within %dms", exe, boundMs),
	}
}

// ClassifyStartupExit classifies the agent's exit before the handshake
// completed (acp.md §6). exitCode 127 before initialize is pcwrap's spawn
// failure; signaled means the agent died from a signal.
func ClassifyStartupExit(exitCode int, signaled, beforeInitialize, hadStderr bool) *Failure {
	switch {
	case exitCode == 127 && beforeInitialize && !signaled:
		return NewFailure(ClassAgentSpawnFailed, nil)
	case signaled:
		return NewFailure(ClassAgentStartupSignal, nil)
	case !hadStderr:
		return NewFailure(ClassAgentStartupNoStderr, nil)
	default:
		return NewFailure(ClassAgentStartupExitNonzero, nil)
	}
}

// sidecarClasses maps the reference sidecar's error codes to classes
// (acp.md §6, response_error_classification); prefixes end in '.'.
var sidecarClasses = map[string]Class{
	"ACP_MODEL_UNSUPPORTED":                       "requested_model_unsupported",
	"AGENT_DISCONNECTED":                          "agent_disconnected",
	"AUTH_REQUIRED":                               "authentication_required",
	"SESSION_RESUME_REQUIRED":                     "session_resume_required",
	"SESSION_MODE_REPLAY_FAILED":                  "session_mode_replay_failed",
	"SESSION_MODEL_REPLAY_FAILED":                 "session_model_replay_failed",
	"SESSION_CONFIG_OPTION_REPLAY_FAILED":         "session_config_option_replay_failed",
	"CLAUDE_ACP_SESSION_CREATE_TIMEOUT":           "claude_session_create_timeout",
	"ACPX_SESSION_HANDSHAKE_TIMEOUT":              "session_handshake_timeout",
	"ACPX_SESSION_ENSURE_FAILED":                  "session_ensure_failed",
	"ACPX_SESSION_ENSURE_TYPE_ERROR":              "session_ensure_type_error",
	"ACPX_SESSION_ENSURE_NON_ERROR":               "session_ensure_non_error",
	"ACP_SESSION_INIT_FAILED":                     "acp_session_init_failed",
	"NO_SESSION":                                  "acpx_no_session",
	"TIMEOUT":                                     "acpx_timeout",
	"PERMISSION_DENIED":                           "acpx_permission_denied",
	"PERMISSION_PROMPT_UNAVAILABLE":               "acpx_permission_prompt_unavailable",
	"RUNTIME":                                     "acpx_runtime_failure",
	"USAGE":                                       "acpx_usage_failure",
	"ACPX_RUNTIME_ADMISSION_VERIFICATION_TIMEOUT": "runtime_admission_verification_timeout",
	"ACPX_SIDECAR_STATUS_READ_TIMEOUT":            "session_status_read_timeout",
	"ACPX_PERSISTED_SESSION_MISSING":              "persisted_session_missing",
	"ACPX_PERSISTED_SESSION_IDENTITY_MISMATCH":    "persisted_session_identity_mismatch",
	"ACPX_MODEL_STATUS_UNAVAILABLE":               "model_status_unavailable",
	"ACPX_MODEL_SELECTION_UNAVAILABLE":            "model_selection_unavailable",
	"ACPX_EFFECTIVE_MODEL_MISMATCH":               "effective_model_mismatch",
}

// ClassifySidecarCode maps a reference sidecar error code to its class, so
// results stay comparable with the reference runner's.
func ClassifySidecarCode(code string) Class {
	if c, ok := sidecarClasses[code]; ok {
		return c
	}
	if rest, ok := strings.CutPrefix(code, "AGENT_STARTUP_FAILED"); ok {
		if rest == "" {
			return "agent_startup_failed"
		}
		if s, ok := strings.CutPrefix(rest, "."); ok && s != "" {
			return Class("agent_startup_" + strings.ToLower(s))
		}
	}
	return ClassUnclassified
}
