package prp

import (
	"maps"
	"slices"
)

// Event types runnerd emits or reads (prp.md §8.3, SCH event*.schema.json).
// A new event type adds its constant here and its row in eventTable.
const (
	// runner family: the loop's and the store's own facts.
	EventRunnerConnected   = "runner.connected"
	EventRunnerReconnected = "runner.reconnected"
	EventRunnerReconciled  = "runner.reconciled"
	EventRunnerDraining    = "runner.draining"
	EventRunnerSuspending  = "runner.suspending"
	EventRunnerSuspended   = "runner.suspended"
	EventRunnerStopped     = "runner.stopped"
	EventRunnerDiagnostic  = "runner.diagnostic"

	// phase family (workspace.md §8, §9).
	EventRuntimePhaseChanged = "runtime.phase.changed"
	EventSandboxMetric       = "sandbox.metric"

	EventHarnessStarting   = "harness.starting"
	EventHarnessReady      = "harness.ready"
	EventHarnessExited     = "harness.exited"
	EventHarnessDiagnostic = "harness.diagnostic"

	EventSessionStarting            = "session.starting"
	EventSessionStarted             = "session.started"
	EventSessionResuming            = "session.resuming"
	EventSessionResumed             = "session.resumed"
	EventSessionReconciled          = "session.reconciled"
	EventSessionUpdated             = "session.updated"
	EventSessionClosed              = "session.closed"
	EventSessionFailed              = "session.failed"
	EventSessionCapabilitiesUpdated = "session.capabilities.updated"
	EventSessionGoalSnapshot        = "session.goal.snapshot"
	EventSessionGoalUpdated         = "session.goal.updated"
	EventSessionGoalCleared         = "session.goal.cleared"

	EventTurnSubmitted   = "turn.submitted"
	EventTurnStarted     = "turn.started"
	EventTurnCompleted   = "turn.completed"
	EventTurnFailed      = "turn.failed"
	EventTurnInterrupted = "turn.interrupted"
	EventTurnCancelled   = "turn.cancelled"

	EventItemStarted   = "item.started"
	EventItemDelta     = "item.delta"
	EventItemCompleted = "item.completed"
	EventItemFailed    = "item.failed"

	// EventOutputBodyChunk carries one chunk of a long text's body
	// (workspace.md §7); v2 only.
	EventOutputBodyChunk = "output.body.chunk"

	EventUsageReported           = "usage.reported"
	EventPlanUpdated             = "plan.updated"
	EventContextCompacted        = "context.compacted"
	EventProviderNoticeRecorded  = "provider.notice.recorded"
	EventToolExecutionStarted    = "tool.execution.started"
	EventToolExecutionProgressed = "tool.execution.progressed"
	EventToolExecutionCompleted  = "tool.execution.completed"

	EventSemanticToolInput  = "semantic_tool.input"
	EventSemanticToolResult = "semantic_tool.result"

	EventRuntimeRequestCreated   = "runtime_request.created"
	EventRuntimeRequestResolved  = "runtime_request.resolved"
	EventRuntimeRequestExpired   = "runtime_request.expired"
	EventRuntimeRequestCancelled = "runtime_request.cancelled"

	EventRunResultProposed = "run.result.proposed"
	EventRunTerminal       = "run.terminal"

	// workspace family (workspace.md §3-§5).
	EventWorkspaceReady          = "workspace.ready"
	EventWorkspaceChangeUpdated  = "workspace.change.updated"
	EventWorkspaceDiffRecorded   = "workspace.diff.recorded"
	EventWorkspaceFileReferenced = "workspace.file.referenced"
)

// PayloadRule says what the runner may add to a mapped event's payload
// beyond what the provider mapping put there.
type PayloadRule uint8

const (
	// PayloadOpen: the runner adds providerTurnId and itemId when the
	// mapping set none (the envelope carries the runner's durable ids).
	PayloadOpen PayloadRule = iota
	// PayloadClosed: the payload schema admits no extra field
	// (provider-event.schema.json plan, toolExecution, providerNotice).
	PayloadClosed
	// PayloadExact: tools.md §7 lists the payload field by field; its turn
	// and item ids are inside, none is added.
	PayloadExact
)

// EventRule is how the runner treats one event type. The zero value is
// the rule of every type without a row: open payload, schema version 1,
// never coalesced, not turn-ending.
type EventRule struct {
	Payload PayloadRule
	// V2Family, set exactly for the v2-only types (prp.md §8.2), is the
	// replay family (R-state v2_replay_key): such an event has
	// schemaVersion 2, goes out on a v1 link as a runner.diagnostic, and
	// the latest real payload per family is replayed on the next v2 link.
	V2Family string
	// V2Only marks a v2-only type without a replay family: on a v1 link it
	// goes out as a runner.diagnostic and is not replayed (a chunk belongs
	// to its carrier's batch; runnerd makes none on a v1 lease).
	V2Only bool
	// EndsTurn marks the events that end a provider turn (prp.md §8.3).
	EndsTurn bool
	// CoalesceByItem marks the P2 deltas that merge by itemId into one
	// unsent outbox event (prp.md §8.1, §9.3).
	CoalesceByItem bool
	// CoalesceNewest marks the P2 snapshots of which an unsent one is
	// replaced by the next (every field takes the newest value).
	CoalesceNewest bool
}

