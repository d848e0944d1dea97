package runner

import (
	"context"
	"encoding/json"

	"github.com/pcrunner/pcrunner/internal/agent"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// goalHandlers are the PRP v2 session goal commands (prp.md §7.5) and
// the commands the ACP provider answers rejected
// {code: provider_command_unavailable}, as the reference's ACPX executor
// does.
func (a *agentExec) goalHandlers() map[string]handler {
	goal := func(k agent.GoalCommand) handler {
		return func(ctx context.Context, cmd *prp.Command) (json.RawMessage, error) {
			return a.m.Goal(ctx, cmd.CommandID, k, cmd.Payload)
		}
	}
	unavailable := func(context.Context, *prp.Command) (json.RawMessage, error) {
		return nil, agent.ProviderCommandUnavailable()
	}
	return map[string]handler{
		prp.CommandSessionGoalGet:        goal(agent.GoalGet),
		prp.CommandSessionGoalSet:        goal(agent.GoalSet),
		prp.CommandSessionGoalClear:      goal(agent.GoalClear),
		prp.CommandInteractionReceipt:    unavailable,
		prp.CommandSessionBudgetIncrease: unavailable,
	}
}

// allHandlers are the executor's provider command handlers.
func (a *agentExec) allHandlers() map[string]handler {
	h := a.handlers()
	for typ, g := range a.goalHandlers() {
		h[typ] = g
	}
	return h
}
