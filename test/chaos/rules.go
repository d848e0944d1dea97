package chaos

import (
	"fmt"
	"strings"
	"time"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// Record is what the driver recorded of one run: everything the rules
// judge it by.
type Record struct {
	Plan Plan
	// Events are the events the core committed, in the order it admitted them.
	Events []Event
	// Results are the settled command results, in the order they were queued.
	Results []Result
	// ToolAnswers counts, per answered tool call (callId), how often its
	// recorded answer reached the agent (fakeacp says each answer it got).
	ToolAnswers map[string]int
	// Duration is how long the run took; Bound is what its flags allow.
	Duration, Bound time.Duration
	// Leftovers are processes of the run still alive after runnerd's
	// orderly stop (pid and command line).
	Leftovers []string
	// Exits are runnerd's exits, each with whether the plan caused it.
	Exits []Exit
	// FinalTurn: after the scenario, one more session.open and turn
	// completed (the run goes on after every fault).
	FinalTurn bool
	// Errors are the driver's own failures: a wait that never ended (a
	// result that never came, a turn that never settled).
	Errors []string
}

// Event is what the rules read of a committed event.
type Event struct {
	// Epoch counts the identities before this event's: a warm rotation
	// starts a new journal, whose events number from 1 again.
	Epoch   int
	Seq     uint64
	ID      string
	Type    string
	Outcome string // run.terminal's turnTerminalState
	CallID  string // semantic_tool.*'s callId
}

// Result is one settled command result.
type Result struct {
	ID, Type, Status, Code string
	CallID                 string // semantic_tool.result's
}

// Exit is one exit of runnerd.
type Exit struct {
	Code     int
	Signal   string // "" when it exited by itself
	Expected string // why the plan caused it; "" when nothing did
}

// Rule is one way a run needs a person; it returns why, or "" when the run
// does not break it.
type Rule struct {
	Name  string
	Check func(*Record) string
}

// Rules are every rule, each a pure function over a Record.
var Rules = []Rule{
	{"indeterminate-with-evidence", indeterminateWithEvidence},
	{"one-terminal-per-turn", oneTerminalPerTurn},
	{"events-exactly-once-in-order", eventsExactlyOnce},
	{"tool-answer-once", toolAnswerOnce},
	{"within-bound", withinBound},
	{"no-leftover-process", noLeftovers},
	{"runnerd-exits-expected", exitsExpected},
	{"run-goes-on", runGoesOn},
	{"driver-waits-end", driverWaitsEnd},
}

// Judge returns every rule the run breaks, as "rule: why".
func Judge(r *Record) []string {
	var out []string
	for _, rule := range Rules {
		if why := rule.Check(r); why != "" {
			out = append(out, rule.Name+": "+why)
		}
	}
	return out
}

// evidenceOf is, per command type, the event its effect leaves once it
// happened: a result of execution_indeterminate while such an event is
// committed says "it may not have happened" about something that did.
var evidenceOf = map[string]string{
	prp.CommandSessionClose:       prp.EventSessionClosed,
	prp.CommandSemanticToolResult: prp.EventSemanticToolResult,
	prp.CommandRunnerSuspend:      prp.EventRunnerSuspended,
	prp.CommandTurnStart:          prp.EventTurnStarted,
}

// indeterminateCode is the failure code a command gets when its effect
// cannot be known (prp.md §7.2 item 8).
const indeterminateCode = "execution_indeterminate"

func indeterminateWithEvidence(r *Record) string {
	for _, res := range r.Results {
		if res.Code != indeterminateCode {
			continue
		}
		ev, ok := evidenceOf[res.Type]
		if !ok {
			continue
		}
		for _, e := range r.Events {
			if e.Type == ev && (res.CallID == "" || e.CallID == res.CallID) {
				return fmt.Sprintf("%s %s is %s, but %s is committed", res.Type, res.ID, indeterminateCode, ev)
			}
		}
	}
	return ""
}

// oneTerminalPerTurn: every turn ends with exactly one run.terminal. A
// turn is an accepted turn.start, or one whose turn.started is committed
// though its turn.start was not accepted (runnerd died before the prompt
// was delivered: the turn is failed, with its terminal); the turns are the
// larger of the two counts.
func oneTerminalPerTurn(r *Record) string {
	accepted, started, terminals := 0, 0, 0
	for _, res := range r.Results {
		if res.Type == prp.CommandTurnStart && res.Status == "completed" {
			accepted++
		}
	}
	for _, e := range r.Events {
		switch e.Type {
		case prp.EventRunTerminal:
			terminals++
		case prp.EventTurnStarted:
			started++
		}
	}
	if turns := max(accepted, started); terminals != turns {
		return fmt.Sprintf("%d turns (%d accepted, %d started), %d run.terminal events", turns, accepted, started, terminals)
	}
	return ""
}

// eventsExactlyOnce: in each identity's journal, sourceSeq runs 1..n in
// admission order (nothing lost, nothing reordered), and no sourceEventId
// is committed twice (ids, like sequences, are per journal).
func eventsExactlyOnce(r *Record) string {
	ids := map[string]uint64{}
	epoch, want := 0, uint64(1)
	for _, e := range r.Events {
		if e.Epoch != epoch {
			epoch, want, ids = e.Epoch, 1, map[string]uint64{}
		}
		if e.Seq != want {
			return fmt.Sprintf("event %d of identity %d (%s) has sourceSeq %d: lost or reordered", want, epoch, e.Type, e.Seq)
		}
		want++
		if prev, dup := ids[e.ID]; dup {
			return fmt.Sprintf("sourceEventId %s at sourceSeq %d and %d", e.ID, prev, e.Seq)
		}
		ids[e.ID] = e.Seq
	}
	return ""
}

// toolAnswerOnce: a tool call answered by a delivered or detached
// semantic_tool.result reaches the agent exactly once, unless its agent
// died before it could (the plan killed it, or let the lease expire, after
// which runnerd exits and stops its agent), and then at most once.
func toolAnswerOnce(r *Record) string {
	agentMayDie := r.Plan.Has(FaultAgentKill) || r.Plan.Has(FaultPcwrapKill) || r.Plan.Has(FaultLease)
	for _, res := range r.Results {
		if res.Type != prp.CommandSemanticToolResult || res.Status != "completed" || res.CallID == "" {
			continue
		}
		n := r.ToolAnswers[res.CallID]
		if n > 1 || (n == 0 && !agentMayDie) {
			return fmt.Sprintf("the answer to %s reached the agent %d times", res.CallID, n)
		}
	}
	for id, n := range r.ToolAnswers {
		if n > 1 {
			return fmt.Sprintf("the answer to %s reached the agent %d times", id, n)
		}
	}
	return ""
}

func withinBound(r *Record) string {
	if r.Bound > 0 && r.Duration > r.Bound {
		return fmt.Sprintf("took %v, bound %v", r.Duration.Round(time.Millisecond), r.Bound)
	}
	return ""
}

func noLeftovers(r *Record) string {
	if len(r.Leftovers) > 0 {
		return "still alive after the run: " + strings.Join(r.Leftovers, "; ")
	}
	return ""
}

func exitsExpected(r *Record) string {
	for i, e := range r.Exits {
		if e.Expected == "" && (e.Code != 0 || e.Signal != "") {
			return fmt.Sprintf("life %d of runnerd ended code %d signal %q, which the plan did not cause", i+1, e.Code, e.Signal)
		}
	}
	return ""
}

func runGoesOn(r *Record) string {
	if !r.FinalTurn {
		return "no turn completed after the scenario"
	}
	return ""
}

func driverWaitsEnd(r *Record) string {
	if len(r.Errors) > 0 {
		return strings.Join(r.Errors, "; ")
	}
	return ""
}
