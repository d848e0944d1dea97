package provider

import "github.com/pcrunner/pcrunner/internal/prp"

// runtime.phase.changed phases, the only two runnerd uses (workspace.md §8).
const (
	PhaseWorkspacePreparing = "workspace_preparing"
	PhaseExecuting          = "executing"
)

// Transports of harness.starting (workspace.md §8, codex.md §6).
const (
	TransportStdio = "stdio_jsonrpc" // ACP and the Codex app-server
	TransportHTTP  = "http_sse"      // OpenCode's server
)

// session.reconciled outcomes (workspace.md §8).
const (
	ReconciledAdopted  = "adopted"
	ReconciledReloaded = "reloaded"
)

// maxFailureMessage bounds item.failed's message (the schema's shortText).
const maxFailureMessage = maxShortText

// PhaseChanged is runtime.phase.changed {phase} (P1).
func PhaseChanged(phase string) Event {
	return Event{EventType: prp.EventRuntimePhaseChanged, Priority: P1, Payload: map[string]any{"phase": phase}}
}

// WorkspaceReady is the run.prepare/run.attach pair for a root that
// exists: the preparing phase, then workspace.ready with the descriptor's
// cwd as given (workspace.md §6), both P1.
func WorkspaceReady(cwd string) []Event {
	return []Event{PhaseChanged(PhaseWorkspacePreparing),
		{EventType: prp.EventWorkspaceReady, Priority: P1, Payload: map[string]any{"workingDirectory": cwd}}}
}

// HarnessStarting is harness.starting before the agent is spawned
// (workspace.md §8): the binding's driver (acpx_runtime when empty), its
// transport (TransportStdio when empty) and the agent's name (P1).
func HarnessStarting(driverKind, transport, agent string) Event {
	if driverKind == "" {
		driverKind = "acpx_runtime"
	}
	if transport == "" {
		transport = TransportStdio
	}
	return Event{EventType: prp.EventHarnessStarting, Priority: P1, Payload: map[string]any{
		"driverKind": driverKind, "transport": transport, "agent": agent}}
}

// SessionStarting is session.starting {} before a cold handshake, or
// session.resuming {providerSessionId} before a resume's (P1).
func SessionStarting(resume bool, providerSessionID string) Event {
	if resume {
		return Event{EventType: prp.EventSessionResuming, Priority: P1,
			Payload: map[string]any{"providerSessionId": providerSessionID}}
	}
	return Event{EventType: prp.EventSessionStarting, Priority: P1, Payload: map[string]any{}}
}

// SessionReconciled is session.reconciled after a runnerd restart found
// the recorded session: adopted (the agent lives) or reloaded (P1).
func SessionReconciled(providerSessionID, activeTurnID, outcome string) Event {
	var active any
	if activeTurnID != "" {
		active = activeTurnID
	}
	return Event{EventType: prp.EventSessionReconciled, Priority: P1, Payload: map[string]any{
		"providerSessionId": providerSessionID, "activeTurnId": active, "outcome": outcome}}
}

// TurnSubmitted is turn.submitted {} before the prompt is written: no
// prompt text (workspace.md §8, beyond the reference).
func TurnSubmitted(turnID string) Event {
	return Event{EventType: prp.EventTurnSubmitted, Priority: P1, TurnID: turnID, Payload: map[string]any{}}
}

// itemFailed is item.failed {kind, message} after the item's closing
// item.completed (workspace.md §8).
func (mp Mapper) itemFailed(turnID, itemID, kind, message string) Event {
	return Event{EventType: prp.EventItemFailed, Priority: P1, TurnID: turnID, ItemID: itemID,
		Payload: map[string]any{"kind": kind, "message": mp.text(message, maxFailureMessage)}}
}
