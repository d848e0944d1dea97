package runner

import (
	"context"
	"encoding/json"

	"github.com/pcrunner/pcrunner/internal/agent"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// goalHandlers are the PRP v2 session goal commands and
// the commands the ACP provider answers rejected
// {code: provider_command_unavailable}, as the reference's ACPX executor
// does.
func (a *agentExec) goalHandlers() map[string]Handler {
	goal := func(k agent.GoalCommand) Handler {
		return func(ctx context.Context, cmd *prp.Command) (json.RawMessage, error) {
			return a.m.Goal(ctx, cmd.CommandID, k, cmd.Payload)
		}
	}
	unavailable := func(context.Context, *prp.Command) (json.RawMessage, error) {
		return nil, agent.ProviderCommandUnavailable()
	}
	return map[string]Handler{
		"session.goal.get":        goal(agent.GoalGet),
		"session.goal.set":        goal(agent.GoalSet),
		"session.goal.clear":      goal(agent.GoalClear),
		"interaction.receipt":     unavailable,
		"session.budget.increase": unavailable,
	}
}

// allHandlers are the executor's provider command handlers.
func (a *agentExec) allHandlers() map[string]Handler {
	h := a.handlers()
	for typ, g := range a.goalHandlers() {
		h[typ] = g
	}
	return h
}
