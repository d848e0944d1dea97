package prp

import (
	"fmt"
	"maps"
	"slices"
)

// Command types: the catalogue of prp.md §7.5 (SCH command*.schema.json,
// CP commandTypes). Adding a command adds its constant and its row in
// commandTable; the runner's dispatch table must then name it too (its test
// compares the two key sets).
const (
	CommandRunPrepare                = "run.prepare"
	CommandRunAttach                 = "run.attach"
	CommandRunCancel                 = "run.cancel"
	CommandSessionOpen               = "session.open"
	CommandSessionSnapshot           = "session.snapshot"
	CommandSessionClose              = "session.close"
	CommandSessionDestroy            = "session.destroy"
	CommandSessionBudgetIncrease     = "session.budget.increase"
	CommandSessionGoalGet            = "session.goal.get"
	CommandSessionGoalSet            = "session.goal.set"
	CommandSessionGoalClear          = "session.goal.clear"
	CommandTurnStart                 = "turn.start"
	CommandTurnSteer                 = "turn.steer"
	CommandTurnInterrupt             = "turn.interrupt"
	CommandTurnStop                  = "turn.stop"
	CommandRequestResolve            = "request.resolve"
	CommandInteractionReceipt        = "interaction.receipt"
	CommandSemanticToolResult        = "semantic_tool.result"
	CommandRunnerDrain               = "runner.drain"
	CommandRunnerSuspend             = "runner.suspend"
	CommandRunnerShutdown            = "runner.shutdown"
	CommandExternalProviderOperation = "external_provider.operation"
)

// CommandSpec is one row of the command catalogue.
//
// The table checks what every command envelope must satisfy for its type
// (Validate). A payload is decoded by the executor of its type, never at
// admission: a command whose envelope is valid is journaled and answered
// even when its payload is refused, whereas ErrInvalidCommand is fatal for
// the runner.
type CommandSpec struct {
	// MinSchema is the lowest command schema version that carries the type
	// (R-state Command::validate).
	MinSchema int
	// Terminal marks the commands that leave a terminal lifecycle and
	// close the connection after their result is acknowledged (prp.md §7.4).
	Terminal bool
}

// commandTable is the catalogue, keyed by command type. The comment on a
// row names the Go type that decodes its payload where one exists.
var commandTable = map[string]CommandSpec{
	CommandRunPrepare:            {MinSchema: 1},
	CommandRunAttach:             {MinSchema: 1}, // rotates a warm runner (§9.5); paperclipNextAuthority: ParseNextAuthority
	CommandRunCancel:             {MinSchema: 1},
	CommandSessionOpen:           {MinSchema: 1},
	CommandSessionSnapshot:       {MinSchema: 1},
	CommandSessionClose:          {MinSchema: 1},
	CommandSessionDestroy:        {MinSchema: 1},
	CommandSessionBudgetIncrease: {MinSchema: 1},
	CommandSessionGoalGet:        {MinSchema: 2},
	CommandSessionGoalSet:        {MinSchema: 2},
	CommandSessionGoalClear:      {MinSchema: 2},
	CommandTurnStart:             {MinSchema: 1},
	CommandTurnSteer:             {MinSchema: 1},
	CommandTurnInterrupt:         {MinSchema: 1},
	CommandTurnStop:              {MinSchema: 1},
	CommandRequestResolve:        {MinSchema: 1},
	CommandInteractionReceipt:    {MinSchema: 1},
	CommandSemanticToolResult:    {MinSchema: 1}, // toolcall.ResultCommand
	CommandRunnerDrain:           {MinSchema: 1},
	CommandRunnerSuspend:         {MinSchema: 1, Terminal: true},
	CommandRunnerShutdown:        {MinSchema: 1, Terminal: true},
	// v3 only; no executor in this runner, so it is answered
	// command_not_implemented.
	CommandExternalProviderOperation: {MinSchema: 3},
}

// LookupCommand returns the catalogue row of a command type.
func LookupCommand(commandType string) (CommandSpec, bool) {
	s, ok := commandTable[commandType]
	return s, ok
}

// CommandTypes returns every command type of the catalogue, sorted.
func CommandTypes() []string {
	return slices.Sorted(maps.Keys(commandTable))
}

// IsTerminalCommand reports whether commandType is runner.suspend or
// runner.shutdown (prp.md §7.4).
func IsTerminalCommand(commandType string) bool {
	return commandTable[commandType].Terminal
}

// checkType applies the catalogue to a command of commandType sent under
// command schema version (prp.md §7.2 step 1).
func checkType(commandType string, version int) error {
	spec, ok := commandTable[commandType]
	if !ok {
		return fmt.Errorf("validate command: %w: unknown type", ErrInvalidCommand)
	}
	if version < spec.MinSchema {
		return fmt.Errorf("validate command: %w: type %s needs command schema v%d", ErrInvalidCommand, commandType, spec.MinSchema)
	}
	return nil
}
