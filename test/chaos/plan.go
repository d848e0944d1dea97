// Package chaos is the project's restart-chaos wave: a seeded generator of
// runs (scenario × fault plan × fault point), each driven through prpctl's
// core (control.Core) against the real runnerd (its testhooks build),
// pcwrap and fakeacp, and a set of rules that classify every recorded run.
// A run that breaks a rule needs a person; the wave's job is to find none.
//
// The wave itself runs only when PCRUNNER_CHAOS_WAVE=1 (scripts/test runs
// one after go test; scripts/chaos runs a long one); go test ./... runs the
// rules' own tests and the plan's.
package chaos

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// Scenario names what a run asks of the runner.
type Scenario string

const (
	ScenarioPlain     Scenario = "plain"     // one short turn
	ScenarioStreaming Scenario = "streaming" // one turn of many message chunks
	ScenarioTool      Scenario = "tool"      // one turn that calls issue.comment through the MCP bridge
	ScenarioTwoTurns  Scenario = "two-turns" // two turns in a row
	ScenarioClose     Scenario = "close"     // a turn, then session.close
	ScenarioSuspend   Scenario = "suspend"   // a turn, runner.suspend, a new runnerd, a turn
	ScenarioWarm      Scenario = "warm"      // a turn, a warm run.attach rotation to the next run, a turn there
)

// Scenarios are every scenario, in the matrix's order.
var Scenarios = []Scenario{ScenarioPlain, ScenarioStreaming, ScenarioTool, ScenarioTwoTurns, ScenarioClose, ScenarioSuspend, ScenarioWarm}

// FaultKind names one fault.
type FaultKind string

const (
	FaultRunnerdKill FaultKind = "runnerd-kill" // runnerd SIGKILLs itself after a durable write (Fault.At)
	FaultAgentKill   FaultKind = "agent-kill"   // SIGKILL of the agent
	FaultPcwrapKill  FaultKind = "pcwrap-kill"  // SIGKILL of the agent's pcwrap
	FaultDrop        FaultKind = "drop"         // the core drops the socket
	FaultHalfOpen    FaultKind = "half-open"    // the core stops reading, then the socket drops
	FaultLease       FaultKind = "lease-expiry" // runnerd stopped, socket dropped, past the lease
	FaultENOSPC      FaultKind = "enospc"       // the state directory's filesystem fills up for a while
	FaultRekey       FaultKind = "rekey"        // the core's channel frame limit is low: rekeys all run long
	FaultRedeliver   FaultKind = "redeliver"    // a command is delivered again after a drop before its result
)

// FaultKinds are every fault, in the matrix's order.
var FaultKinds = []FaultKind{FaultRunnerdKill, FaultAgentKill, FaultPcwrapKill, FaultDrop, FaultHalfOpen,
	FaultLease, FaultENOSPC, FaultRekey, FaultRedeliver}

// Fault points other than a runnerd kill point: where in the scenario the
// driver injects the fault.
const (
	PointTurn    = "turn"    // right after the first turn.start's result
	PointTool    = "tool"    // once the agent's tool call is committed (semantic_tool.input)
	PointClose   = "close"   // right after session.close is queued
	PointSuspend = "suspend" // right after runner.suspend is queued
	PointAttach  = "attach"  // right after run.attach is queued
	PointStart   = "start"   // the whole run (a core setting)
)

// Fault is one fault of a plan and where it strikes: a kill point selector
// for FaultRunnerdKill (the testhooks build's PCRUNNER_TESTHOOK_KILL_AFTER),
// one of the Point names otherwise.
type Fault struct {
	Kind FaultKind
	At   string
}

func (f Fault) String() string { return string(f.Kind) + "@" + f.At }

// Plan is one run: a scenario, at most maxFaults faults, and the seed of
// its timing jitter.
type Plan struct {
	Seed     uint64
	Scenario Scenario
	Faults   []Fault
}

// maxFaults is "alone and two at a time".
const maxFaults = 2

// maxPlanChars bounds a plan's text form (ParsePlan's input).
const maxPlanChars = 512

// String is the plan's text form, the one CHAOS_PLAN replays:
// seed=<n>;scenario=<s>;faults=<kind>@<at>+<kind>@<at>.
func (p Plan) String() string {
	fs := make([]string, len(p.Faults))
	for i, f := range p.Faults {
		fs[i] = f.String()
	}
	return fmt.Sprintf("seed=%d;scenario=%s;faults=%s", p.Seed, p.Scenario, strings.Join(fs, "+"))
}

// ParsePlan reads a plan's text form (Plan.String).
func ParsePlan(s string) (Plan, error) {
	var p Plan
	if len(s) > maxPlanChars {
		return p, fmt.Errorf("plan: %d characters, more than %d", len(s), maxPlanChars)
	}
	seen := map[string]bool{}
	for part := range strings.SplitSeq(s, ";") {
		key, val, ok := strings.Cut(part, "=")
		if !ok || seen[key] {
			return p, fmt.Errorf("plan: bad or repeated field %q", part)
		}
		seen[key] = true
		switch key {
		case "seed":
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return p, fmt.Errorf("plan: seed: %w", err)
			}
			p.Seed = n
		case "scenario":
			if !slices.Contains(Scenarios, Scenario(val)) {
				return p, fmt.Errorf("plan: unknown scenario %q", val)
			}
			p.Scenario = Scenario(val)
		case "faults":
			if p.Scenario == "" {
				return p, errors.New("plan: faults before scenario")
			}
			if val == "" {
				continue
			}
			for fs := range strings.SplitSeq(val, "+") {
				kind, at, ok := strings.Cut(fs, "@")
				if !ok || !slices.Contains(FaultKinds, FaultKind(kind)) {
					return p, fmt.Errorf("plan: bad fault %q", fs)
				}
				f := Fault{Kind: FaultKind(kind), At: at}
				if !slices.Contains(pointsOf(p.Scenario, f.Kind), at) {
					return p, fmt.Errorf("plan: %s cannot strike %s at %q", kind, p.Scenario, at)
				}
				p.Faults = append(p.Faults, f)
			}
			if len(p.Faults) > maxFaults {
				return p, fmt.Errorf("plan: %d faults, at most %d", len(p.Faults), maxFaults)
			}
		default:
			return p, fmt.Errorf("plan: unknown field %q", key)
		}
	}
	if !seen["seed"] || !seen["scenario"] || !seen["faults"] {
		return p, errors.New("plan: needs seed, scenario and faults (scenario before faults)")
	}
	return p, nil
}