// SchemaVersion is the envelope's schemaVersion for the type (prp.md §8.1).
func (r EventRule) SchemaVersion() int {
	if r.V2Family != "" || r.V2Only {
		return 2
	}
	return 1
}

// Replay families of the v2-only events (R-state v2_replay_key).
const (
	familySessionCapabilities = "session.capabilities"
	familySessionGoal         = "session.goal"
)

// eventTable holds every event constant above, with its rule.
var eventTable = map[string]EventRule{
	EventRunnerConnected:   {},
	EventRunnerReconnected: {},
	EventRunnerReconciled:  {},
	EventRunnerDraining:    {},
	EventRunnerSuspending:  {},
	EventRunnerSuspended:   {},
	EventRunnerStopped:     {},
	EventRunnerDiagnostic:  {},

	// The phase and lifecycle payloads are exactly what workspace.md §8
	// and §9 list (turn.submitted is {}): the runner adds no id to them.
	EventRuntimePhaseChanged: {Payload: PayloadExact},
	// Each sample supersedes the last: an unsent one is replaced
	// (workspace.md §9: P2, coalescing keeps the newest).
	EventSandboxMetric: {Payload: PayloadExact, CoalesceNewest: true},

	EventHarnessStarting:   {Payload: PayloadExact},
	EventHarnessReady:      {},
	EventHarnessExited:     {},
	EventHarnessDiagnostic: {},

	EventSessionStarting:            {Payload: PayloadExact},
	EventSessionStarted:             {},
	EventSessionResuming:            {Payload: PayloadExact},
	EventSessionResumed:             {},
	EventSessionReconciled:          {Payload: PayloadExact},
	EventSessionUpdated:             {},
	EventSessionClosed:              {},
	EventSessionFailed:              {},
	EventSessionCapabilitiesUpdated: {V2Family: familySessionCapabilities},
	EventSessionGoalSnapshot:        {V2Family: familySessionGoal},
	EventSessionGoalUpdated:         {V2Family: familySessionGoal},
	EventSessionGoalCleared:         {V2Family: familySessionGoal},

	EventTurnSubmitted:   {Payload: PayloadExact},
	EventTurnStarted:     {},
	EventTurnCompleted:   {EndsTurn: true},
	EventTurnFailed:      {EndsTurn: true},
	EventTurnInterrupted: {EndsTurn: true},
	EventTurnCancelled:   {EndsTurn: true},

	EventItemStarted:   {},
	EventItemDelta:     {CoalesceByItem: true},
	EventItemCompleted: {},
	EventItemFailed:    {},
	// Exactly the five keys of workspace.md §7.4: the runner adds no id.
	EventOutputBodyChunk: {Payload: PayloadExact, V2Only: true},

	EventUsageReported:    {},
	EventPlanUpdated:      {Payload: PayloadClosed},
	EventContextCompacted: {},
	// The real codex app-server raises a notice inside every turn, so the
	// closed schema matters on the common path.
	EventProviderNoticeRecorded:  {Payload: PayloadClosed},
	EventToolExecutionStarted:    {Payload: PayloadClosed},
	EventToolExecutionProgressed: {Payload: PayloadClosed},
	EventToolExecutionCompleted:  {Payload: PayloadClosed},

	EventSemanticToolInput:  {},
	EventSemanticToolResult: {},

	EventRuntimeRequestCreated:   {Payload: PayloadExact},
	EventRuntimeRequestResolved:  {Payload: PayloadExact},
	EventRuntimeRequestExpired:   {Payload: PayloadExact},
	EventRuntimeRequestCancelled: {Payload: PayloadExact},

	EventRunResultProposed: {},
	EventRunTerminal:       {},

	// Closed v1 payloads (workspace-diff, workspace-file-reference): the
	// ids they need are inside (changeSetId, referenceId), none is added.
	// Snapshots are never coalesced: each is a whole change set, and the
	// at most one per second of a turn keeps their number small.
	EventWorkspaceReady:          {Payload: PayloadExact},
	EventWorkspaceChangeUpdated:  {Payload: PayloadExact},
	EventWorkspaceDiffRecorded:   {Payload: PayloadExact},
	EventWorkspaceFileReferenced: {Payload: PayloadExact},
}

// EventRuleOf returns the rule of an event type; a type without a row
// gets the zero rule.
func EventRuleOf(eventType string) EventRule {
	return eventTable[eventType]
}

// EventTypes returns every event type of the table, sorted.
func EventTypes() []string {
	return slices.Sorted(maps.Keys(eventTable))
}
