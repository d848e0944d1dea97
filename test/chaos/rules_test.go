package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// cleanRecord is a recorded tool run no rule flags: runnerd killed at its
// kill point and restarted, the tool call answered once, a final turn, an
// orderly stop.
func cleanRecord() *Record {
	types := []string{
		prp.EventHarnessStarting, prp.EventSessionStarted, prp.EventTurnStarted, prp.EventSemanticToolInput,
		prp.EventSemanticToolResult, prp.EventItemDelta, prp.EventTurnCompleted, prp.EventRunTerminal,
		prp.EventSessionResumed, prp.EventTurnStarted, prp.EventTurnCompleted, prp.EventRunTerminal,
		prp.EventSessionClosed, prp.EventHarnessExited,
	}
	r := &Record{
		Plan:        Plan{Seed: 7, Scenario: ScenarioTool, Faults: []Fault{{Kind: FaultRunnerdKill, At: prp.CommandSemanticToolResult + "#1"}}},
		ToolAnswers: map[string]int{"call_1": 1},
		Duration:    2 * time.Second, Bound: 16 * time.Second,
		Exits:     []Exit{{Code: -1, Signal: "killed", Expected: "kill point"}, {Code: 0, Expected: "orderly stop"}},
		FinalTurn: true,
		Results: []Result{
			{ID: "c1", Type: prp.CommandRunPrepare, Status: "completed"},
			{ID: "c2", Type: prp.CommandSessionOpen, Status: "completed"},
			{ID: "c3", Type: prp.CommandTurnStart, Status: "completed"},
			{ID: "c4", Type: prp.CommandSemanticToolResult, Status: "completed", CallID: "call_1"},
			{ID: "c5", Type: prp.CommandSessionOpen, Status: "completed"},
			{ID: "c6", Type: prp.CommandTurnStart, Status: "completed"},
			{ID: "c7", Type: prp.CommandSessionClose, Status: "completed"},
		},
	}
	for i, typ := range types {
		e := Event{Seq: uint64(i + 1), ID: "evt_" + string(rune('a'+i)), Type: typ}
		if typ == prp.EventSemanticToolInput || typ == prp.EventSemanticToolResult {
			e.CallID = "call_1"
		}
		if typ == prp.EventRunTerminal {
			e.Outcome = "completed"
		}
		r.Events = append(r.Events, e)
	}
	return r
}

// fired returns the names of the rules r breaks.
func fired(r *Record) []string {
	var names []string
	for _, f := range Judge(r) {
		name, _, _ := strings.Cut(f, ":")
		names = append(names, name)
	}
	return names
}

// TestRulesPassCleanRecord: a clean recorded run breaks no rule.
func TestRulesPassCleanRecord(t *testing.T) {
	require.Empty(t, Judge(cleanRecord()))
}

// TestRulesFireOnMutatedRecords mutates the clean record the ways a run
// can need a person and checks that exactly the rule for each fires.
func TestRulesFireOnMutatedRecords(t *testing.T) {
	for _, tc := range []struct {
		name, rule string
		mutate     func(*Record)
	}{
		{"drop an event", "events-exactly-once-in-order", func(r *Record) { r.Events = slices.Delete(r.Events, 4, 5) }},
		{"deliver an event twice", "events-exactly-once-in-order", func(r *Record) {
			dup := r.Events[5]
			r.Events = append(r.Events, Event{Seq: uint64(len(r.Events) + 1), ID: dup.ID, Type: dup.Type})
		}},
		{"reorder two events", "events-exactly-once-in-order", func(r *Record) { r.Events[5], r.Events[6] = r.Events[6], r.Events[5] }},
		{"duplicate a tool result to the agent", "tool-answer-once", func(r *Record) { r.ToolAnswers["call_1"] = 2 }},
		{"lose a tool result", "tool-answer-once", func(r *Record) { r.ToolAnswers["call_1"] = 0 }},
		{"indeterminate with evidence", "indeterminate-with-evidence", func(r *Record) {
			r.Results[3].Status, r.Results[3].Code = "failed", indeterminateCode
		}},
		{"indeterminate close after the session closed", "indeterminate-with-evidence", func(r *Record) {
			r.Results[6].Status, r.Results[6].Code = "failed", indeterminateCode
		}},
		{"a turn without its terminal", "one-terminal-per-turn", func(r *Record) {
			i := slices.IndexFunc(r.Events, func(e Event) bool { return e.Type == prp.EventRunTerminal })
			r.Events[i].Type = prp.EventItemDelta
		}},
		{"a turn with two terminals", "one-terminal-per-turn", func(r *Record) {
			r.Events[len(r.Events)-1].Type = prp.EventRunTerminal
		}},
		{"leave a process", "no-leftover-process", func(r *Record) { r.Leftovers = []string{"4242 fakeacp --mcp-http"} }},
		{"stretch a turn", "within-bound", func(r *Record) { r.Duration = r.Bound + time.Millisecond }},
		{"runnerd exits non-zero unexpectedly", "runnerd-exits-expected", func(r *Record) { r.Exits = append(r.Exits, Exit{Code: 1}) }},
		{"runnerd killed by nobody's plan", "runnerd-exits-expected", func(r *Record) { r.Exits[0].Expected = "" }},
		{"the run does not go on", "run-goes-on", func(r *Record) { r.FinalTurn = false }},
		{"a wait never ended", "driver-waits-end", func(r *Record) { r.Errors = []string{"run.terminal 1: not within the run's deadline"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cleanRecord()
			tc.mutate(r)
			require.Equal(t, []string{tc.rule}, fired(r), "%v", Judge(r))
		})
	}
}

// TestToolAnswerMayBeLostWithTheAgent: when the plan kills the agent, an
// answer may never reach it, but never twice.
func TestToolAnswerMayBeLostWithTheAgent(t *testing.T) {
	r := cleanRecord()
	r.Plan.Faults = []Fault{{Kind: FaultAgentKill, At: PointTool}}
	r.Exits[0].Expected = "kill point" // unchanged for this check
	r.ToolAnswers["call_1"] = 0
	require.Empty(t, Judge(r))
	r.ToolAnswers["call_1"] = 2
	require.Equal(t, []string{"tool-answer-once"}, fired(r))
}

// TestRefusedTurnWithItsTerminal: a turn.start refused after runnerd
// died before the prompt went out still ended its started turn with one
// terminal; the rule counts that turn.
func TestRefusedTurnWithItsTerminal(t *testing.T) {
	r := cleanRecord()
	r.Results[2].Status, r.Results[2].Code = "failed", "prompt_not_delivered"
	require.Empty(t, Judge(r))
}