// KillSteps are each scenario's durable steps a runnerd kill lands on: the
// kill point selectors of the testhooks build (an event type: the first
// write that enqueues it; <command>#<k>: the k-th write once the command
// arrived).
var KillSteps = map[Scenario][]string{
	ScenarioPlain:     {prp.CommandTurnStart + "#1", prp.CommandTurnStart + "#2", prp.EventTurnStarted, prp.EventRunTerminal},
	ScenarioStreaming: {prp.EventItemDelta, prp.EventRunTerminal},
	ScenarioTool:      {prp.EventSemanticToolInput, prp.CommandSemanticToolResult + "#1", prp.CommandSemanticToolResult + "#2", prp.EventRunTerminal},
	ScenarioTwoTurns:  {prp.EventRunTerminal, prp.CommandTurnStart + "#4"},
	ScenarioClose:     {prp.CommandSessionClose + "#1", prp.CommandSessionClose + "#2", prp.EventHarnessExited},
	ScenarioSuspend:   {prp.CommandRunnerSuspend + "#1", prp.CommandRunnerSuspend + "#2"},
	ScenarioWarm:      {prp.CommandRunAttach + "#1", prp.CommandRunAttach + "#2", prp.CommandRunAttach + "#3"},
}

// pointsOf lists where fault kind can strike scenario s.
func pointsOf(s Scenario, kind FaultKind) []string {
	switch kind {
	case FaultRunnerdKill:
		return KillSteps[s]
	case FaultRekey:
		return []string{PointStart}
	}
	pts := []string{PointTurn}
	switch s {
	case ScenarioTool:
		pts = append(pts, PointTool)
	case ScenarioClose:
		pts = append(pts, PointClose)
	case ScenarioSuspend:
		pts = append(pts, PointSuspend)
	case ScenarioWarm:
		pts = append(pts, PointAttach)
	}
	return pts
}

// Cell is one cell of the coverage matrix: a scenario, a durable step (or
// fault point) and a fault.
type Cell struct {
	Scenario Scenario
	Step     string
	Fault    FaultKind
}

// Cells are the matrix's cells, in order: every kill step of every
// scenario, and every other fault at the scenario's own point (the last
// it can strike: the tool call, the close, the suspend, else the turn).
// Random runs strike the other points too.
func Cells() []Cell {
	var cells []Cell
	for _, s := range Scenarios {
		for _, k := range FaultKinds {
			pts := pointsOf(s, k)
			if k != FaultRunnerdKill {
				pts = pts[len(pts)-1:]
			}
			for _, at := range pts {
				cells = append(cells, Cell{Scenario: s, Step: at, Fault: k})
			}
		}
	}
	return cells
}

// CellsOf are the cells plan p strikes.
func CellsOf(p Plan) []Cell {
	out := make([]Cell, len(p.Faults))
	for i, f := range p.Faults {
		out[i] = Cell{Scenario: p.Scenario, Step: f.At, Fault: f.Kind}
	}
	return out
}

// SeedOf turns a wave seed's text (any word) into a number.
func SeedOf(word string) uint64 {
	if n, err := strconv.ParseUint(word, 10, 64); err == nil {
		return n
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(word))
	return h.Sum64()
}

// Wave returns n plans for the wave seed: first one per cell (so a wave of
// at least len(Cells()) runs covers every cell), then random plans, half
// of them with two faults.
func Wave(seed uint64, n int) []Plan {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cells := Cells()
	plans := make([]Plan, 0, n)
	for i := range n {
		p := Plan{Seed: rng.Uint64()}
		if i < len(cells) {
			c := cells[i]
			p.Scenario, p.Faults = c.Scenario, []Fault{{Kind: c.Fault, At: c.Step}}
		} else {
			p.Scenario = Scenarios[rng.IntN(len(Scenarios))]
			p.Faults = []Fault{randomFault(rng, p.Scenario)}
			if rng.IntN(2) == 0 {
				second := randomFault(rng, p.Scenario)
				if second.Kind != p.Faults[0].Kind {
					p.Faults = append(p.Faults, second)
				}
			}
		}
		plans = append(plans, p)
	}
	return plans
}

func randomFault(rng *rand.Rand, s Scenario) Fault {
	k := FaultKinds[rng.IntN(len(FaultKinds))]
	pts := pointsOf(s, k)
	return Fault{Kind: k, At: pts[rng.IntN(len(pts))]}
}

// Has reports whether the plan holds a fault of kind k.
func (p Plan) Has(k FaultKind) bool {
	return slices.ContainsFunc(p.Faults, func(f Fault) bool { return f.Kind == k })
}
